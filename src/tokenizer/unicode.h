// Unicode helpers for the byte-level BPE tokenizer: strict UTF-8 decoding, the character classes
// its pre-tokenizer regexes use (\p{L}, \p{N}, \s) and NFC normalisation (Qwen's normalizer).
//
// Goals: agree with Hugging Face `tokenizers` (Oniguruma classes, unicode-normalization's NFC) on
// every valid UTF-8 input; never fail on invalid input. Tables are generated from Python's
// unicodedata by tools/make_unicode_tables.py into unicode_tables.inc.
// Non-goals: other normalisation forms, case folding, grapheme or word segmentation.
// Invariants: an invalid UTF-8 sequence decodes as one byte of kInvalidCodePoint, which is no
// letter, number or space, has combining class 0 and never composes, so its byte survives NFC and
// pre-tokenization unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace uniprefill::tokenizer::unicode {

inline constexpr uint32_t kInvalidCodePoint = 0xFFFFFFFFu;

struct DecodedChar {
  uint32_t code_point;  // kInvalidCodePoint for a byte that starts no valid UTF-8 sequence
  uint32_t length;      // bytes, 1..4
};

// The character at byte `pos` (< text.size()). Overlong forms, surrogates, code points past
// U+10FFFF and truncated sequences are invalid (one byte each).
DecodedChar DecodeUtf8(std::string_view text, size_t pos);
void AppendUtf8(uint32_t code_point, std::string* out);

bool IsLetter(uint32_t code_point);  // \p{L}
bool IsNumber(uint32_t code_point);  // \p{N}
bool IsSpace(uint32_t code_point);   // Oniguruma's \s, equal to Unicode White_Space

// Canonical composition (NFC) of `text`. Invalid bytes are kept as they are and block composition.
// All-ASCII text is returned unchanged without table look-ups.
std::string Nfc(std::string_view text);

}  // namespace uniprefill::tokenizer::unicode
