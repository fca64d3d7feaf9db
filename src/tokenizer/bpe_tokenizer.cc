#include "tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "tokenizer/unicode.h"

namespace uniprefill::tokenizer {
namespace {

using nlohmann::json;

// Encode remembers the ids of pre-tokens up to this long, up to this many per call.
constexpr size_t kMaxCachedWordBytes = 24;
constexpr size_t kMaxCachedWords = 1 << 16;

// Ids above this are refused: they would only come from a corrupt file and cost memory.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

// End-of-turn / end-of-text markers of the Llama 3 and Qwen families.
constexpr std::string_view kEndOfGenerationNames[] = {
    "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|im_end|>", "<|endoftext|>"};

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes
// (controls, space, 0x7F..0xA0, 0xAD) map to U+0100.. in byte order.
constexpr std::array<uint16_t, 256> MakeByteToCodePoint() {
  std::array<uint16_t, 256> table{};
  uint16_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    table[b] = printable ? static_cast<uint16_t>(b) : next++;
  }
  return table;
}
constexpr std::array<uint16_t, 256> kByteToCodePoint = MakeByteToCodePoint();
constexpr uint32_t kByteAlphabetEnd = 256 + 68;  // code points past the alphabet's last

constexpr std::array<int16_t, kByteAlphabetEnd> MakeCodePointToByte() {
  std::array<int16_t, kByteAlphabetEnd> table{};
  for (auto& v : table) v = -1;
  for (int b = 0; b < 256; ++b) table[kByteToCodePoint[b]] = static_cast<int16_t>(b);
  return table;
}
constexpr std::array<int16_t, kByteAlphabetEnd> kCodePointToByte = MakeCodePointToByte();

// The bytes of a text written in the byte alphabet, or nullopt if some character is not in it.
std::optional<std::string> AlphabetBytes(const std::string& text) {
  std::string bytes;
  bytes.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const unicode::DecodedChar c = unicode::DecodeUtf8(text, pos);
    if (c.code_point >= kByteAlphabetEnd || kCodePointToByte[c.code_point] < 0) return std::nullopt;
    bytes += static_cast<char>(kCodePointToByte[c.code_point]);
    pos += c.length;
  }
  return bytes;
}

// The bytes a token stands for, as the ByteLevel decoder computes them: every character mapped
// back through the byte alphabet, or the text itself when some character is not in it.
std::string TokenBytes(const std::string& text) {
  std::optional<std::string> bytes = AlphabetBytes(text);
  return bytes ? std::move(*bytes) : text;
}

std::string ByteAlphabet(uint8_t byte) {
  std::string s;
  unicode::AppendUtf8(kByteToCodePoint[byte], &s);
  return s;
}

// The start of the character that ends at `end` (> 0); an invalid byte is its own character.
size_t PrevCharStart(std::string_view text, size_t end) {
  size_t lead = end - 1;
  while (lead > 0 && end - lead < 4 && (static_cast<uint8_t>(text[lead]) & 0xC0) == 0x80) --lead;
  return lead + unicode::DecodeUtf8(text, lead).length == end ? lead : end - 1;
}

// The start of the whitespace run that ends at `end` (Rust's char::is_whitespace, which is
// Unicode White_Space, the same set as unicode::IsSpace).
size_t WhitespaceRunStart(std::string_view text, size_t end) {
  while (end > 0) {
    const size_t lead = PrevCharStart(text, end);
    if (!unicode::IsSpace(unicode::DecodeUtf8(text, lead).code_point)) break;
    end = lead;
  }
  return end;
}

size_t WhitespaceRunEnd(std::string_view text, size_t pos) {
  while (pos < text.size()) {
    const unicode::DecodedChar c = unicode::DecodeUtf8(text, pos);
    if (!unicode::IsSpace(c.code_point)) break;
    pos += c.length;
  }
  return pos;
}

bool IsWordChar(uint32_t cp) {
  return cp == '_' || unicode::IsLetter(cp) || unicode::IsNumber(cp);
}

// The "type" member of a tokenizer.json component, or "".
std::string TypeOf(const json& component) {
  if (!component.is_object()) return {};
  auto it = component.find("type");
  return (it != component.end() && it->is_string()) ? it->get<std::string>() : std::string();
}

std::string Quote(std::string_view s) {
  constexpr size_t kMax = 120;
  std::string out = "'";
  out += s.size() > kMax ? std::string(s.substr(0, kMax)) + "..." : std::string(s);
  return out + "'";
}

}  // namespace

