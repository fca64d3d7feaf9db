// RULER synthetic tasks (see ruler_tasks.h): the task table, one builder per task family and the
// search that fits the haystack size to the target length.
#include "eval/ruler_tasks.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <unordered_set>
#include <utility>

#include "eval/haystacks.h"
#include "eval/ruler_words.h"

namespace uniprefill::eval {
namespace {

// Independent random streams of a sample (MakeRng's `stream`), so that e.g. growing the haystack
// leaves keys, values and depths unchanged.
enum Stream : uint64_t {
  kNeedleStream = 100,  // keys, values, needle order, queries, chain names, coded vocabulary
  kDepthStream,         // needle depths
  kHaystackStream,      // distractor needles, report text seed, cwe word pool seed
  kShuffleStream,       // word order of cwe and fwe lists
};

constexpr int kMaxCounterCalls = 15;
constexpr int kMinFillPercent = 98;

// A task with its seed-determined parts (keys, values, depths) fixed: `build(units)` makes the
// sample with a haystack of `units` units (prompt_tokens and the task-wide fields are set by the
// caller).
struct TaskInstance {
  size_t min_units = 1;
  size_t probe_units = 32;  // the second size measured, added to min_units
  size_t max_units = 1 << 22;
  std::function<RulerSample(size_t units)> build;
};

using InstanceFactory = TaskInstance (*)(uint64_t seed);

struct TaskEntry {
  RulerTaskInfo info;
  InstanceFactory make;
};

// --- Shared pieces -------------------------------------------------------------------------------

// `input` = head + haystack + tail, with the needle offsets moved into `input`.
void SetInput(const std::string& head, const HaystackWithNeedles& haystack, const std::string& tail,
              RulerSample* s) {
  s->input = head;
  s->haystack_begin = s->input.size();
  s->input += haystack.text;
  s->haystack_end = s->input.size();
  s->input += tail;
  s->needle_offsets.clear();
  for (size_t off : haystack.needle_offsets) s->needle_offsets.push_back(s->haystack_begin + off);
}

// `n` distinct depths drawn uniformly in [0, 1], sorted ascending.
std::vector<double> DrawDepths(uint64_t seed, size_t n) {
  Rng rng = MakeRng(seed, kDepthStream);
  std::vector<double> depths;
  while (depths.size() < n) {
    const double d = UniformUnit(rng);
    if (std::find(depths.begin(), depths.end(), d) == depths.end()) depths.push_back(d);
  }
  std::sort(depths.begin(), depths.end());
  return depths;
}

std::vector<std::string> RepeatNoise(size_t units) {
  return std::vector<std::string>(units, std::string(NoiseFiller()));
}

std::string JoinQueries(const std::vector<std::string>& queries) {
  // RULER: ', '.join(queries[:-1]) + ', and ' + queries[-1].
  if (queries.size() == 1) return queries[0];
  std::string out;
  for (size_t i = 0; i + 1 < queries.size(); ++i) out += (i > 0 ? ", " : "") + queries[i];
  return out + ", and " + queries.back();
}

// --- NIAH ----------------------------------------------------------------------------------------

enum class HaystackKind { kNoise, kReport, kNeedle };
enum class NeedleKind { kWords, kNumbers, kUuids };

struct NiahConfig {
  HaystackKind haystack;
  NeedleKind key, value;
  int keys = 1;            // RULER num_needle_k
  int values_per_key = 1;  // num_needle_v
  int queries = 1;         // num_needle_q
};

const char* PluralName(NeedleKind kind) {
  switch (kind) {
    case NeedleKind::kWords: return "words";
    case NeedleKind::kNumbers: return "numbers";
    case NeedleKind::kUuids: return "uuids";
  }
  return "";
}

std::string RandomNeedlePart(NeedleKind kind, Rng& rng) {
  switch (kind) {
    case NeedleKind::kWords: return RandomWordKey(rng);
    case NeedleKind::kNumbers: return RandomNumber7(rng);
    case NeedleKind::kUuids: return RandomUuid4(rng);
  }
  return "";
}

// A draw of `kind` not yet in `used` (and now in it).
std::string FreshNeedlePart(NeedleKind kind, Rng& rng, std::unordered_set<std::string>* used) {
  for (;;) {
    std::string s = RandomNeedlePart(kind, rng);
    if (used->insert(s).second) return s;
  }
}

std::string NeedleSentence(NeedleKind value_kind, const std::string& key,
                           const std::string& value) {
  return "One of the special magic " + std::string(PluralName(value_kind)) + " for " + key +
         " is: " + value + ".";
}

void ReplaceAll(std::string* s, std::string_view from, std::string_view to) {
  for (size_t at = s->find(from); at != std::string::npos; at = s->find(from, at + to.size())) {
    s->replace(at, from.size(), to);
  }
}

struct NiahPrompt {
  std::string head, tail, answer_prefix;  // input = head + context + tail
};

// RULER's niah template and answer prefix. With a single expected value (num_needle_q *
// num_needle_v == 1) RULER makes them singular: it replaces "Some" -> "A", "are all" -> "is",
// "are" -> "is", "answers" -> "answer" in the template (its answer prefix included, so that ends in
// "is") before filling it in, and drops the "s" of the value type; the needle sentences keep the
// plural.
NiahPrompt FormatNiahPrompt(NeedleKind value_kind, const std::string& query, bool singular) {
  std::string text =
      "Some special magic {type_needle_v} are hidden within the following text. Make sure to "
      "memorize it. I will quiz you about the {type_needle_v} afterwards.\n{context}\nWhat are all "
      "the special magic {type_needle_v} for {query} mentioned in the provided text?"
      "{answer_prefix} The special magic {type_needle_v} for {query} mentioned in the provided "
      "text are";
  std::string type_v = PluralName(value_kind);
  if (singular) {
    for (auto [from, to] : {std::pair{"Some", "A"}, {"are all", "is"}, {"are", "is"},
                            {"answers", "answer"}}) {
      ReplaceAll(&text, from, to);
    }
    type_v.pop_back();
  }
  ReplaceAll(&text, "{type_needle_v}", type_v);
  ReplaceAll(&text, "{query}", query);
  constexpr std::string_view kContext = "{context}", kPrefix = "{answer_prefix}";
  const size_t context = text.find(kContext), prefix = text.find(kPrefix);
  const size_t tail = context + kContext.size();
  return {text.substr(0, context), text.substr(tail, prefix - tail),
          text.substr(prefix + kPrefix.size())};
}

TaskInstance MakeNiahInstance(const NiahConfig& c, uint64_t seed) {
  Rng rng = MakeRng(seed, kNeedleStream);
  std::unordered_set<std::string> used_keys, used_values;
  std::vector<std::string> keys;
  std::vector<std::vector<std::string>> values;
  std::vector<std::string> needles;
  for (int k = 0; k < c.keys; ++k) {
    keys.push_back(FreshNeedlePart(c.key, rng, &used_keys));
    values.emplace_back();
    for (int v = 0; v < c.values_per_key; ++v) {
      values.back().push_back(FreshNeedlePart(c.value, rng, &used_values));
      needles.push_back(NeedleSentence(c.value, keys.back(), values.back().back()));
    }
  }
  Shuffle(needles, rng);  // as RULER: needle order independent of key order
  std::vector<size_t> key_order(keys.size());
  for (size_t i = 0; i < key_order.size(); ++i) key_order[i] = i;
  Shuffle(key_order, rng);  // random.sample(range(num_needle_k), num_needle_q)
  std::vector<std::string> queries, references;
  for (int q = 0; q < c.queries; ++q) {
    queries.push_back(keys[key_order[q]]);
    for (const std::string& v : values[key_order[q]]) references.push_back(v);
  }
  NiahPrompt prompt = FormatNiahPrompt(c.value, JoinQueries(queries),
                                       /*singular=*/c.queries * c.values_per_key == 1);
  const std::string head = std::move(prompt.head), tail = std::move(prompt.tail);
  const std::string answer_prefix = std::move(prompt.answer_prefix);
  const std::vector<double> depths = DrawDepths(seed, needles.size());
  const uint64_t haystack_seed = MakeRng(seed, kHaystackStream)();

  TaskInstance inst;
  switch (c.haystack) {
    case HaystackKind::kNoise: inst.probe_units = 32; break;    // ~23 tokens a unit
    case HaystackKind::kReport: inst.probe_units = 256; break;  // ~13 tokens a sentence
    case HaystackKind::kNeedle:
      inst.probe_units = c.key == NeedleKind::kUuids ? 16 : 32;  // ~55 / ~20 tokens a line
      // Distractor keys are distinct, so word keys (adjective-noun pairs) run out; stay well below.
      if (c.key == NeedleKind::kWords) {
        inst.max_units = Adjectives().size() * Nouns().size() * 3 / 4;
      }
      break;
  }
  inst.build = [=](size_t units) {
    std::vector<std::string> unit_text;
    std::string_view separator = "\n";  // RULER joins noise and needle haystacks with "\n"
    switch (c.haystack) {
      case HaystackKind::kNoise: unit_text = RepeatNoise(units); break;
      case HaystackKind::kReport:
        unit_text = ReportSentences(haystack_seed, units);
        separator = " ";  // RULER's essay haystack: " ".join(sentences)
        break;
      case HaystackKind::kNeedle: {
        Rng hay_rng = MakeRng(seed, kHaystackStream);
        std::unordered_set<std::string> hay_keys = used_keys, hay_values = used_values;
        unit_text.reserve(units);
        for (size_t i = 0; i < units; ++i) {
          const std::string key = FreshNeedlePart(c.key, hay_rng, &hay_keys);
          unit_text.push_back(NeedleSentence(c.value, key, FreshNeedlePart(c.value, hay_rng,
                                                                           &hay_values)));
        }
        break;
      }
    }
    RulerSample s;
    SetInput(head, InsertNeedles(unit_text, separator, needles, depths), tail, &s);
    s.answer_prefix = answer_prefix;
    s.references = references;
    s.needle_depths = depths;
    return s;
  };
  return inst;
}

TaskInstance NiahSingle1(uint64_t seed) {
  return MakeNiahInstance({HaystackKind::kNoise, NeedleKind::kWords, NeedleKind::kNumbers}, seed);
}
TaskInstance NiahSingle2(uint64_t seed) {
  return MakeNiahInstance({HaystackKind::kReport, NeedleKind::kWords, NeedleKind::kNumbers}, seed);
}
TaskInstance NiahMultikey2(uint64_t seed) {
  return MakeNiahInstance({HaystackKind::kNeedle, NeedleKind::kWords, NeedleKind::kNumbers}, seed);
}
TaskInstance NiahMultikey3(uint64_t seed) {
  return MakeNiahInstance({HaystackKind::kNeedle, NeedleKind::kUuids, NeedleKind::kUuids}, seed);
}
TaskInstance NiahMultivalue(uint64_t seed) {
  return MakeNiahInstance(
      {HaystackKind::kReport, NeedleKind::kWords, NeedleKind::kNumbers, 1, 4, 1}, seed);
}
TaskInstance NiahMultiquery(uint64_t seed) {
  return MakeNiahInstance(
      {HaystackKind::kReport, NeedleKind::kWords, NeedleKind::kNumbers, 4, 1, 4}, seed);
}

// --- Variable tracking ---------------------------------------------------------------------------

constexpr int kVtHops = 4;

TaskInstance Vt(uint64_t seed) {
  Rng rng = MakeRng(seed, kNeedleStream);
  std::vector<std::string> names;
  while (names.size() < kVtHops + 1) {
    std::string n = RandomUpperLetters(rng, 5);
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(std::move(n));
  }
  const std::string value = std::to_string(10000 + UniformIndex(rng, 90000));
  std::vector<std::string> chain = {"VAR " + names[0] + " = " + value};
  for (int j = 0; j < kVtHops; ++j) {
    chain.push_back("VAR " + names[j + 1] + " = VAR " + names[j]);
  }
  const std::string head =
      "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n";
  const std::string tail =
      "\nQuestion: Find all variables that are assigned the value " + value + " in the text above.";
  const std::string answer_prefix =
      " Answer: According to the chain(s) of variable assignment in the text above, " +
      std::to_string(kVtHops + 1) + " variables are assgined the value " + value + ", they are: ";
  const std::vector<double> depths = DrawDepths(seed, chain.size());

  TaskInstance inst;
  inst.probe_units = 32;
  inst.build = [=](size_t units) {
    RulerSample s;
    SetInput(head, InsertNeedles(RepeatNoise(units), "\n", chain, depths), tail, &s);
    s.answer_prefix = answer_prefix;
    s.references = names;
    s.needle_depths = depths;
    return s;
  };
  return inst;
}

// --- Common words extraction ---------------------------------------------------------------------

constexpr int kCweCommonWords = 10, kCweCommonRepeats = 30, kCweUncommonRepeats = 3;

TaskInstance Cwe(uint64_t seed) {
  const uint64_t pool_seed = MakeRng(seed, kHaystackStream)();
  TaskInstance inst;
  inst.min_units = 1;
  inst.probe_units = 128;  // ~18 tokens per uncommon word (three numbered items)
  inst.max_units = MaxCweWords() - kCweCommonWords;
  inst.build = [=](size_t units) {
    const std::vector<std::string> pool = CweWordPool(pool_seed, kCweCommonWords + units);
    std::vector<const std::string*> list;
    list.reserve(kCweCommonWords * kCweCommonRepeats + units * kCweUncommonRepeats);
    for (size_t i = 0; i < pool.size(); ++i) {
      const int repeats = i < kCweCommonWords ? kCweCommonRepeats : kCweUncommonRepeats;
      for (int r = 0; r < repeats; ++r) list.push_back(&pool[i]);
    }
    Rng rng = MakeRng(seed, kShuffleStream);
    Shuffle(list, rng);
    HaystackWithNeedles context;  // RULER: ' '.join(f"{i + 1}. {word}")
    for (size_t i = 0; i < list.size(); ++i) {
      context.text += (i > 0 ? " " : "") + std::to_string(i + 1) + ". " + *list[i];
    }
    RulerSample s;
    SetInput(
        "Below is a numbered list of words. In these words, some appear more often than others. "
        "Memorize the ones that appear most often.\n",
        context, "\nQuestion: What are the 10 most common words in the above list?", &s);
    s.answer_prefix = " Answer: The top 10 words that appear most often in the list are:";
    s.references.assign(pool.begin(), pool.begin() + kCweCommonWords);
    return s;
  };
  return inst;
}

// --- Frequent words extraction -------------------------------------------------------------------

constexpr size_t kFweVocab = 2000;  // RULER vocab_size
constexpr double kFweZeta2 = std::numbers::pi * std::numbers::pi / 6;  // zeta(alpha = 2)
// From 73 words on, N / (k^2 zeta(2)) differs by more than 1 between ranks 4 and 5 (and more
// between higher ranks), so the counts of ranks 1..5 are strictly decreasing and ranks 2-4 are the
// unambiguous answer.
constexpr size_t kFweMinWords = 80;

// Zipf(2) counts of `words` words over the vocabulary: rank k (1-based) appears N / (k^2 zeta(2))
// times, rounded down (RULER: sampled_cnt.astype(int)).
size_t FweCount(size_t words, size_t rank) {
  return static_cast<size_t>(static_cast<double>(words) /
                             (static_cast<double>(rank * rank) * kFweZeta2));
}

TaskInstance Fwe(uint64_t seed) {
  Rng rng = MakeRng(seed, kNeedleStream);
  std::vector<std::string> vocab;
  std::unordered_set<std::string> seen;
  while (vocab.size() < kFweVocab) {
    std::string w = RandomLowerLetters(rng, 6);
    if (seen.insert(w).second) vocab.push_back(std::move(w));
  }
  vocab[0] = "...";  // the top-ranked word is noise (RULER), the answer is ranks 2-4
  TaskInstance inst;
  inst.min_units = kFweMinWords;
  inst.probe_units = 1024;  // ~1.5 tokens a word ("..." is 60% of them)
  inst.build = [=](size_t units) {
    std::vector<const std::string*> list;
    for (size_t k = 1; k <= vocab.size(); ++k) {
      const size_t n = FweCount(units, k);
      if (n == 0) break;  // counts only fall with rank
      list.insert(list.end(), n, &vocab[k - 1]);
    }
    Rng shuffle_rng = MakeRng(seed, kShuffleStream);
    Shuffle(list, shuffle_rng);
    HaystackWithNeedles context;
    for (size_t i = 0; i < list.size(); ++i) context.text += (i > 0 ? " " : "") + *list[i];
    RulerSample s;
    SetInput(
        "Read the following coded text and track the frequency of each coded word. Find the three "
        "most frequently appeared coded words. ",
        context,
        "\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What are the "
        "three most frequently appeared words in the above coded text?",
        &s);
    s.answer_prefix =
        " Answer: According to the coded text above, the three most frequently appeared words are:";
    s.references.assign(vocab.begin() + 1, vocab.begin() + 4);
    return s;
  };
  return inst;
}

// --- Task table ----------------------------------------------------------------------------------

const std::vector<TaskEntry>& TaskTable() {
  static const std::vector<TaskEntry> kTable = {
      {{"niah_single_1", 128, RulerMetric::kStringMatchAll,
        "one needle (word key, 7-digit number) in repeated noise sentences"},
       NiahSingle1},
      {{"niah_single_2", 128, RulerMetric::kStringMatchAll,
        "one needle (word key, 7-digit number) in report prose"},
       NiahSingle2},
      {{"niah_multikey_2", 128, RulerMetric::kStringMatchAll,
        "one needle among distractor needles (word keys, numbers), one per line"},
       NiahMultikey2},
      {{"niah_multikey_3", 128, RulerMetric::kStringMatchAll,
        "one needle among distractor needles with uuid keys and uuid values"},
       NiahMultikey3},
      {{"niah_multivalue", 128, RulerMetric::kStringMatchAll,
        "four numbers for one word key in report prose; all four asked"},
       NiahMultivalue},
      {{"niah_multiquery", 128, RulerMetric::kStringMatchAll,
        "four needles with four word keys in report prose; all four values asked"},
       NiahMultiquery},
      {{"vt", 30, RulerMetric::kStringMatchAll,
        "variable tracking: a 4-hop assignment chain in noise; name all 5 variables"},
       Vt},
      {{"cwe", 120, RulerMetric::kStringMatchAll,
        "common words: the 10 words listed 30 times in a numbered list (others 3 times)"},
       Cwe},
      {{"fwe", 50, RulerMetric::kStringMatchAll,
        "frequent words: the 3 most frequent coded words of a Zipf(2) text, after the dots"},
       Fwe},
  };
  return kTable;
}

const TaskEntry* FindEntry(std::string_view name) {
  for (const TaskEntry& e : TaskTable()) {
    if (e.info.name == name) return &e;
  }
  return nullptr;
}

// --- Fitting -------------------------------------------------------------------------------------

// The largest haystack (in units) whose prompt fits the budget, searched by interpolation between
// the largest size known to fit and the smallest known not to, with at most kMaxCounterCalls
// counts.
class LengthFitter {
 public:
  LengthFitter(const RulerTaskInfo& info, const TaskInstance& inst, int target,
               const PromptTokenCounter& count)
      : info_(info), inst_(inst), target_(target), count_(count),
        budget_(target - info.max_new_tokens) {}

