// BpeTokenizer: byte-level BPE (GPT-2 family: Llama 3, Qwen2/2.5/3, SmolLM2) loaded from a
// Hugging Face tokenizer.json, producing the same ids as the `tokenizers` package (checked by the
// goldens in tests/goldens/bpe/, made by tools/make_bpe_goldens.py).
//
// Encode, as `tokenizers` does it:
//   1. Added tokens are cut out of the raw text: leftmost-longest match over all of them (those
//      with normalized = false), honouring lstrip / rstrip / single_word. With parse_special =
//      false, matches of *special* added tokens are left in the text (tokenizers'
//      encode_special_tokens); non-special added tokens are split out either way.
//   2. Each remaining piece is normalised (NFC when the file says so), then split again on
//      added tokens with normalized = true.
//   3. The pre-tokenizer (Llama 3 or Qwen2 Split regex, or SmolLM's Digits + GPT-2 ByteLevel regex;
//      pretokenizer.h) splits each piece; the
//      bytes of each pre-token map to the GPT-2 byte alphabet, one symbol per byte.
//   4. With ignore_merges (Llama 3) a pre-token that is itself a vocab token is emitted whole.
//      Otherwise adjacent symbols are merged, always the pair of lowest merge rank first (ties:
//      leftmost), until no pair has a merge.
//   5. add_special adds the post_processor's TemplateProcessing tokens (Llama 3: BOS first).
// Decode: each token's bytes (byte-alphabet characters back to bytes; added tokens verbatim),
// special added tokens only when asked (render_special), as `tokenizers` decode does.
//
// Non-goals: BPE dropout, continuing_subword_prefix / end_of_word_suffix (WordPiece-style BPE),
// pre-tokenizers other than the three recognised (a load error names them), pair encodings.
// Cost: O(n log n) in the text length; loading a 150K-token file takes a few hundred ms.
// Invariants after loading: every merge's parts and result are vocab tokens; ids are in
// [0, vocab_size()); each id has its raw bytes precomputed.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/spm_tokenizer.h"  // DecodeOptions

namespace uniprefill::tokenizer {

class BpeTokenizer {
 public:
  // Reads a tokenizer.json, and the tokenizer_config.json next to it when there is one (for the
  // eos token). Errors name the file and what in it is wrong.
  static Result<BpeTokenizer> FromJsonFile(const std::string& path);
  // `tokenizer_json`: the text of a tokenizer.json; `config_json`: the text of its
  // tokenizer_config.json or empty; `source` names the input in error messages.
  static Result<BpeTokenizer> FromJsonString(std::string_view tokenizer_json,
                                             std::string_view config_json = {},
                                             std::string_view source = "tokenizer.json");

  // add_special: add the post_processor's template tokens (Llama 3: <|begin_of_text|>).
  // parse_special: split special added tokens (e.g. "<|eot_id|>") written in the text out as
  // their ids; with false they are tokenized as plain text.
  std::vector<int32_t> Encode(std::string_view text, bool add_special, bool parse_special) const;

  // The bytes of `ids` (possibly invalid UTF-8 when a character is split across tokens; `tokenizers`
  // would print U+FFFD there). Special tokens render only with options.render_special;
  // options.remove_special drops a leading BOS that add_bos() would add. Unknown ids render as
  // nothing.
  std::string Decode(std::span<const int32_t> ids, DecodeOptions options = {}) const;
  // The raw bytes of one token: the unit of streaming output.
  std::string TokenToPiece(int32_t id, bool render_special = false) const;