// Reads one tokenizer.json (already parsed) into a BpeTokenizer; every error names the source
// and the JSON path of what is wrong.
class BpeTokenizer::Loader {
 public:
  explicit Loader(std::string_view source) : source_(source) {}

  Result<BpeTokenizer> Load(const json& root, const json* config) {
    BpeTokenizer t;
    if (!root.is_object()) return Error(ErrorCode::kDataLoss, "is not a JSON object");
    const json* model = Member(root, "model");
    if (model == nullptr || !model->is_object()) {
      return Error(ErrorCode::kDataLoss, "has no 'model' object");
    }
    UP_RETURN_IF_ERROR(LoadModel(*model, &t));
    UP_RETURN_IF_ERROR(LoadAddedTokens(root, &t));
    UP_RETURN_IF_ERROR(LoadNormalizer(root, &t));
    UP_RETURN_IF_ERROR(LoadPreTokenizer(root, &t));
    UP_RETURN_IF_ERROR(LoadPostProcessor(root, &t));
    UP_RETURN_IF_ERROR(LoadDecoder(root));
    UP_RETURN_IF_ERROR(LoadConfig(config, &t));
    Finish(&t);
    return t;
  }

 private:
  Status Error(ErrorCode code, const std::string& what) const {
    return Status(code, "tokenizer.json " + Quote(source_) + ": " + what);
  }
  static const json* Member(const json& object, const char* key) {
    if (!object.is_object()) return nullptr;
    auto it = object.find(key);
    return (it == object.end() || it->is_null()) ? nullptr : &*it;
  }
  // An optional boolean member; absent or null = `fallback`.
  Status ReadBool(const json& object, const char* key, const std::string& where, bool fallback,
                  bool* out) const {
    const json* v = Member(object, key);
    if (v == nullptr) {
      *out = fallback;
      return OkStatus();
    }
    if (!v->is_boolean()) return Error(ErrorCode::kDataLoss, where + "." + key + " is not a boolean");
    *out = v->get<bool>();
    return OkStatus();
  }
  static bool IsTokenId(const json& v) {
    return v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= kMaxTokenId;
  }
  Status ReadId(const json& v, const std::string& where, int32_t* id) const {
    if (!IsTokenId(v)) {
      return Error(ErrorCode::kDataLoss,
                   where + " = " + v.dump() + " is not a token id (an integer in 0.." +
                       std::to_string(kMaxTokenId) + ")");
    }
    *id = static_cast<int32_t>(v.get<int64_t>());
    return OkStatus();
  }
  void SetToken(BpeTokenizer* t, int32_t id, const std::string& text) {
    if (static_cast<size_t>(id) >= t->texts_.size()) t->texts_.resize(id + 1);
    t->texts_[id] = text;
  }

  Status LoadModel(const json& model, BpeTokenizer* t);
  Status LoadMerges(const json& merges, BpeTokenizer* t);
  Status LoadAddedTokens(const json& root, BpeTokenizer* t);
  Status LoadNormalizer(const json& root, BpeTokenizer* t);
  Status LoadPreTokenizer(const json& root, BpeTokenizer* t);
  static bool IsDigitsThenByteLevelRegex(const json& steps);
  Status LoadTemplate(const json& processor, BpeTokenizer* t);
  Status LoadPostProcessor(const json& root, BpeTokenizer* t);
  Status LoadDecoder(const json& root);
  Status LoadConfig(const json* config, BpeTokenizer* t);
  void Finish(BpeTokenizer* t);

  std::string source_;
};

