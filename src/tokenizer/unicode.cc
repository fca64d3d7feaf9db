#include "tokenizer/unicode.h"

#include <algorithm>
#include <span>
#include <vector>

namespace uniprefill::tokenizer::unicode {
namespace {

struct CodeRange {
  uint32_t first, last;
};
struct CombiningRange {
  uint32_t first, last;
  uint8_t ccc;
};
struct Decomposition {
  uint32_t code_point, first, second;
};
struct Composition {
  uint32_t first, second, composite;
};

#include "tokenizer/unicode_tables.inc"

bool InRanges(std::span<const CodeRange> ranges, uint32_t cp) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                             [](uint32_t c, const CodeRange& r) { return c < r.first; });
  return it != ranges.begin() && cp <= std::prev(it)->last;
}

// Hangul syllables compose and decompose algorithmically (Unicode 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

uint8_t CombiningClass(uint32_t cp) {
  if (cp < 0x300 || cp == kInvalidCodePoint) return 0;
  auto it = std::upper_bound(std::begin(kCombiningRanges), std::end(kCombiningRanges), cp,
                             [](uint32_t c, const CombiningRange& r) { return c < r.first; });
  if (it == std::begin(kCombiningRanges)) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

const Decomposition* FindDecomposition(uint32_t cp) {
  auto it = std::lower_bound(
      std::begin(kDecompositions), std::end(kDecompositions), cp,
      [](const Decomposition& d, uint32_t c) { return d.code_point < c; });
  return (it != std::end(kDecompositions) && it->code_point == cp) ? &*it : nullptr;
}

// Full canonical decomposition of `cp`, appended to `out`.
void Decompose(uint32_t cp, std::vector<uint32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* d = cp < 0xC0 ? nullptr : FindDecomposition(cp);
  if (d == nullptr) {
    out->push_back(cp);
    return;
  }
  Decompose(d->first, out);
  if (d->second != 0) Decompose(d->second, out);
}

// The primary composite of (first, second), or 0.
uint32_t Compose(uint32_t first, uint32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase &&
      second < kVBase + kVCount) {
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  }
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 &&
      second > kTBase && second < kTBase + kTCount) {
    return first + (second - kTBase);
  }
  auto it = std::lower_bound(std::begin(kCompositions), std::end(kCompositions),
                             std::make_pair(first, second),
                             [](const Composition& c, const std::pair<uint32_t, uint32_t>& key) {
                               return c.first != key.first ? c.first < key.first
                                                           : c.second < key.second;
                             });
  return (it != std::end(kCompositions) && it->first == first && it->second == second)
             ? it->composite
             : 0;
}

}  // namespace

DecodedChar DecodeUtf8(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t b0 = byte(pos);
  if (b0 < 0x80) return {b0, 1};
  uint32_t length, cp, min;
  if ((b0 & 0xE0) == 0xC0) {
    length = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    length = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    length = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return {kInvalidCodePoint, 1};
  }
  if (pos + length > text.size()) return {kInvalidCodePoint, 1};
  for (uint32_t i = 1; i < length; ++i) {
    const uint8_t b = byte(pos + i);
    if ((b & 0xC0) != 0x80) return {kInvalidCodePoint, 1};
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {kInvalidCodePoint, 1};
  return {cp, length};
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool IsLetter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return cp != kInvalidCodePoint && InRanges(kLetterRanges, cp);
}

bool IsNumber(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return cp != kInvalidCodePoint && InRanges(kNumberRanges, cp);
}

bool IsSpace(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return cp != kInvalidCodePoint && InRanges(kSpaceRanges, cp);
}

std::string Nfc(std::string_view text) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return (c & 0x80) == 0; })) {
    return std::string(text);
  }
  // 1. Full canonical decomposition. An invalid byte travels as its own pseudo code point
  //    (0x80000000 | byte): class 0, composes with nothing.
  constexpr uint32_t kRawByte = 0x80000000u;
  std::vector<uint32_t> chars;
  chars.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const DecodedChar c = DecodeUtf8(text, pos);
    if (c.code_point == kInvalidCodePoint) {
      chars.push_back(kRawByte | static_cast<uint8_t>(text[pos]));
    } else {
      Decompose(c.code_point, &chars);
    }
    pos += c.length;
  }
  auto ccc = [&](uint32_t cp) { return (cp & kRawByte) ? uint8_t{0} : CombiningClass(cp); };
  // 2. Canonical ordering: stable sort of every run of non-zero combining classes.
  for (size_t i = 1; i < chars.size(); ++i) {
    const uint32_t cp = chars[i];
    const uint8_t c = ccc(cp);
    if (c == 0) continue;
    size_t j = i;
    while (j > 0 && ccc(chars[j - 1]) > c) {
      chars[j] = chars[j - 1];
      --j;
    }
    chars[j] = cp;
  }
  // 3. Canonical composition: a character joins the last starter unless blocked by a character
  //    in between of class 0 or of a class not lower than its own.
  std::vector<uint32_t> composed;
  composed.reserve(chars.size());
  size_t starter = SIZE_MAX;
  uint8_t last_class = 0;
  for (uint32_t cp : chars) {
    const uint8_t c = ccc(cp);
    if (starter != SIZE_MAX && (cp & kRawByte) == 0 && (composed[starter] & kRawByte) == 0) {
      const bool adjacent = composed.size() == starter + 1;
      if (adjacent || (last_class != 0 && last_class < c)) {
        const uint32_t composite = Compose(composed[starter], cp);
        if (composite != 0) {
          composed[starter] = composite;
          continue;
        }
      }
    }
    if (c == 0) starter = composed.size();
    last_class = c;
    composed.push_back(cp);
  }
  std::string out;
  out.reserve(text.size());
  for (uint32_t cp : composed) {
    if (cp & kRawByte) {
      out += static_cast<char>(cp & 0xFF);
    } else {
      AppendUtf8(cp, &out);
    }
  }
  return out;
}

}  // namespace uniprefill::tokenizer::unicode
