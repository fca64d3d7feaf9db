// The SmolLM2-135M-Instruct vocabulary (a GGUF "gpt2" BPE with tokenizer.ggml.pre = smollm, read
// by BpeTokenizerFromGguf) against llama.cpp, recorded in tests/goldens/tokenizer_smollm2.json by
// tools/make_smollm2_goldens.py on the corpus of the Gemma tokenizer goldens: token ids, decoded
// bytes, and the model's ChatML chat template rendered from its own tokenizer.chat_template as
// llama-cpp-python's Jinja2ChatFormatter renders it. The model file is installed by
// scripts/setup.sh (a missing one fails, as every required asset does).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "testing/required_asset.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/gguf_bpe.h"

namespace uniprefill::tokenizer {
namespace {

constexpr const char* kModelPath = UP_SOURCE_DIR "/models/smollm2-135m-instruct-q4_1.gguf";
constexpr const char* kGoldenPath = UP_SOURCE_DIR "/tests/goldens/tokenizer_smollm2.json";

std::string Base64Decode(const std::string& in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    const int v = value(c);
    if (v < 0) continue;  // '=' padding
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xFF);
    }
  }
  return out;
}

std::string Printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s.substr(0, 120)) {
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", c);
      out += buf;
    }
  }
  return s.size() > 120 ? out + "..." : out;
}

class SmolLm2TokenizerGolden : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::ifstream in(kGoldenPath);
    if (in.good()) golden_ = new nlohmann::json(nlohmann::json::parse(in));
    Result<std::unique_ptr<gguf::GgufFile>> file = gguf::GgufFile::Open(kModelPath);
    if (!file.ok()) return;
    Result<BpeTokenizer> tok = BpeTokenizerFromGguf(**file);
    ASSERT_TRUE(tok.ok()) << tok.status().message();
    tokenizer_ = new BpeTokenizer(std::move(tok).value());
    template_text_ = new std::string((*file)->GetString("tokenizer.chat_template").value());
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete golden_;
    delete template_text_;
    tokenizer_ = nullptr;
    golden_ = nullptr;
    template_text_ = nullptr;
  }
  void SetUp() override {
    UP_REQUIRE_ASSET(kModelPath, "the second model, SmolLM2-135M-Instruct (its tokenizer)");
    UP_REQUIRE_ASSET(kGoldenPath, "the committed golden file");
    ASSERT_NE(tokenizer_, nullptr) << "the vocabulary of " << kModelPath << " did not load";
  }

  static BpeTokenizer* tokenizer_;
  static nlohmann::json* golden_;
  static std::string* template_text_;
};
BpeTokenizer* SmolLm2TokenizerGolden::tokenizer_ = nullptr;
nlohmann::json* SmolLm2TokenizerGolden::golden_ = nullptr;
std::string* SmolLm2TokenizerGolden::template_text_ = nullptr;

TEST_F(SmolLm2TokenizerGolden, VocabularyMetadata) {
  const BpeTokenizer& tok = *tokenizer_;
  EXPECT_EQ(tok.vocab_size(), 49152);
  EXPECT_EQ(tok.pre_tokenizer(), PreTokenizerKind::kDigitsGpt2);
  EXPECT_FALSE(tok.add_bos());  // tokenizer.ggml.add_bos_token = false
  EXPECT_EQ(tok.eos_id(), 2);   // <|im_end|>
  EXPECT_TRUE(tok.IsEndOfGeneration(2));
  EXPECT_TRUE(tok.IsEndOfGeneration(0));  // <|endoftext|>
  EXPECT_TRUE(tok.IsSpecial(1));          // <|im_start|>
}

TEST_F(SmolLm2TokenizerGolden, EncodeMatchesLlamaCpp) {
  const auto& cases = (*golden_)["cases"];
  ASSERT_GE(cases.size(), 600u);
  int identical = 0, failures = 0;
  for (const auto& c : cases) {
    const std::string text = Base64Decode(c["text"].get<std::string>());
    const bool add_special = c["add_special"].get<bool>();
    const bool parse_special = c["parse_special"].get<bool>();
    const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tokenizer_->Encode(text, add_special, parse_special);
    if (got == want) {
      ++identical;
    } else if (++failures <= 10) {
      ADD_FAILURE() << "text '" << Printable(text) << "' add_special=" << add_special
                    << " parse_special=" << parse_special << "\n  want "
                    << ::testing::PrintToString(want) << "\n  got  "
                    << ::testing::PrintToString(got);
    }
  }
  std::printf("smollm2 tokenizer: ids identical to llama.cpp on %d/%zu cases\n", identical,
              cases.size());
  EXPECT_EQ(failures, 0) << "of " << cases.size() << " cases";
}

TEST_F(SmolLm2TokenizerGolden, DecodeMatchesLlamaCpp) {
  int failures = 0;
  for (const auto& c : (*golden_)["cases"]) {
    const std::vector<int32_t> ids = c["ids"].get<std::vector<int32_t>>();
    for (const bool render_special : {false, true}) {
      const std::string want =
          Base64Decode(c[render_special ? "detok_special" : "detok"].get<std::string>());
      const std::string got = tokenizer_->Decode(ids, {.render_special = render_special});
      if (got != want && ++failures <= 10) {
        ADD_FAILURE() << "render_special=" << render_special << " of "
                      << ::testing::PrintToString(ids) << "\n  want '" << Printable(want)
                      << "'\n  got  '" << Printable(got) << "'";
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST_F(SmolLm2TokenizerGolden, ChatTemplateMatchesTheModelsJinjaTemplate) {
  Result<ChatTemplate> chat = DetectChatTemplate(*template_text_, "llama");
  ASSERT_TRUE(chat.ok()) << chat.status().message();
  EXPECT_EQ(chat->kind, ChatTemplateKind::kChatMl);
  ASSERT_GE((*golden_)["chat"].size(), 9u);
  for (const auto& c : (*golden_)["chat"]) {
    std::vector<ChatMessage> messages;
    for (const auto& m : c["messages"]) {
      messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    }
    const std::string text =
        ApplyChatTemplate(messages, c["add_generation_prompt"].get<bool>(), *chat);
    EXPECT_EQ(text, c["text"].get<std::string>());
    EXPECT_EQ(tokenizer_->Encode(text, true, true), c["ids"].get<std::vector<int32_t>>());
  }
}

TEST_F(SmolLm2TokenizerGolden, InvalidUtf8EncodesWithoutAReference) {
  // llama.cpp aborts on invalid UTF-8 in a BPE vocabulary, so these have no reference ids. Bytes
  // the vocabulary has a token for come back exactly; the 21 bytes that never occur in UTF-8
  // (0xC0, 0xC1, 0xF5..0xFF) have none in SmolLM2's vocabulary and are dropped.
  for (const std::string text : {"\x80", "\xc3(", "abc\x80" "def", "\xe2\x82", "\xf0\x9f\x98"}) {
    const std::vector<int32_t> ids = tokenizer_->Encode(text, false, false);
    EXPECT_EQ(tokenizer_->Decode(ids), text) << Printable(text);
  }
  EXPECT_EQ(tokenizer_->Decode(tokenizer_->Encode("hello \xff world", false, false)),
            "hello  world");
}

}  // namespace
}  // namespace uniprefill::tokenizer
