// Embedded word lists and seeded word generators for the RULER tasks (see ruler_words.h).
#include "eval/ruler_words.h"

#include <algorithm>
#include <unordered_set>

namespace uniprefill::eval {
namespace {

constexpr std::string_view kAdjectives[] = {
    "able", "absurd", "adorable", "afraid", "agile", "alert", "amber", "ancient", "angry",
    "anxious", "arctic", "awake", "bashful", "bitter", "bold", "brave", "brief", "bright", "brisk",
    "broad", "bumpy", "busy", "calm", "careful", "cheerful", "chilly", "clever", "cloudy", "clumsy",
    "coastal", "cold", "colossal", "cozy", "crimson", "crisp", "curious", "daring", "dark",
    "dazzling", "deep", "delicate", "dusty", "eager", "early", "elegant", "empty", "fancy",
    "fearless", "fierce", "filthy", "fluffy", "foggy", "fragile", "frosty", "funny", "gentle",
    "giant", "gifted", "glad", "gloomy", "golden", "graceful", "grumpy", "handsome", "happy",
    "hasty", "heavy", "helpful", "hidden", "hollow", "honest", "humble", "hungry", "icy", "idle",
    "jolly", "joyful", "kind", "large", "lazy", "little", "lively", "lonely", "loud", "lucky",
    "marble", "mellow", "merry", "mighty", "misty", "modern", "muddy", "narrow", "nervous",
    "nimble", "noble", "noisy", "odd", "old", "orange", "pale", "patient", "plain", "polite",
    "proud", "purple", "quick", "quiet", "rapid", "rare", "rough", "round", "royal", "rusty", "sad",
    "scarlet", "secret", "shaggy", "shiny", "short", "shy", "silent", "silky", "silver", "simple",
    "sleepy", "slim", "slow", "small", "smooth", "soft", "solid", "sour", "spicy", "steady",
    "sticky", "stormy", "strange", "strong", "sturdy", "sunny", "swift", "tall", "tame", "tender",
    "tidy", "tiny", "tough", "tricky", "vast", "violet", "wandering", "warm", "wary", "weary",
    "wicked", "wild", "windy", "wise", "witty", "wooden", "young", "zealous",
};

constexpr std::string_view kNouns[] = {
    "acorn", "anchor", "apple", "arrow", "badger", "balloon", "banana", "barn", "basket", "beacon",
    "bear", "beaver", "bell", "bicycle", "blanket", "bottle", "bridge", "bucket", "butterfly",
    "cabin", "camel", "candle", "canyon", "castle", "cat", "cellar", "chair", "cherry", "circus",
    "cliff", "clock", "cloud", "comet", "compass", "cottage", "crane", "crow", "crystal", "cup",
    "curtain", "daisy", "deer", "desert", "diamond", "dolphin", "donkey", "dragon", "drum", "eagle",
    "elephant", "engine", "falcon", "feather", "fence", "forest", "fountain", "fox", "garden",
    "giraffe", "glacier", "goat", "guitar", "hammer", "harbor", "hat", "hawk", "helmet", "hill",
    "horse", "island", "jacket", "jungle", "kettle", "kite", "ladder", "lake", "lamp", "lantern",
    "lemon", "leopard", "lion", "lizard", "lobster", "meadow", "mirror", "monkey", "moon",
    "mountain", "mouse", "napkin", "nest", "ocean", "octopus", "orchard", "otter", "owl", "paddle",
    "palace", "panda", "parrot", "peach", "pebble", "pencil", "penguin", "piano", "pillow",
    "pirate", "planet", "pocket", "pony", "potato", "puppy", "rabbit", "raccoon", "rainbow",
    "raven", "river", "robot", "rocket", "saddle", "sailor", "salmon", "shark", "sheep", "shell",
    "ship", "shovel", "spider", "squirrel", "star", "statue", "stone", "storm", "swan", "sword",
    "table", "teapot", "tiger", "tomato", "tower", "tractor", "train", "trumpet", "tulip", "turtle",
    "umbrella", "valley", "violin", "volcano", "wagon", "walrus", "whale", "window", "wizard",
    "wolf", "zebra",
};

constexpr std::string_view kCommonWords[] = {
    "action", "answer", "army", "autumn", "baby", "ball", "band", "bank", "base", "bath", "beach",
    "bean", "beef", "bird", "birth", "board", "boat", "body", "bone", "book", "boot", "brain",
    "bread", "breakfast", "brick", "brother", "brush", "butter", "button", "cake", "camera", "camp",
    "card", "carpet", "cart", "cause", "chain", "chalk", "cheese", "chess", "chicken", "child",
    "church", "city", "class", "coal", "coat", "coffee", "coin", "color", "copper", "corn",
    "cotton", "country", "cream", "crowd", "dance", "daughter", "dinner", "doctor", "door", "dream",
    "dress", "drink", "dust", "earth", "energy", "evening", "face", "fact", "family", "farm",
    "father", "field", "finger", "fire", "fish", "flag", "flower", "food", "foot", "friend",
    "fruit", "game", "gate", "girl", "glass", "glove", "gold", "grape", "grass", "ground", "group",
    "hair", "hand", "head", "heart", "hole", "home", "honey", "horn", "hour", "house", "idea",
    "iron", "jewel", "juice", "king", "kitchen", "knife", "knot", "lady", "land", "language",
    "leaf", "leather", "letter", "library", "light", "line", "lock", "love", "machine", "market",
    "meal", "meat", "memory", "metal", "milk", "mind", "minute", "money", "month", "morning",
    "mother", "music", "nail", "name", "nation", "neck", "night", "nose", "note", "number", "paint",
    "paper", "party", "people", "pepper", "person", "picture", "plant", "plate", "power", "queen",
    "question", "rain", "rice", "ring", "road", "rock", "roof", "room", "root", "rope", "rose",
    "salt", "sand", "school", "season", "seed", "shirt", "shoe", "shop", "silk", "sister", "skin",
    "snake", "snow", "soap", "sock", "song", "soup", "space", "spoon", "spring", "square", "stage",
    "station", "steam", "steel", "stick", "street", "string", "sugar", "summer", "system", "tail",
    "teacher", "test", "thread", "thumb", "ticket", "time", "tongue", "tooth", "town", "tree",
    "truck", "uncle", "village", "voice", "water", "wave", "week", "wheel", "wind", "wine",
    "winter", "wire", "woman", "wood", "wool", "word", "world", "yard", "year",
};

constexpr std::string_view kConsonants = "bdfghklmnprstvz";
constexpr std::string_view kVowels = "aeiou";
constexpr size_t kMaxCweWords = 100000;  // far more than a 128K-token list needs (~8,000)

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

std::string RandomLetters(Rng& rng, int length, char first) {
  std::string s(static_cast<size_t>(length), first);
  for (char& c : s) c = static_cast<char>(first + UniformIndex(rng, 26));
  return s;
}

}  // namespace

Rng MakeRng(uint64_t seed, uint64_t stream) {
  return Rng(SplitMix64(SplitMix64(seed) ^ (stream * 0xD1B54A32D192ED03ULL)));
}

uint64_t UniformIndex(Rng& rng, uint64_t n) { return rng() % n; }  // bias < n / 2^64

double UniformUnit(Rng& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

std::span<const std::string_view> Adjectives() { return kAdjectives; }
std::span<const std::string_view> Nouns() { return kNouns; }
std::span<const std::string_view> CommonWords() { return kCommonWords; }

std::string RandomWordKey(Rng& rng) {
  const std::string_view adj = kAdjectives[UniformIndex(rng, std::size(kAdjectives))];
  const std::string_view noun = kNouns[UniformIndex(rng, std::size(kNouns))];
  return std::string(adj) + "-" + std::string(noun);
}

std::string RandomNumber7(Rng& rng) { return std::to_string(1000000 + UniformIndex(rng, 9000000)); }

std::string RandomUuid4(Rng& rng) {
  uint64_t hi = rng(), lo = rng();
  hi = (hi & ~0xF000ULL) | 0x4000ULL;                           // version nibble (hex digit 13)
  lo = (lo & 0x3FFFFFFFFFFFFFFFULL) | 0x8000000000000000ULL;  // variant 10xx (hex digit 17)
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(36);
  for (int i = 0; i < 32; ++i) {
    if (i == 8 || i == 12 || i == 16 || i == 20) out += '-';
    const uint64_t word = i < 16 ? hi : lo;
    out += kHex[(word >> (60 - 4 * (i % 16))) & 0xF];
  }
  return out;
}

std::string RandomUpperLetters(Rng& rng, int length) { return RandomLetters(rng, length, 'A'); }
std::string RandomLowerLetters(Rng& rng, int length) { return RandomLetters(rng, length, 'a'); }

std::string SyllableWord(Rng& rng) {
  const int syllables = 2 + static_cast<int>(UniformIndex(rng, 2));
  std::string w;
  for (int i = 0; i < syllables; ++i) {
    w += kConsonants[UniformIndex(rng, kConsonants.size())];
    w += kVowels[UniformIndex(rng, kVowels.size())];
  }
  return w;
}

size_t MaxCweWords() { return kMaxCweWords; }

std::vector<std::string> CweWordPool(uint64_t seed, size_t count) {
  count = std::min(count, kMaxCweWords);
  // Words of three letters or fewer are left out: they hide inside longer words ("art" in "party"),
  // which would give credit for a wrong answer under substring scoring.
  std::vector<std::string> words;
  for (auto list : {Adjectives(), Nouns(), CommonWords()}) {
    for (std::string_view w : list) {
      if (w.size() >= 4) words.emplace_back(w);
    }
  }
  Rng shuffle_rng = MakeRng(seed, 1);
  Shuffle(words, shuffle_rng);
  if (words.size() >= count) {
    words.resize(count);
    return words;
  }
  std::unordered_set<std::string> seen(words.begin(), words.end());
  Rng rng = MakeRng(seed, 2);
  while (words.size() < count) {
    std::string w = SyllableWord(rng);
    if (seen.insert(w).second) words.push_back(std::move(w));
  }
  return words;
}

}  // namespace uniprefill::eval