  Result<RulerSample> Fit() {
    RulerSample smallest = Measure(inst_.min_units);
    if (smallest.prompt_tokens > budget_) {
      return InvalidArgument("ruler task " + info_.name + " needs at least " +
                             std::to_string(smallest.prompt_tokens + info_.max_new_tokens) +
                             " tokens (prompt " + std::to_string(smallest.prompt_tokens) +
                             " + " + std::to_string(info_.max_new_tokens) +
                             " generated); asked for " + std::to_string(target_));
    }
    SetLo(inst_.min_units, std::move(smallest));
    // A unit is at least a token or so (a fwe word "..." about one): search no further than 4x.
    const size_t cap =
        std::min(inst_.max_units, inst_.min_units + 4 * static_cast<size_t>(target_));
    size_t next = std::min(cap, inst_.min_units + inst_.probe_units);
    while (!Done() && calls_ < kMaxCounterCalls && next > lo_) {
      RulerSample s = Measure(next);
      if (s.prompt_tokens <= budget_) {
        SetLo(next, std::move(s));
      } else {
        hi_ = next;
        hi_tokens_ = s.prompt_tokens;
      }
      if (hi_ == 0 && lo_ == cap) break;
      next = NextGuess(cap);
    }
    if (!Filled() && hi_ == 0 && lo_ == inst_.max_units) {
      return InvalidArgument("ruler task " + info_.name + " reaches only " +
                             std::to_string(best_.prompt_tokens + info_.max_new_tokens) +
                             " tokens (" + std::to_string(lo_) +
                             " units, its maximum); asked for " + std::to_string(target_));
    }
    return std::move(best_);
  }

