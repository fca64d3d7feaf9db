#include "tokenizer/vocab.h"

#include <algorithm>
#include <string>
#include <utility>

#include "io/gguf.h"

namespace uniprefill::tokenizer {
namespace {

// Texts llama.cpp (llama-vocab.cpp, load) treats as end-of-turn / end-of-generation markers whatever
// their declared type: a match gains the control attribute. Kept verbatim so that our attributes,
// and therefore special-token splitting and detokenization, agree with llama.cpp.
constexpr std::string_view kEotNames[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
    "<end_of_utterance>"};
constexpr std::string_view kEogNames[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "[e~["};

uint32_t AttrFromType(int32_t type) {
  switch (static_cast<TokenType>(type)) {
    case TokenType::kUnknown: return kAttrUnknown;
    case TokenType::kUnused: return kAttrUnused;
    case TokenType::kNormal: return kAttrNormal;
    case TokenType::kControl: return kAttrControl;
    case TokenType::kUserDefined: return kAttrUserDefined;
    case TokenType::kByte: return kAttrByte;
    default: return kAttrUndefined;
  }
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Status CheckSpecialId(const char* name, int32_t id, size_t n) {
  if (id < -1 || (id >= 0 && static_cast<size_t>(id) >= n)) {
    return InvalidArgument("tokenizer: " + std::string(name) + " token id " + std::to_string(id) +
                           " is out of range for a vocabulary of " + std::to_string(n) +
                           " tokens (use -1 for none)");
  }
  return OkStatus();
}

// Reads an optional special-token id: absent -> keep `*id`.
Status ReadOptionalId(const gguf::GgufFile& f, std::string_view key, int32_t* id) {
  if (f.Find(key) == nullptr) return OkStatus();
  Result<int64_t> v = f.GetInt(key);
  if (!v.ok()) return v.status();
  if (*v < -1 || *v > INT32_MAX) {
    return InvalidArgument("tokenizer: " + std::string(key) + " = " + std::to_string(*v) +
                           " is not a token id");
  }
  *id = static_cast<int32_t>(*v);
  return OkStatus();
}

Status ReadOptionalBool(const gguf::GgufFile& f, std::string_view key, bool* value) {
  if (f.Find(key) == nullptr) return OkStatus();
  UP_ASSIGN_OR_RETURN(*value, f.GetBool(key));
  return OkStatus();
}

}  // namespace

Result<Vocab> Vocab::Create(VocabSpec spec) {
  const size_t n = spec.tokens.size();
  if (n == 0) return InvalidArgument("tokenizer: the vocabulary has no tokens");
  if (n > static_cast<size_t>(INT32_MAX)) {
    return InvalidArgument("tokenizer: " + std::to_string(n) + " tokens exceed the int32 id range");
  }
  if (!spec.scores.empty() && spec.scores.size() != n) {
    return InvalidArgument("tokenizer: tokenizer.ggml.scores has " +
                           std::to_string(spec.scores.size()) + " entries but there are " +
                           std::to_string(n) + " tokens");
  }
  if (!spec.types.empty() && spec.types.size() != n) {
    return InvalidArgument("tokenizer: tokenizer.ggml.token_type has " +
                           std::to_string(spec.types.size()) + " entries but there are " +
                           std::to_string(n) + " tokens");
  }
  UP_RETURN_IF_ERROR(CheckSpecialId("bos", spec.bos, n));
  UP_RETURN_IF_ERROR(CheckSpecialId("eos", spec.eos, n));
  UP_RETURN_IF_ERROR(CheckSpecialId("eot", spec.eot, n));
  UP_RETURN_IF_ERROR(CheckSpecialId("unknown", spec.unk, n));
  UP_RETURN_IF_ERROR(CheckSpecialId("padding", spec.pad, n));
  if (spec.add_bos && spec.bos < 0) {
    return InvalidArgument("tokenizer: add_bos_token is true but there is no bos token id");
  }
  if (spec.add_eos && spec.eos < 0) {
    return InvalidArgument("tokenizer: add_eos_token is true but there is no eos token id");
  }

  Vocab v;
  v.model_ = std::move(spec.model);
  v.texts_ = std::move(spec.tokens);
  v.scores_ = spec.scores.empty() ? std::vector<float>(n, 0.0f) : std::move(spec.scores);
  v.attrs_.resize(n);
  v.index_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = static_cast<int32_t>(i);
    if (v.texts_[i].empty()) v.texts_[i] = "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp
    if (!v.index_.emplace(v.texts_[i], id).second) {
      return InvalidArgument("tokenizer: token text '" + v.texts_[i] + "' appears twice (ids " +
                             std::to_string(v.index_.find(v.texts_[i])->second) + " and " +
                             std::to_string(i) + "); a vocabulary needs unique texts");
    }
    v.max_token_bytes_ = std::max(v.max_token_bytes_, v.texts_[i].size());
    v.attrs_[i] = spec.types.empty() ? kAttrNormal : AttrFromType(spec.types[i]);
  }
  v.bos_ = spec.bos;
  v.eos_ = spec.eos;
  v.eot_ = spec.eot;
  v.unk_ = spec.unk;
  v.pad_ = spec.pad;
  v.add_bos_ = spec.add_bos;
  v.add_eos_ = spec.add_eos;
  v.add_space_prefix_ = spec.add_space_prefix;

