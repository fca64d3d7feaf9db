#include "tokenizer/gguf_bpe.h"

#include <string_view>

#include <nlohmann/json.hpp>

namespace uniprefill::tokenizer {
namespace {

using json = nlohmann::json;

constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// What one `tokenizer.ggml.pre` value means, as llama.cpp's vocabulary loader sets it
// (llama-vocab.cpp: the pre-tokenizer regexes of the LLAMA_VOCAB_PRE_TYPE and its flags).
struct PreRules {
  std::string_view name;    // the tokenizer.ggml.pre value
  PreTokenizerKind kind;
  bool nfc;                 // an NFC normaliser (Qwen2's tokenizer.json has one)
  bool ignore_merges;       // a pre-token that is a vocab token is emitted whole (Llama 3)
  bool default_add_bos;     // when the GGUF has no tokenizer.ggml.add_bos_token
};

constexpr PreRules kPreRules[] = {
    {"llama-bpe", PreTokenizerKind::kLlama3, false, true, true},
    {"llama3", PreTokenizerKind::kLlama3, false, true, true},
    {"qwen2", PreTokenizerKind::kQwen2, true, false, false},
    {"smollm", PreTokenizerKind::kDigitsGpt2, false, false, false},
};

const PreRules* FindPreRules(std::string_view name) {
  for (const PreRules& r : kPreRules) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

std::string SupportedPreNames() {
  std::string out;
  for (const PreRules& r : kPreRules) out += (out.empty() ? "" : ", ") + std::string(r.name);
  return out;
}

// The tokenizer.json pre_tokenizer object that makes BpeTokenizer split as `kind` does.
json PreTokenizerJson(PreTokenizerKind kind) {
  if (kind == PreTokenizerKind::kDigitsGpt2) {
    return {{"type", "Sequence"},
            {"pretokenizers",
             json::array({{{"type", "Digits"}, {"individual_digits", true}},
                          {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", true}}})}};
  }
  const char* regex = kind == PreTokenizerKind::kLlama3 ? kLlama3Regex : kQwen2Regex;
  return {{"type", "Sequence"},
          {"pretokenizers",
           json::array({{{"type", "Split"},
                         {"pattern", {{"Regex", regex}}},
                         {"behavior", "Isolated"},
                         {"invert", false}},
                        {{"type", "ByteLevel"},
                         {"add_prefix_space", false},
                         {"trim_offsets", true},
                         {"use_regex", false}}})}};
}

Result<std::vector<std::string>> Strings(const gguf::GgufFile& f, const std::string& key) {
  const auto* v = f.Find(key);
  if (!v || v->type != gguf::ValueType::kArray) {
    return DataLoss("model file " + f.path() + " lacks the " + key + " array");
  }
  std::vector<std::string> out;
  for (const auto& e : std::get<gguf::Array>(v->data).elements) {
    if (!std::holds_alternative<std::string>(e.data)) {
      return DataLoss(key + " in " + f.path() + " holds a non-string entry");
    }
    out.push_back(std::get<std::string>(e.data));
  }
  return out;
}

}  // namespace

Result<std::pair<std::string, std::string>> BpeJsonFromGguf(const gguf::GgufFile& f) {
  UP_ASSIGN_OR_RETURN(std::string model, f.GetString("tokenizer.ggml.model"));
  if (model != "gpt2") {
    return InvalidArgument("tokenizer.ggml.model is '" + model + "', not a byte-level BPE (gpt2)");
  }
  auto pre_or = f.GetString("tokenizer.ggml.pre");
  const std::string pre = pre_or.ok() ? *pre_or : "default";
  const PreRules* rules = FindPreRules(pre);
  if (rules == nullptr) {
    return Unimplemented("GGUF BPE pre-tokenizer tokenizer.ggml.pre = '" + pre + "' in " +
                         f.path() + " is not supported (supported: " + SupportedPreNames() + ")");
  }
  UP_ASSIGN_OR_RETURN(std::vector<std::string> tokens, Strings(f, "tokenizer.ggml.tokens"));
  UP_ASSIGN_OR_RETURN(std::vector<std::string> merges, Strings(f, "tokenizer.ggml.merges"));
  std::vector<int64_t> types(tokens.size(), 1);
  if (const auto* tt = f.Find("tokenizer.ggml.token_type");
      tt && tt->type == gguf::ValueType::kArray) {
    const auto& el = std::get<gguf::Array>(tt->data).elements;
    for (size_t i = 0; i < el.size() && i < types.size(); ++i) {
      if (std::holds_alternative<int64_t>(el[i].data)) types[i] = std::get<int64_t>(el[i].data);
      if (std::holds_alternative<uint64_t>(el[i].data)) {
        types[i] = static_cast<int64_t>(std::get<uint64_t>(el[i].data));
      }
    }
  }
  json vocab = json::object(), added = json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    vocab[tokens[i]] = i;
    // 3 = control, 4 = user-defined: added tokens, split out of the text before BPE.
    if (types[i] == 3 || types[i] == 4) {
      added.push_back({{"id", i}, {"content", tokens[i]}, {"single_word", false},
                       {"lstrip", false}, {"rstrip", false}, {"normalized", types[i] == 4},
                       {"special", types[i] == 3}});
    }
  }
  json j = {{"version", "1.0"},
            {"added_tokens", added},
            {"normalizer", rules->nfc ? json{{"type", "NFC"}} : json(nullptr)},
            {"pre_tokenizer", PreTokenizerJson(rules->kind)},
            {"decoder", {{"type", "ByteLevel"}}},
            {"model",
             {{"type", "BPE"},
              {"vocab", vocab},
              {"merges", merges},
              {"ignore_merges", rules->ignore_merges}}}};
  auto add_bos = f.GetBool("tokenizer.ggml.add_bos_token");
  auto bos = f.GetInt("tokenizer.ggml.bos_token_id");
  if (bos.ok() && *bos >= 0 && *bos < static_cast<int64_t>(tokens.size()) &&
      (add_bos.ok() ? *add_bos : rules->default_add_bos)) {
    const std::string b = tokens[*bos];
    j["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", b}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", json::array({{{"SpecialToken", {{"id", b}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"special_tokens", {{b, {{"id", b}, {"ids", json::array({*bos})}, {"tokens", json::array({b})}}}}}};
  } else {
    j["post_processor"] = nullptr;
  }
  json config = json::object();
  auto eos = f.GetInt("tokenizer.ggml.eos_token_id");
  if (eos.ok() && *eos >= 0 && *eos < static_cast<int64_t>(tokens.size())) {
    config["eos_token"] = tokens[*eos];
  }
  return std::make_pair(j.dump(), config.dump());
}

Result<BpeTokenizer> BpeTokenizerFromGguf(const gguf::GgufFile& f) {
  UP_ASSIGN_OR_RETURN(auto texts, BpeJsonFromGguf(f));
  return BpeTokenizer::FromJsonString(texts.first, texts.second, f.path() + " (GGUF vocabulary)");
}

}  // namespace uniprefill::tokenizer