 private:
  RulerSample Measure(size_t units) {
    RulerSample s = inst_.build(units);
    s.prompt_tokens = count_(s.input, s.answer_prefix);
    ++calls_;
    return s;
  }
  void SetLo(size_t units, RulerSample s) {
    prev_lo_ = lo_;
    prev_lo_tokens_ = best_.prompt_tokens;
    lo_ = units;
    best_ = std::move(s);
  }
  bool Filled() const {
    return 100 * (best_.prompt_tokens + info_.max_new_tokens) >= kMinFillPercent * target_;
  }
  bool Done() const { return Filled() || (hi_ != 0 && hi_ - lo_ <= 1); }

  // Aims at the middle of the accepted window [0.98 target, target] - max_new_tokens, along the
  // line through the bracketing sizes (or, with nothing too big yet, through the two largest that
  // fit).
  size_t NextGuess(size_t cap) const {
    const double aim = budget_ - (100 - kMinFillPercent) / 200.0 * target_;
    const double x0 = hi_ != 0 ? double(lo_) : double(prev_lo_);
    const double y0 = hi_ != 0 ? double(best_.prompt_tokens) : double(prev_lo_tokens_);
    const double x1 = hi_ != 0 ? double(hi_) : double(lo_);
    const double y1 = hi_ != 0 ? double(hi_tokens_) : double(best_.prompt_tokens);
    double guess = y1 > y0 ? x0 + (aim - y0) * (x1 - x0) / (y1 - y0) : 2 * x1;
    if (hi_ != 0) {
      // Keep a bracket shrinking by at least 1/16 a step even if the count is far from linear.
      const double margin = std::max(1.0, (x1 - x0) / 16);
      guess = std::clamp(guess, x0 + margin, x1 - margin);
      return std::clamp(static_cast<size_t>(std::llround(guess)), lo_ + 1, hi_ - 1);
    }
    guess = std::max(guess, x1 + 1);
    return std::min(cap, static_cast<size_t>(std::llround(guess)));
  }