Status BpeTokenizer::Loader::LoadModel(const json& model, BpeTokenizer* t) {
  const json* type = Member(model, "type");
  if (type == nullptr || !type->is_string()) {
    return Error(ErrorCode::kDataLoss, "model.type is missing (expected \"BPE\")");
  }
  if (type->get<std::string>() != "BPE") {
    return Error(ErrorCode::kUnimplemented, "model.type " + type->dump() +
                                                " is not supported (only byte-level \"BPE\")");
  }
  if (const json* d = Member(model, "dropout");
      d != nullptr && !(d->is_number() && d->get<double>() == 0.0)) {
    return Error(ErrorCode::kUnimplemented, "model.dropout = " + d->dump() +
                                                " is not supported (BPE dropout is for training)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json* v = Member(model, key);
    if (v != nullptr && !(v->is_string() && v->get<std::string>().empty())) {
      return Error(ErrorCode::kUnimplemented,
                   std::string("model.") + key + " = " + v->dump() +
                       " is not supported (byte-level BPE files leave it null or empty)");
    }
  }
  UP_RETURN_IF_ERROR(ReadBool(model, "ignore_merges", "model", false, &t->ignore_merges_));
  UP_RETURN_IF_ERROR(ReadBool(model, "byte_fallback", "model", false, &t->byte_fallback_));
  UP_RETURN_IF_ERROR(ReadBool(model, "fuse_unk", "model", false, &t->fuse_unk_));

  const json* vocab = Member(model, "vocab");
  if (vocab == nullptr || !vocab->is_object() || vocab->empty()) {
    return Error(ErrorCode::kDataLoss, "model.vocab is missing or not a non-empty object");
  }
  std::vector<const std::string*> owner;  // [id] the vocab text that took it
  t->vocab_.reserve(vocab->size());
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    int32_t id;
    if (!IsTokenId(it.value())) {
      return ReadId(it.value(), "model.vocab[" + Quote(it.key()) + "]", &id);  // the error
    }
    id = it.value().get<int32_t>();
    if (static_cast<size_t>(id) >= owner.size()) owner.resize(id + 1, nullptr);
    if (owner[id] != nullptr) {
      return Error(ErrorCode::kDataLoss, "model.vocab gives id " + std::to_string(id) +
                                             " to both " + Quote(*owner[id]) + " and " +
                                             Quote(it.key()));
    }
    owner[id] = &it.key();
    SetToken(t, id, it.key());
    t->vocab_.emplace(it.key(), id);
  }
  if (const json* unk = Member(model, "unk_token"); unk != nullptr) {
    if (!unk->is_string()) return Error(ErrorCode::kDataLoss, "model.unk_token is not a string");
    auto it = t->vocab_.find(unk->get<std::string>());
    if (it == t->vocab_.end()) {
      return Error(ErrorCode::kDataLoss,
                   "model.unk_token " + unk->dump() + " is not in model.vocab");
    }
    t->unk_id_ = it->second;
  }
  const json* merges = Member(model, "merges");
  if (merges == nullptr || !merges->is_array()) {
    return Error(ErrorCode::kDataLoss, "model.merges is missing or not an array");
  }
  return LoadMerges(*merges, t);
}

Status BpeTokenizer::Loader::LoadMerges(const json& merges, BpeTokenizer* t) {
  t->merges_.reserve(merges.size());
  std::string left, right, merged_text;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    auto where = [&] { return "model.merges[" + std::to_string(rank) + "] " + m.dump(); };
    if (m.is_string()) {  // "left right"
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos) {
        return Error(ErrorCode::kDataLoss, where() + " is not \"left right\"");
      }
      left.assign(s, 0, space);
      right.assign(s, space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get_ref<const std::string&>();
      right = m[1].get_ref<const std::string&>();
    } else {
      return Error(ErrorCode::kDataLoss, where() + " is neither \"left right\" nor [left, right]");
    }
    int32_t ids[2];
    const std::string* parts[2] = {&left, &right};
    for (int i = 0; i < 2; ++i) {
      auto it = t->vocab_.find(*parts[i]);
      if (it == t->vocab_.end()) {
        return Error(ErrorCode::kDataLoss,
                     where() + " uses " + Quote(*parts[i]) + ", which is not in model.vocab");
      }
      ids[i] = it->second;
    }
    merged_text.assign(left).append(right);
    auto merged = t->vocab_.find(merged_text);
    if (merged == t->vocab_.end()) {
      return Error(ErrorCode::kDataLoss,
                   where() + " makes " + Quote(left + right) + ", which is not in model.vocab");
    }
    // Like `tokenizers`, a pair listed twice keeps its last rank.
    t->merges_[(static_cast<uint64_t>(ids[0]) << 32) | static_cast<uint32_t>(ids[1])] = {
        static_cast<int32_t>(rank), merged->second};
  }
  return OkStatus();
}

