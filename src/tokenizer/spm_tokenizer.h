// SpmTokenizer: SentencePiece-style ("llama" in GGUF) tokenization and detokenization that matches
// llama.cpp's llm_tokenizer_spm token for token (checked by tests/tokenizer golden files).
//
// Encode, as llama.cpp does it:
//   1. Special-token split: control, user-defined and unknown tokens are cut out of the raw text
//      first, longest token text first (each token claims its leftmost non-overlapping matches in
//      the text not yet claimed). With parse_special = false, control and unknown tokens are left in
//      the text but user-defined ones (Gemma: whitespace runs, HTML tags) are still split out.
//   2. Each remaining raw fragment: optional space prefix (add_space_prefix, after BOS or a special
//      token), ' ' -> U+2581, split into UTF-8 characters by lead byte (an invalid lead byte is a
//      1-byte character; continuation bytes are not validated, like llama.cpp), then repeatedly merge
//      the adjacent pair whose concatenation is the highest-scoring vocab token (ties: leftmost).
//   3. Each final symbol becomes its token, or one byte token <0xXX> per byte.
//   4. BOS first when add_special and the vocab says add_bos; EOS last likewise for add_eos.
// Decode: U+2581 -> ' ', byte tokens -> raw bytes, user-defined tokens verbatim, control and unknown
// tokens only when asked (render_special), unused tokens never.
//
// Non-goals: BPE vocabularies (tokenizer.ggml.model "gpt2"), SentencePiece normalisation rules not
// carried by GGUF. Cost: O(n log n) in the text length, no quadratic cases. Texts up to 1 GiB.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/vocab.h"

namespace uniprefill::gguf {
class GgufFile;
}

namespace uniprefill::tokenizer {

struct DecodeOptions {
  bool remove_special = false;   // drop a leading BOS / trailing EOS the vocab would add
  bool render_special = false;   // show control/unknown tokens (e.g. "<end_of_turn>") as text
};

class SpmTokenizer {
 public:
  static Result<SpmTokenizer> FromGguf(const gguf::GgufFile& file);
  // Unimplemented unless vocab.model() is "llama".
  static Result<SpmTokenizer> FromVocab(Vocab vocab);

  // add_special: prepend BOS (and append EOS) as the vocab says (Gemma: BOS only).
  // parse_special: recognise control tokens such as "<start_of_turn>" written in the text; the
  // engine uses true for prompts and chat templates.
  std::vector<int32_t> Encode(std::string_view text, bool add_special, bool parse_special) const;

  // The bytes of `ids` (possibly invalid UTF-8 when a multi-byte character is split across byte
  // tokens; StreamDecoder handles streaming). Out-of-range ids render as nothing.
  std::string Decode(std::span<const int32_t> ids, DecodeOptions options = {}) const;
  // The bytes of one token (no leading-space stripping): the unit of streaming output.
  std::string TokenToPiece(int32_t id, bool render_special = false) const;

  const Vocab& vocab() const { return vocab_; }
  int32_t vocab_size() const { return vocab_.size(); }
  int32_t bos() const { return vocab_.bos(); }
  int32_t eos() const { return vocab_.eos(); }
  int32_t eot() const { return vocab_.eot(); }
  int32_t unk() const { return vocab_.unk(); }
  int32_t pad() const { return vocab_.pad(); }
  // eos, <end_of_turn> and llama.cpp's other end-of-generation markers (see Vocab).
  bool IsEndOfGeneration(int32_t id) const { return vocab_.IsEndOfGeneration(id); }

 private:
  // A piece of the input: a special token, or raw text [begin, end) still to be SPM-encoded.
  struct Fragment {
    int32_t token = -1;
    size_t begin = 0, end = 0;
  };
  // Special-token trie over byte strings; node 0 is the root.
  struct TrieNode {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t token = -1;
  };

  explicit SpmTokenizer(Vocab vocab);
  int32_t Child(int32_t node, uint8_t byte) const;
  std::vector<Fragment> SplitSpecial(std::string_view text, bool parse_special) const;
  void EncodeRaw(std::string_view raw, bool space_prefix, std::vector<int32_t>* out) const;
  void AppendPiece(int32_t id, bool render_special, bool strip_space, std::string* out) const;

  Vocab vocab_;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> special_rank_;  // [vocab] position in vocab_.special_tokens(), or -1
};

// Turns a stream of token ids into text chunks that never end inside a UTF-8 character: bytes of
// an incomplete trailing character are held back until the next token completes them (or Finish).
class StreamDecoder {
 public:
  explicit StreamDecoder(const SpmTokenizer& tokenizer, bool render_special = false)
      : piece_([&tokenizer](int32_t id, bool special) { return tokenizer.TokenToPiece(id, special); }),
        render_special_(render_special) {}
  // Any tokenizer, through its token-to-bytes function.
  explicit StreamDecoder(std::function<std::string(int32_t, bool)> piece,
                         bool render_special = false)
      : piece_(std::move(piece)), render_special_(render_special) {}
  // The text that became complete with `id` (may be empty).
  std::string Push(int32_t id);
  // Whatever is still held back (an incomplete character at the end of generation).
  std::string Finish();

 private:
  std::function<std::string(int32_t, bool)> piece_;
  bool render_special_;
  std::string pending_;
};

}  // namespace uniprefill::tokenizer
