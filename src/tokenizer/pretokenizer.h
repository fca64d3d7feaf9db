// Pre-tokenizers of byte-level BPE tokenizers: the Split regexes of Hugging Face tokenizer.json
// files (and the GPT-2 regex of a ByteLevel step with use_regex), written as hand-made
// Unicode-aware scanners (std::regex has no \p{L}).
//
// Goals: the same pre-tokens as `tokenizers` (Oniguruma, Split behaviour "Isolated") for the
// patterns we recognise, in one left-to-right pass with O(1) look-ahead per character except the
// whitespace alternatives, which look at one whitespace run.
// Non-goals: arbitrary regexes; a pattern we do not know is reported by RecognisePattern and the
// tokenizer refuses to load.
// Invariants: the pre-tokens of a text are non-empty, in order, and cover it exactly; invalid UTF-8
// bytes are single characters of no class (like punctuation), so any byte string is split.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

namespace uniprefill::tokenizer {

enum class PreTokenizerKind {
  // Llama 3 ("llama-bpe" in llama.cpp):
  //   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
  //   \s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // Qwen2 / Qwen2.5 / Qwen3 ("qwen2"): the same with \p{N} instead of \p{N}{1,3} (one digit each).
  kQwen2,
  // SmolLM / StarCoder ("smollm" in llama.cpp; tokenizer.json: Sequence of Digits with
  // individual_digits, then ByteLevel with use_regex): every \p{N} character is a pre-token of its
  // own, and each run between them is split by the GPT-2 regex, case-sensitive contractions:
  //   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  // A run ends at a digit as at the end of the text, so "a 1" splits as "a", " ", "1".
  kDigitsGpt2,
};

// The kind whose Split regex is exactly `pattern` (as written in tokenizer.json), if any
// (kDigitsGpt2 has no Split step: the tokenizer.json loader recognises its Sequence itself).
std::optional<PreTokenizerKind> RecognisePattern(std::string_view pattern);
const char* PreTokenizerName(PreTokenizerKind kind);

// Appends the pre-tokens of `text` to `out` (views into `text`).
void PreTokenize(PreTokenizerKind kind, std::string_view text, std::vector<std::string_view>* out);

}  // namespace uniprefill::tokenizer