Status BpeTokenizer::Loader::LoadAddedTokens(const json& root, BpeTokenizer* t) {
  const json* added = Member(root, "added_tokens");
  if (added == nullptr) return OkStatus();
  if (!added->is_array()) return Error(ErrorCode::kDataLoss, "added_tokens is not an array");
  for (size_t i = 0; i < added->size(); ++i) {
    const json& a = (*added)[i];
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    const json* content = Member(a, "content");
    const json* id = Member(a, "id");
    if (content == nullptr || !content->is_string() || content->get<std::string>().empty() ||
        id == nullptr) {
      return Error(ErrorCode::kDataLoss, where + " needs a non-empty 'content' and an 'id'");
    }
    AddedToken token;
    token.content = content->get<std::string>();
    UP_RETURN_IF_ERROR(ReadId(*id, where + ".id", &token.id));
    UP_RETURN_IF_ERROR(ReadBool(a, "special", where, false, &token.special));
    UP_RETURN_IF_ERROR(ReadBool(a, "lstrip", where, false, &token.lstrip));
    UP_RETURN_IF_ERROR(ReadBool(a, "rstrip", where, false, &token.rstrip));
    UP_RETURN_IF_ERROR(ReadBool(a, "single_word", where, false, &token.single_word));
    UP_RETURN_IF_ERROR(ReadBool(a, "normalized", where, !token.special, &token.normalized));
    const bool in_vocab =
        static_cast<size_t>(token.id) < t->texts_.size() && !t->texts_[token.id].empty();
    if (in_vocab && t->texts_[token.id] != token.content) {
      return Error(ErrorCode::kDataLoss, where + " " + Quote(token.content) + " has id " +
                                             std::to_string(token.id) + ", which model.vocab " +
                                             "gives to " + Quote(t->texts_[token.id]));
    }
    SetToken(t, token.id, token.content);
    t->added_index_[token.content] = token.id;
    const int32_t index = static_cast<int32_t>(t->added_.size());
    TrieInsert(token.normalized ? &t->normalized_trie_ : &t->raw_trie_, token.content, index);
    t->has_normalized_added_ |= token.normalized;
    t->added_.push_back(std::move(token));
  }
  return OkStatus();
}

Status BpeTokenizer::Loader::LoadNormalizer(const json& root, BpeTokenizer* t) {
  const json* n = Member(root, "normalizer");
  if (n == nullptr) return OkStatus();
  if (TypeOf(*n) == "NFC") {
    t->nfc_ = true;
    return OkStatus();
  }
  return Error(ErrorCode::kUnimplemented,
               "normalizer " + n->dump().substr(0, 200) + " is not supported (only null or NFC)");
}

// Sequence [Digits (individual_digits), ByteLevel (use_regex, no prefix space)]: SmolLM, StarCoder.
bool BpeTokenizer::Loader::IsDigitsThenByteLevelRegex(const json& steps) {
  const json& digits = steps[0];
  const json& byte_level = steps[1];
  const json* individual = Member(digits, "individual_digits");
  const json* prefix_space = Member(byte_level, "add_prefix_space");
  const json* use_regex = Member(byte_level, "use_regex");
  return TypeOf(digits) == "Digits" && individual != nullptr && *individual == true &&
         TypeOf(byte_level) == "ByteLevel" && (prefix_space == nullptr || *prefix_space == false) &&
         (use_regex == nullptr || *use_regex == true);  // tokenizers' default is use_regex true
}

Status BpeTokenizer::Loader::LoadPreTokenizer(const json& root, BpeTokenizer* t) {
  const json* p = Member(root, "pre_tokenizer");
  const std::string expected =
      " (expected a Sequence of Split with the Llama 3 or Qwen2 regex, behavior \"Isolated\", "
      "then ByteLevel with use_regex false and add_prefix_space false; or a Sequence of Digits "
      "with individual_digits, then ByteLevel with use_regex true and add_prefix_space false)";
  if (p == nullptr) return Error(ErrorCode::kUnimplemented, "pre_tokenizer is missing" + expected);
  const json* steps = Member(*p, "pretokenizers");
  if (TypeOf(*p) != "Sequence" || steps == nullptr || !steps->is_array() || steps->size() != 2) {
    return Error(ErrorCode::kUnimplemented,
                 "pre_tokenizer " + p->dump().substr(0, 300) + " is not supported" + expected);
  }
  if (IsDigitsThenByteLevelRegex(*steps)) {
    t->pre_tokenizer_ = PreTokenizerKind::kDigitsGpt2;
    return OkStatus();
  }
  const json& split = (*steps)[0];
  const json& byte_level = (*steps)[1];
  const json* pattern_object = Member(split, "pattern");
  const json* pattern = pattern_object ? Member(*pattern_object, "Regex") : nullptr;
  const json* behavior = Member(split, "behavior");
  const json* invert = Member(split, "invert");
  if (TypeOf(split) != "Split" || pattern == nullptr || !pattern->is_string() ||
      behavior == nullptr || *behavior != "Isolated" || (invert != nullptr && *invert != false)) {
    return Error(ErrorCode::kUnimplemented, "pre_tokenizer.pretokenizers[0] " +
                                                split.dump().substr(0, 300) +
                                                " is not supported" + expected);
  }
  const std::optional<PreTokenizerKind> kind = RecognisePattern(pattern->get<std::string>());
  if (!kind) {
    return Error(ErrorCode::kUnimplemented,
                 "pre_tokenizer Split regex " + pattern->dump() +
                     " is not one we implement (the Llama 3 and Qwen2 patterns are)");
  }
  t->pre_tokenizer_ = *kind;
  const json* prefix_space = Member(byte_level, "add_prefix_space");
  const json* use_regex = Member(byte_level, "use_regex");
  if (TypeOf(byte_level) != "ByteLevel" || (prefix_space != nullptr && *prefix_space != false) ||
      use_regex == nullptr || *use_regex != false) {
    return Error(ErrorCode::kUnimplemented, "pre_tokenizer.pretokenizers[1] " +
                                                byte_level.dump().substr(0, 300) +
                                                " is not supported" + expected);
  }
  return OkStatus();
}