  // Byte fallback: "<0xXX>" (uppercase hex), else the raw one-byte text.
  static const char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const char name[6] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    int32_t id = v.Find(std::string_view(name, 6));
    if (id < 0) id = v.Find(std::string_view(reinterpret_cast<const char*>(&b), 1));
    v.byte_tokens_[b] = id;
  }
  for (size_t i = 0; i < n; ++i) {
    if ((v.attrs_[i] & kAttrByte) == 0) continue;
    const std::string& t = v.texts_[i];
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>' || HexValue(t[3]) < 0 ||
        HexValue(t[4]) < 0) {
      return InvalidArgument("tokenizer: token " + std::to_string(i) + " '" + t +
                             "' has type byte but is not of the form <0xXX>");
    }
  }

  // llama.cpp's name-based fix-ups: end-of-turn and end-of-generation markers become control
  // tokens. Among several end-of-turn candidates the lowest id wins (llama.cpp's pick depends on
  // hash order; vocabularies in practice have at most one).
  for (std::string_view name : kEotNames) {
    const int32_t id = v.Find(name);
    if (id < 0) continue;
    if (spec.eot < 0 && (v.eot_ < 0 || id < v.eot_)) v.eot_ = id;
    v.attrs_[id] |= kAttrControl;
  }
  for (std::string_view name : kEogNames) {
    const int32_t id = v.Find(name);
    if (id < 0) continue;
    v.eog_ids_.push_back(id);
    v.attrs_[id] |= kAttrControl;
  }
  for (int32_t id : {v.eos_, v.eot_}) {
    if (id >= 0) v.eog_ids_.push_back(id);
  }
  std::sort(v.eog_ids_.begin(), v.eog_ids_.end());
  v.eog_ids_.erase(std::unique(v.eog_ids_.begin(), v.eog_ids_.end()), v.eog_ids_.end());

  // Special tokens in llama.cpp's order: ascending ids, then std::sort by text length (longest
  // first). std::sort is not stable; using the same algorithm on the same input reproduces
  // llama.cpp's order among equal lengths as well.
  for (size_t i = 0; i < n; ++i) {
    if (v.attrs_[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) {
      v.special_tokens_.push_back(static_cast<int32_t>(i));
    }
  }
  std::sort(v.special_tokens_.begin(), v.special_tokens_.end(),
            [&v](int32_t a, int32_t b) { return v.texts_[a].size() > v.texts_[b].size(); });
  return v;
}

Result<Vocab> Vocab::FromGguf(const gguf::GgufFile& f) {
  VocabSpec spec;
  UP_ASSIGN_OR_RETURN(spec.model, f.GetString("tokenizer.ggml.model"));
  if (spec.model != "llama") {
    return Unimplemented("tokenizer: tokenizer.ggml.model '" + spec.model + "' in " + f.path() +
                         " is not supported yet (only 'llama', the SentencePiece tokenizer)");
  }
  UP_ASSIGN_OR_RETURN(spec.tokens, f.GetStringArray("tokenizer.ggml.tokens"));
  if (f.Find("tokenizer.ggml.scores") != nullptr) {
    UP_ASSIGN_OR_RETURN(spec.scores, f.GetFloatArray("tokenizer.ggml.scores"));
  }
  if (f.Find("tokenizer.ggml.token_type") != nullptr) {
    UP_ASSIGN_OR_RETURN(std::vector<int64_t> types, f.GetIntArray("tokenizer.ggml.token_type"));
    spec.types.reserve(types.size());
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] < 0 || types[i] > 6) {
        return InvalidArgument("tokenizer: tokenizer.ggml.token_type[" + std::to_string(i) +
                               "] = " + std::to_string(types[i]) +
                               " is not a token type (0..6) in " + f.path());
      }
      spec.types.push_back(static_cast<int32_t>(types[i]));
    }
  }
  // llama.cpp's SPM defaults, then what the file says.
  spec.bos = 1;
  spec.eos = 2;
  spec.unk = 0;
  spec.add_bos = true;
  spec.add_eos = false;
  spec.add_space_prefix = true;
  UP_RETURN_IF_ERROR(ReadOptionalId(f, "tokenizer.ggml.bos_token_id", &spec.bos));
  UP_RETURN_IF_ERROR(ReadOptionalId(f, "tokenizer.ggml.eos_token_id", &spec.eos));
  UP_RETURN_IF_ERROR(ReadOptionalId(f, "tokenizer.ggml.eot_token_id", &spec.eot));
  UP_RETURN_IF_ERROR(ReadOptionalId(f, "tokenizer.ggml.unknown_token_id", &spec.unk));
  UP_RETURN_IF_ERROR(ReadOptionalId(f, "tokenizer.ggml.padding_token_id", &spec.pad));
  UP_RETURN_IF_ERROR(ReadOptionalBool(f, "tokenizer.ggml.add_bos_token", &spec.add_bos));
  UP_RETURN_IF_ERROR(ReadOptionalBool(f, "tokenizer.ggml.add_eos_token", &spec.add_eos));
  UP_RETURN_IF_ERROR(ReadOptionalBool(f, "tokenizer.ggml.add_space_prefix", &spec.add_space_prefix));
  Result<Vocab> v = Create(std::move(spec));
  if (!v.ok()) return Status(v.status().code(), v.status().message() + " (in " + f.path() + ")");
  return v;
}

int32_t Vocab::Find(std::string_view text) const {
  auto it = index_.find(text);
  return it == index_.end() ? -1 : it->second;
}

uint8_t Vocab::TokenToByte(int32_t id) const {
  const std::string& t = texts_[id];
  return static_cast<uint8_t>(HexValue(t[3]) * 16 + HexValue(t[4]));
}

bool Vocab::IsEndOfGeneration(int32_t id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

}  // namespace uniprefill::tokenizer