  const RulerTaskInfo& info_;
  const TaskInstance& inst_;
  const int target_;
  const PromptTokenCounter& count_;
  const int budget_;  // most prompt tokens allowed
  int calls_ = 0;
  size_t lo_ = 0;  // largest size known to fit; best_ is its sample
  size_t prev_lo_ = 0;  // the size that fit before lo_ (0 before the second fit)
  int prev_lo_tokens_ = 0;
  RulerSample best_;
  size_t hi_ = 0;  // smallest size known not to fit; 0 while none is known
  int hi_tokens_ = 0;
};

}  // namespace

const std::vector<RulerTaskInfo>& RulerTasks() {
  static const std::vector<RulerTaskInfo> kInfos = [] {
    std::vector<RulerTaskInfo> infos;
    for (const TaskEntry& e : TaskTable()) infos.push_back(e.info);
    return infos;
  }();
  return kInfos;
}

Result<const RulerTaskInfo*> FindRulerTask(std::string_view name) {
  if (const TaskEntry* e = FindEntry(name)) return &e->info;
  std::string names;
  for (const TaskEntry& e : TaskTable()) names += (names.empty() ? "" : ", ") + e.info.name;
  return InvalidArgument("unknown ruler task '" + std::string(name) + "'; valid tasks: " + names);
}

Result<RulerSample> MakeRulerSample(std::string_view task, int target_tokens, uint64_t seed,
                                    const PromptTokenCounter& count) {
  UP_ASSIGN_OR_RETURN(const RulerTaskInfo* info, FindRulerTask(task));
  if (!count) return InvalidArgument("MakeRulerSample: no token counter given");
  // Mixing in the task name keeps the tasks of one seed apart (different keys, depths, letters).
  uint64_t task_seed = 0xCBF29CE484222325ULL;  // FNV-1a of the name
  for (char ch : info->name) {
    task_seed = (task_seed ^ static_cast<unsigned char>(ch)) * 0x100000001B3ULL;
  }
  const TaskInstance inst = FindEntry(task)->make(seed ^ task_seed);
  LengthFitter fitter(*info, inst, target_tokens, count);
  UP_ASSIGN_OR_RETURN(RulerSample sample, fitter.Fit());
  sample.task = info->name;
  sample.target_tokens = target_tokens;
  sample.max_new_tokens = info->max_new_tokens;
  sample.metric = info->metric;
  return sample;
}

}  // namespace uniprefill::eval