// TemplateProcessing: the "single" template's special tokens before and after the sequence $A.
Status BpeTokenizer::Loader::LoadTemplate(const json& processor, BpeTokenizer* t) {
  const json* single = Member(processor, "single");
  const json* specials = Member(processor, "special_tokens");
  if (single == nullptr || !single->is_array() || specials == nullptr || !specials->is_object()) {
    return Error(ErrorCode::kDataLoss,
                 "post_processor TemplateProcessing needs 'single' and 'special_tokens'");
  }
  bool after_sequence = false;
  for (const json& item : *single) {
    if (Member(item, "Sequence") != nullptr) {
      after_sequence = true;
      continue;
    }
    const json* special = Member(item, "SpecialToken");
    const json* name = special ? Member(*special, "id") : nullptr;
    const json* entry = name && name->is_string() ? Member(*specials, name->get<std::string>().c_str())
                                                  : nullptr;
    const json* ids = entry ? Member(*entry, "ids") : nullptr;
    if (ids == nullptr || !ids->is_array()) {
      return Error(ErrorCode::kDataLoss, "post_processor template item " + item.dump() +
                                             " names no entry of special_tokens with 'ids'");
    }
    for (const json& v : *ids) {
      int32_t id;
      UP_RETURN_IF_ERROR(ReadId(v, "post_processor special token " + name->dump(), &id));
      (after_sequence ? t->suffix_ids_ : t->prefix_ids_).push_back(id);
    }
  }
  return OkStatus();
}

Status BpeTokenizer::Loader::LoadPostProcessor(const json& root, BpeTokenizer* t) {
  const json* p = Member(root, "post_processor");
  if (p == nullptr) return OkStatus();
  std::vector<const json*> processors = {p};
  if (TypeOf(*p) == "Sequence") {
    const json* list = Member(*p, "processors");
    if (list == nullptr || !list->is_array()) {
      return Error(ErrorCode::kDataLoss, "post_processor Sequence has no 'processors' array");
    }
    processors.clear();
    for (const json& q : *list) processors.push_back(&q);
  }
  for (const json* q : processors) {
    const std::string type = TypeOf(*q);
    if (type == "ByteLevel") continue;  // offsets only
    if (type == "TemplateProcessing") {
      UP_RETURN_IF_ERROR(LoadTemplate(*q, t));
      continue;
    }
    return Error(ErrorCode::kUnimplemented,
                 "post_processor " + q->dump().substr(0, 200) +
                     " is not supported (only ByteLevel, TemplateProcessing or a Sequence of them)");
  }
  return OkStatus();
}

Status BpeTokenizer::Loader::LoadDecoder(const json& root) {
  const json* d = Member(root, "decoder");
  if (d != nullptr && TypeOf(*d) == "ByteLevel") return OkStatus();
  return Error(ErrorCode::kUnimplemented,
               "decoder " + (d ? d->dump().substr(0, 200) : std::string("(missing)")) +
                   " is not supported (only ByteLevel)");
}

