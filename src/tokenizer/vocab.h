// Vocab: the token table a tokenizer works from (texts, scores, types, special ids and flags),
// built from GGUF `tokenizer.ggml.*` metadata or from plain arrays (tests).
//
// Goals: validate everything before use (array lengths equal, special ids in range, known token
// types) with errors that name the key, the value and the limit; derive per-token attributes exactly
// as llama.cpp does, including its name-based fix-ups, so that tokenization, detokenization and
// end-of-generation checks agree with llama.cpp token for token.
// Non-goals: the tokenization algorithms themselves (spm_tokenizer.h); BPE merges (a later issue).
// Invariants: every id in [0, size()) has a non-empty text (llama.cpp renames empty tokens
// "[EMPTY_<id>]"); texts are unique; bos/eos/unk/pad are -1 or a valid id.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace uniprefill::gguf {
class GgufFile;
}

namespace uniprefill::tokenizer {

// GGUF `tokenizer.ggml.token_type` values.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Per-token attribute bits (llama.cpp's llama_token_attr); a token may carry several.
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
};

// Everything a Vocab is made of, before validation.
struct VocabSpec {
  std::string model = "llama";         // tokenizer.ggml.model ("llama" = SentencePiece)
  std::vector<std::string> tokens;     // tokenizer.ggml.tokens
  std::vector<float> scores;           // empty = all 0
  std::vector<int32_t> types;          // TokenType values; empty = all normal
  int32_t bos = -1, eos = -1, eot = -1, unk = -1, pad = -1;  // -1 = none
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;
};

class Vocab {
 public:
  // Validates `spec` (InvalidArgument naming the problem) and derives attributes.
  static Result<Vocab> Create(VocabSpec spec);
  // Reads tokenizer.ggml.* from a GGUF file. Only "llama" (SPM) vocabularies are accepted for now
  // (Unimplemented otherwise). Defaults follow llama.cpp for SPM: add_bos true, add_eos false,
  // add_space_prefix true unless the file says otherwise.
  static Result<Vocab> FromGguf(const gguf::GgufFile& file);

  int32_t size() const { return static_cast<int32_t>(texts_.size()); }
  bool IsValid(int32_t id) const { return id >= 0 && id < size(); }
  const std::string& text(int32_t id) const { return texts_[id]; }
  float score(int32_t id) const { return scores_[id]; }
  uint32_t attr(int32_t id) const { return attrs_[id]; }
  const std::string& model() const { return model_; }

  // The id whose text is exactly `text`, or -1.
  int32_t Find(std::string_view text) const;
  // The byte-fallback token for `byte` ("<0xXX>", else the one-byte text), or -1 if absent.
  int32_t ByteToken(uint8_t byte) const { return byte_tokens_[byte]; }
  // The byte a kAttrByte token stands for (parsed from "<0xXX>"); only valid for byte tokens.
  uint8_t TokenToByte(int32_t id) const;
  size_t max_token_bytes() const { return max_token_bytes_; }

  int32_t bos() const { return bos_; }
  int32_t eos() const { return eos_; }
  int32_t eot() const { return eot_; }
  int32_t unk() const { return unk_; }
  int32_t pad() const { return pad_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }

  // End-of-generation ids, as llama.cpp collects them: eos, eot, and every token whose text is one of
  // llama.cpp's end-of-turn names (for Gemma 3: <eos> 1, <end_of_turn> 106 and "</s>" 212).
  bool IsEndOfGeneration(int32_t id) const;
  const std::vector<int32_t>& end_of_generation_ids() const { return eog_ids_; }

  // Tokens split out of raw text before SPM (control, user-defined and unknown), in llama.cpp's
  // priority order: longer texts first.
  const std::vector<int32_t>& special_tokens() const { return special_tokens_; }

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  std::string model_;
  std::vector<std::string> texts_;
  std::vector<float> scores_;
  std::vector<uint32_t> attrs_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> index_;
  std::array<int32_t, 256> byte_tokens_{};
  size_t max_token_bytes_ = 0;
  int32_t bos_ = -1, eos_ = -1, eot_ = -1, unk_ = -1, pad_ = -1;
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false;
  std::vector<int32_t> eog_ids_;
  std::vector<int32_t> special_tokens_;
};

}  // namespace uniprefill::tokenizer