  int32_t vocab_size() const { return static_cast<int32_t>(texts_.size()); }
  // The first template token (Llama 3: <|begin_of_text|>); else the config's bos_token; else -1.
  int32_t bos_id() const { return bos_id_; }
  // The tokenizer_config.json's eos_token, or -1 when there is no config naming one.
  int32_t eos_id() const { return eos_id_; }
  // Whether add_special adds a BOS (the post_processor template starts with a special token).
  bool add_bos() const { return add_bos_; }
  // eos_id() and the end-of-turn / end-of-text markers of Llama 3 and Qwen when present:
  // <|eot_id|>, <|eom_id|>, <|end_of_text|>, <|im_end|>, <|endoftext|>.
  bool IsEndOfGeneration(int32_t id) const;
  const std::vector<int32_t>& end_of_generation_ids() const { return eog_ids_; }

  // The id of a vocab token (byte-alphabet form, e.g. "Ġthe") or added token content, or -1.
  int32_t TokenId(std::string_view text) const;
  // The token's text as written in tokenizer.json (byte-alphabet form for vocab tokens).
  const std::string& TokenText(int32_t id) const { return texts_[id]; }
  bool IsSpecial(int32_t id) const { return id >= 0 && id < vocab_size() && special_[id]; }
  PreTokenizerKind pre_tokenizer() const { return pre_tokenizer_; }

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using TokenIndex = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

  struct AddedToken {
    int32_t id;
    std::string content;
    bool special, lstrip, rstrip, single_word, normalized;
  };
  // A piece of the input: an added token, or text [begin, end) still to be encoded.
  struct Fragment {
    int32_t token = -1;
    size_t begin = 0, end = 0;
  };
  // Added-token trie over bytes; node 0 is the root. Leaves hold an index into added_.
  struct TrieNode {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t added = -1;
  };
  struct Trie {
    std::vector<TrieNode> nodes{1};
    std::array<bool, 256> first_byte{};
  };
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    uint32_t length;  // bytes; 0 once merged into its left neighbour
  };
  // Reusable buffers of one Encode call, and its cache of short pre-tokens already encoded
  // (bytes -> [offset, offset + count) of their ids in the output).
  struct Scratch {
    std::vector<std::string_view> pre_tokens;
    std::vector<Symbol> symbols;
    std::vector<std::pair<int64_t, int32_t>> heap;  // ((rank << 32) | pos, new id)
    std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>>
        cache;
  };
  class Loader;

  BpeTokenizer() = default;

  static void TrieInsert(Trie* trie, const std::string& content, int32_t added_index);
  std::vector<Fragment> SplitAdded(std::string_view text, const Trie& trie,
                                   bool parse_special) const;
  void EncodeNormalized(std::string_view text, bool parse_special, Scratch* scratch,
                        std::vector<int32_t>* out) const;
  void EncodeWord(std::string_view word, Scratch* scratch, std::vector<int32_t>* out) const;
  const Merge* FindMerge(int32_t left, int32_t right) const;

  // [id] token text as in tokenizer.json, its raw bytes, special flag.
  std::vector<std::string> texts_;
  std::vector<std::string> pieces_;
  std::vector<uint8_t> special_;
  TokenIndex vocab_;        // model.vocab: text -> id
  TokenIndex raw_vocab_;    // model.vocab tokens by raw bytes (for ignore_merges)
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> rank, result
  std::array<int32_t, 256> byte_ids_{};         // the one-byte token of each byte, or -1
  std::vector<AddedToken> added_;
  TokenIndex added_index_;  // content -> id
  Trie raw_trie_;           // added tokens with normalized = false
  Trie normalized_trie_;    // added tokens with normalized = true
  bool has_normalized_added_ = false;

  PreTokenizerKind pre_tokenizer_ = PreTokenizerKind::kLlama3;
  bool nfc_ = false;
  bool ignore_merges_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  int32_t unk_id_ = -1;
  std::array<std::array<int32_t, 4>, 256> fallback_ids_{};  // byte_fallback: <0xXX> ids per byte

  std::vector<int32_t> prefix_ids_, suffix_ids_;  // TemplateProcessing "single" around $A
  int32_t bos_id_ = -1, eos_id_ = -1;
  bool add_bos_ = false;
  std::vector<int32_t> eog_ids_;
};

}  // namespace uniprefill::tokenizer