// tokenizer_config.json: eos_token / bos_token, each a string or {"content": string}.
Status BpeTokenizer::Loader::LoadConfig(const json* config, BpeTokenizer* t) {
  for (const std::vector<int32_t>* ids : {&t->prefix_ids_, &t->suffix_ids_}) {
    for (int32_t id : *ids) {
      if (static_cast<size_t>(id) >= t->texts_.size() || t->texts_[id].empty()) {
        return Error(ErrorCode::kDataLoss, "post_processor template uses id " +
                                               std::to_string(id) + ", which is no token");
      }
    }
  }
  if (!t->prefix_ids_.empty()) t->bos_id_ = t->prefix_ids_.front();
  t->add_bos_ = !t->prefix_ids_.empty();
  if (config == nullptr) return OkStatus();
  if (!config->is_object()) {
    return Error(ErrorCode::kDataLoss, "tokenizer_config.json is not a JSON object");
  }
  auto token_of = [&](const char* key) -> int32_t {
    const json* v = Member(*config, key);
    if (v != nullptr && v->is_object()) v = Member(*v, "content");
    return (v != nullptr && v->is_string()) ? t->TokenId(v->get<std::string>()) : -1;
  };
  t->eos_id_ = token_of("eos_token");
  if (t->bos_id_ < 0) t->bos_id_ = token_of("bos_token");
  return OkStatus();
}

void BpeTokenizer::Loader::Finish(BpeTokenizer* t) {
  const size_t n = t->texts_.size();
  t->pieces_.resize(n);
  t->special_.assign(n, 0);
  for (size_t id = 0; id < n; ++id) t->pieces_[id] = TokenBytes(t->texts_[id]);
  for (const AddedToken& a : t->added_) t->special_[a.id] = a.special;
  t->raw_vocab_.reserve(t->vocab_.size());
  for (const auto& [text, id] : t->vocab_) {
    // Only tokens written wholly in the byte alphabet can equal a pre-token's mapped bytes.
    if (std::optional<std::string> bytes = AlphabetBytes(text)) {
      t->raw_vocab_.emplace(std::move(*bytes), id);
    }
  }
  for (int b = 0; b < 256; ++b) {
    const std::string ch = ByteAlphabet(static_cast<uint8_t>(b));
    auto it = t->vocab_.find(ch);
    t->byte_ids_[b] = it == t->vocab_.end() ? -1 : it->second;
    // byte_fallback looks up <0xXX> for each UTF-8 byte of the byte-alphabet character.
    t->fallback_ids_[b].fill(-1);
    for (size_t k = 0; k < ch.size(); ++k) {
      char name[8];
      snprintf(name, sizeof(name), "<0x%02X>", static_cast<uint8_t>(ch[k]));
      auto f = t->vocab_.find(std::string_view(name));
      if (f == t->vocab_.end()) {
        t->fallback_ids_[b].fill(-1);
        break;
      }
      t->fallback_ids_[b][k] = f->second;
    }
  }
  if (t->eos_id_ >= 0) t->eog_ids_.push_back(t->eos_id_);
  for (std::string_view name : kEndOfGenerationNames) {
    if (const int32_t id = t->TokenId(name); id >= 0) t->eog_ids_.push_back(id);
  }
  std::sort(t->eog_ids_.begin(), t->eog_ids_.end());
  t->eog_ids_.erase(std::unique(t->eog_ids_.begin(), t->eog_ids_.end()), t->eog_ids_.end());
}

Result<BpeTokenizer> BpeTokenizer::FromJsonString(std::string_view tokenizer_json,
                                                  std::string_view config_json,
                                                  std::string_view source) {
  Loader loader(source);
  try {
    const json root = json::parse(tokenizer_json);
    json config;
    if (!config_json.empty()) {
      try {
        config = json::parse(config_json);
      } catch (const json::exception& e) {
        return DataLoss("tokenizer_config.json next to " + Quote(source) +
                        ": not valid JSON: " + e.what());
      }
    }
    return loader.Load(root, config_json.empty() ? nullptr : &config);
  } catch (const json::parse_error& e) {
    return DataLoss("tokenizer.json " + Quote(source) + ": not valid JSON: " + e.what());
  } catch (const json::exception& e) {
    // Every access above checks types first; this is a backstop so that no input can crash.
    return DataLoss("tokenizer.json " + Quote(source) + ": unexpected structure: " + e.what());
  }
}

Result<BpeTokenizer> BpeTokenizer::FromJsonFile(const std::string& path) {
  auto read = [](const std::filesystem::path& p, std::string* out) {
    std::ifstream in(p, std::ios::binary);
    if (!in) return false;
    std::ostringstream ss;
    ss << in.rdbuf();
    *out = std::move(ss).str();
    return true;
  };
  std::string text, config;
  if (!read(path, &text)) {
    return NotFound("tokenizer.json " + Quote(path) + ": cannot open the file");
  }
  const std::filesystem::path config_path =
      std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::exists(config_path, ec) && !read(config_path, &config)) {
    return NotFound("cannot open " + Quote(config_path.string()));
  }
  return FromJsonString(text, config, path);
}

