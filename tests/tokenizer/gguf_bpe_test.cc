// A byte-level BPE vocabulary stored the GGUF way (token, merge and type arrays, as llama.cpp's
// converter writes them for Llama 3) encodes exactly like the tokenizer.json it came from: the
// committed tiny Llama-3-style tokenizer, on its `tokenizers` goldens.
#include "tokenizer/gguf_bpe.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "io/gguf_builder.h"

namespace uniprefill::tokenizer {
namespace {

using gguf::testing::GgufBuilder;
using gguf::testing::Val;
namespace t = gguf::testing;

std::string Path(const std::string& rel) { return std::string(UP_SOURCE_DIR) + "/" + rel; }

TEST(GgufBpeTest, Llama3StyleVocabularyEncodesAsItsTokenizerJson) {
  std::ifstream in(Path("tests/goldens/bpe/tiny_llama3/tokenizer.json"));
  const nlohmann::json tj = nlohmann::json::parse(in);
  const auto& vocab = tj["model"]["vocab"];
  std::vector<std::string> tokens(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) tokens[it.value().get<int>()] = it.key();
  std::vector<int32_t> types(tokens.size(), 1);
  for (const auto& a : tj["added_tokens"]) {
    const int id = a["id"];
    if (id >= static_cast<int>(tokens.size())) tokens.resize(id + 1), types.resize(id + 1, 1);
    tokens[id] = a["content"];
    types[id] = a["special"].get<bool>() ? 3 : 4;
  }
  std::vector<Val> tok_vals, type_vals, merge_vals;
  for (const auto& s : tokens) tok_vals.push_back(Val::Str(s));
  for (int32_t ty : types) type_vals.push_back(Val::I32(ty));
  for (const auto& m : tj["model"]["merges"]) {
    merge_vals.push_back(Val::Str(m.is_string() ? m.get<std::string>()
                                                : m[0].get<std::string>() + " " + m[1].get<std::string>()));
  }
  GgufBuilder b;
  b.Kv("general.architecture", Val::Str("llama"));
  b.Kv("tokenizer.ggml.model", Val::Str("gpt2"));
  b.Kv("tokenizer.ggml.pre", Val::Str("llama-bpe"));
  b.Kv("tokenizer.ggml.tokens", Val::Arr(t::kTString, tok_vals));
  b.Kv("tokenizer.ggml.token_type", Val::Arr(t::kTI32, type_vals));
  b.Kv("tokenizer.ggml.merges", Val::Arr(t::kTString, merge_vals));
  b.Kv("tokenizer.ggml.bos_token_id", Val::U32(0));
  b.Kv("tokenizer.ggml.eos_token_id", Val::U32(1));
  b.Kv("tokenizer.ggml.add_bos_token", Val::Bool(true));
  const std::vector<uint8_t> bytes = b.Build();
  auto file = gguf::GgufFile::FromMemory(bytes.data(), bytes.size());
  ASSERT_TRUE(file.ok()) << file.status().message();
  auto from_gguf = BpeTokenizerFromGguf(**file);
  ASSERT_TRUE(from_gguf.ok()) << from_gguf.status().message();
  auto from_json = BpeTokenizer::FromJsonFile(Path("tests/goldens/bpe/tiny_llama3/tokenizer.json"));
  ASSERT_TRUE(from_json.ok());

  std::ifstream gin(Path("tests/goldens/bpe/tiny_llama3.json"));
  const nlohmann::json golden = nlohmann::json::parse(gin);
  int checked = 0;
  for (const auto& c : golden["cases"]) {
    const std::string text = c["text"];
    const bool add = c["add_special"], parse = c["parse_special"];
    EXPECT_EQ(from_gguf->Encode(text, add, parse), c["ids"].get<std::vector<int32_t>>()) << text;
    ++checked;
  }
  EXPECT_GT(checked, 300);
  EXPECT_TRUE(from_gguf->IsEndOfGeneration(1));
}

TEST(GgufBpeTest, UnknownPreTokenizerIsNamed) {
  GgufBuilder b;
  b.Kv("tokenizer.ggml.model", Val::Str("gpt2"));
  b.Kv("tokenizer.ggml.pre", Val::Str("falcon"));
  const std::vector<uint8_t> bytes = b.Build();
  auto file = gguf::GgufFile::FromMemory(bytes.data(), bytes.size());
  ASSERT_TRUE(file.ok());
  auto tok = BpeTokenizerFromGguf(**file);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("'falcon'"), std::string::npos);
  EXPECT_EQ(tok.status().code(), ErrorCode::kUnimplemented);
  EXPECT_NE(tok.status().message().find("(supported: llama-bpe, llama3, qwen2, smollm)"),
            std::string::npos)
      << tok.status().message();
}

// A two-letter vocabulary with one merge, stored the GGUF way under `pre`.
Result<BpeTokenizer> TinyVocabulary(const std::string& pre) {
  GgufBuilder b;
  b.Kv("tokenizer.ggml.model", Val::Str("gpt2"));
  b.Kv("tokenizer.ggml.pre", Val::Str(pre));
  // "\xC4\xA0" is U+0120, the byte alphabet's space.
  std::vector<Val> toks = {Val::Str("<|endoftext|>"), Val::Str("a"), Val::Str("b"),
                           Val::Str("ab"), Val::Str("1"), Val::Str("\xC4\xA0")};
  b.Kv("tokenizer.ggml.tokens", Val::Arr(t::kTString, toks));
  b.Kv("tokenizer.ggml.token_type",
       Val::Arr(t::kTI32, {Val::I32(3), Val::I32(1), Val::I32(1), Val::I32(1), Val::I32(1),
                           Val::I32(1)}));
  b.Kv("tokenizer.ggml.merges", Val::Arr(t::kTString, {Val::Str("a b")}));
  b.Kv("tokenizer.ggml.bos_token_id", Val::U32(0));
  const std::vector<uint8_t> bytes = b.Build();
  auto file = gguf::GgufFile::FromMemory(bytes.data(), bytes.size());
  if (!file.ok()) return file.status();
  return BpeTokenizerFromGguf(**file);
}

TEST(GgufBpeTest, SmolLmSplitsDigitsAndAddsNoBosByDefault) {
  Result<BpeTokenizer> tok = TinyVocabulary("smollm");
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_EQ(tok->pre_tokenizer(), PreTokenizerKind::kDigitsGpt2);
  EXPECT_FALSE(tok->add_bos());  // llama.cpp: add_bos only where the GGUF says so
  // "ab" merges; "11" is two pre-tokens; " 1": the space stays apart from the digit.
  EXPECT_EQ(tok->Encode("ab11 1", /*add_special=*/true, true),
            (std::vector<int32_t>{3, 4, 4, 5, 4}));
}

TEST(GgufBpeTest, Llama3AddsItsBosWhenTheGgufIsSilent) {
  Result<BpeTokenizer> tok = TinyVocabulary("llama-bpe");
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_EQ(tok->pre_tokenizer(), PreTokenizerKind::kLlama3);
  EXPECT_TRUE(tok->add_bos());
}

}  // namespace
}  // namespace uniprefill::tokenizer