void BpeTokenizer::TrieInsert(Trie* trie, const std::string& content, int32_t added_index) {
  int32_t node = 0;
  trie->first_byte[static_cast<uint8_t>(content[0])] = true;
  for (char c : content) {
    const uint8_t b = static_cast<uint8_t>(c);
    auto& kids = trie->nodes[node].children;
    auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, int32_t{0}));
    if (it != kids.end() && it->first == b) {
      node = it->second;
      continue;
    }
    const int32_t child = static_cast<int32_t>(trie->nodes.size());
    kids.insert(it, {b, child});
    trie->nodes.emplace_back();
    node = child;
  }
  trie->nodes[node].added = added_index;
}

// tokenizers' AddedVocabulary::find_matches: leftmost-longest matches (Aho-Corasick), each
// consuming its text even when it is then skipped (a special token with parse_special = false, a
// single_word token inside a word).
std::vector<BpeTokenizer::Fragment> BpeTokenizer::SplitAdded(std::string_view text,
                                                             const Trie& trie,
                                                             bool parse_special) const {
  std::vector<Fragment> fragments;
  size_t start_offset = 0;
  for (size_t pos = 0; pos < text.size();) {
    if (!trie.first_byte[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    int32_t node = 0, match = -1;
    size_t match_end = 0;
    for (size_t k = pos; k < text.size(); ++k) {
      const auto& kids = trie.nodes[node].children;
      const uint8_t b = static_cast<uint8_t>(text[k]);
      auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, int32_t{0}));
      if (it == kids.end() || it->first != b) break;
      node = it->second;
      if (trie.nodes[node].added >= 0) {
        match = trie.nodes[node].added;
        match_end = k + 1;
      }
    }
    if (match < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = added_[match];
    size_t start = pos, stop = match_end;
    pos = match_end;
    if (token.special && !parse_special) continue;
    if (token.single_word) {
      const bool word_before =
          start > 0 &&
          IsWordChar(unicode::DecodeUtf8(text, PrevCharStart(text, start)).code_point);
      const bool word_after =
          stop < text.size() && IsWordChar(unicode::DecodeUtf8(text, stop).code_point);
      if (word_before || word_after) continue;
    }
    if (token.lstrip) start = std::max(WhitespaceRunStart(text, start), start_offset);
    if (token.rstrip) stop = WhitespaceRunEnd(text, stop);
    if (start > start_offset) fragments.push_back({-1, start_offset, start});
    fragments.push_back({token.id, start, stop});
    start_offset = stop;
  }
  if (start_offset < text.size()) fragments.push_back({-1, start_offset, text.size()});
  return fragments;
}

const BpeTokenizer::Merge* BpeTokenizer::FindMerge(int32_t left, int32_t right) const {
  auto it = merges_.find((static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right));
  return it == merges_.end() ? nullptr : &it->second;
}

// tokenizers' BPE::merge_word + Word::merge_all on one pre-token.
void BpeTokenizer::EncodeWord(std::string_view word, Scratch* scratch,
                              std::vector<int32_t>* out) const {
  if (ignore_merges_) {
    auto it = raw_vocab_.find(word);
    if (it != raw_vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  std::vector<Symbol>& symbols = scratch->symbols;
  symbols.clear();
  auto add = [&](int32_t id, uint32_t length) { symbols.push_back({id, -1, -1, length}); };
  uint32_t pending_unk = 0;  // bytes of an <unk> not yet added (fuse_unk grows it)
  auto flush_unk = [&] {
    if (pending_unk != 0) add(unk_id_, pending_unk);
    pending_unk = 0;
  };
  for (char c : word) {
    const uint8_t b = static_cast<uint8_t>(c);
    if (byte_ids_[b] >= 0) {
      flush_unk();
      add(byte_ids_[b], 1);
    } else if (byte_fallback_ && fallback_ids_[b][0] >= 0) {
      flush_unk();
      for (int32_t id : fallback_ids_[b]) {
        if (id >= 0) add(id, 1);
      }
    } else if (unk_id_ >= 0) {
      if (pending_unk != 0 && !fuse_unk_) flush_unk();
      ++pending_unk;
    }  // else: the byte is dropped, as tokenizers does without an unk token
  }
  flush_unk();
  const int32_t n = static_cast<int32_t>(symbols.size());
  for (int32_t i = 0; i < n; ++i) {
    symbols[i].prev = i - 1;
    symbols[i].next = i + 1 < n ? i + 1 : -1;
  }

  // Min-heap on (rank, position): the lowest rank first, ties leftmost.
  auto& heap = scratch->heap;
  heap.clear();
  auto push = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    if (const Merge* m = FindMerge(symbols[pos].id, symbols[next].id)) {
      heap.emplace_back((static_cast<int64_t>(m->rank) << 32) | pos, m->id);
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    const auto [key, new_id] = heap.back();
    heap.pop_back();
    const int32_t pos = static_cast<int32_t>(key & 0xFFFFFFFF);
    Symbol& left = symbols[pos];
    if (left.length == 0 || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    // Stale entry: the pair changed since it was queued.
    const Merge* m = FindMerge(left.id, right.id);
    if (m == nullptr || m->id != new_id) continue;
    left.id = new_id;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = pos;
    if (left.prev >= 0) push(left.prev);
    push(pos);
  }
  for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = symbols[i].next) out->push_back(symbols[i].id);
}

void BpeTokenizer::EncodeNormalized(std::string_view text, bool parse_special, Scratch* scratch,
                                    std::vector<int32_t>* out) const {
  auto encode_piece = [&](std::string_view piece) {
    scratch->pre_tokens.clear();
    PreTokenize(pre_tokenizer_, piece, &scratch->pre_tokens);
    for (std::string_view word : scratch->pre_tokens) {
      if (word.size() > kMaxCachedWordBytes) {
        EncodeWord(word, scratch, out);
        continue;
      }
      if (auto it = scratch->cache.find(word); it != scratch->cache.end()) {
        const auto [offset, count] = it->second;
        for (uint32_t i = 0; i < count; ++i) out->push_back((*out)[offset + i]);
        continue;
      }
      const size_t offset = out->size();
      EncodeWord(word, scratch, out);
      if (scratch->cache.size() < kMaxCachedWords) {
        scratch->cache.emplace(word, std::make_pair(static_cast<uint32_t>(offset),
                                                    static_cast<uint32_t>(out->size() - offset)));
      }
    }
  };
  if (!has_normalized_added_) {
    encode_piece(text);
    return;
  }
  for (const Fragment& f : SplitAdded(text, normalized_trie_, parse_special)) {
    if (f.token >= 0) {
      out->push_back(f.token);
    } else {
      encode_piece(text.substr(f.begin, f.end - f.begin));
    }
  }
}

std::vector<int32_t> BpeTokenizer::Encode(std::string_view text, bool add_special,
                                          bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + prefix_ids_.size() + suffix_ids_.size() + 1);
  if (add_special) out.insert(out.end(), prefix_ids_.begin(), prefix_ids_.end());
  Scratch scratch;
  for (const Fragment& f : SplitAdded(text, raw_trie_, parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      continue;
    }
    const std::string_view piece = text.substr(f.begin, f.end - f.begin);
    if (nfc_) {
      const std::string normalized = unicode::Nfc(piece);
      EncodeNormalized(normalized, parse_special, &scratch, &out);
    } else {
      EncodeNormalized(piece, parse_special, &scratch, &out);
    }
  }
  if (add_special) out.insert(out.end(), suffix_ids_.begin(), suffix_ids_.end());
  return out;
}

std::string BpeTokenizer::TokenToPiece(int32_t id, bool render_special) const {
  if (id < 0 || id >= vocab_size() || (special_[id] && !render_special)) return {};
  return pieces_[id];
}

std::string BpeTokenizer::Decode(std::span<const int32_t> ids, DecodeOptions options) const {
  if (options.remove_special && add_bos_ && !ids.empty() && ids.front() == bos_id_) {
    ids = ids.subspan(1);
  }
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size() || (special_[id] && !options.render_special)) continue;
    out += pieces_[id];
  }
  return out;
}

bool BpeTokenizer::IsEndOfGeneration(int32_t id) const {
  return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id);
}

int32_t BpeTokenizer::TokenId(std::string_view text) const {
  if (auto it = added_index_.find(text); it != added_index_.end()) return it->second;
  if (auto it = vocab_.find(text); it != vocab_.end()) return it->second;
  return -1;
}

}  // namespace uniprefill::tokenizer
