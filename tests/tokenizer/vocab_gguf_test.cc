// Vocab::FromGguf on small in-memory GGUF files: what is read, and the errors for bad metadata.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/vocab.h"

namespace uniprefill::tokenizer {
namespace {

// Writes a GGUF v3 file with metadata only (no tensors).
class GgufBuilder {
 public:
  GgufBuilder& String(const std::string& key, const std::string& v) {
    Key(key, 8);
    Str(v);
    return Count();
  }
  GgufBuilder& U32(const std::string& key, uint32_t v) {
    Key(key, 4);
    Pod(v);
    return Count();
  }
  GgufBuilder& Bool(const std::string& key, bool v) {
    Key(key, 7);
    Pod(static_cast<uint8_t>(v));
    return Count();
  }
  GgufBuilder& Strings(const std::string& key, const std::vector<std::string>& v) {
    Key(key, 9);
    Pod(uint32_t{8});
    Pod(static_cast<uint64_t>(v.size()));
    for (const std::string& s : v) Str(s);
    return Count();
  }
  GgufBuilder& Floats(const std::string& key, const std::vector<float>& v) {
    Key(key, 9);
    Pod(uint32_t{6});
    Pod(static_cast<uint64_t>(v.size()));
    for (float f : v) Pod(f);
    return Count();
  }
  GgufBuilder& Ints(const std::string& key, const std::vector<int32_t>& v) {
    Key(key, 9);
    Pod(uint32_t{5});
    Pod(static_cast<uint64_t>(v.size()));
    for (int32_t i : v) Pod(i);
    return Count();
  }
  Result<std::unique_ptr<gguf::GgufFile>> Build() const {
    std::vector<uint8_t> out = {'G', 'G', 'U', 'F'};
    auto put = [&out](const auto& v) {
      const auto* p = reinterpret_cast<const uint8_t*>(&v);
      out.insert(out.end(), p, p + sizeof(v));
    };
    put(uint32_t{3});
    put(uint64_t{0});  // tensors
    put(n_kv_);
    out.insert(out.end(), body_.begin(), body_.end());
    while (out.size() % 32 != 0) out.push_back(0);
    return gguf::GgufFile::FromMemory(out.data(), out.size());
  }

 private:
  template <typename T>
  void Pod(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    body_.insert(body_.end(), p, p + sizeof(T));
  }
  void Str(const std::string& s) {
    Pod(static_cast<uint64_t>(s.size()));
    body_.insert(body_.end(), s.begin(), s.end());
  }
  void Key(const std::string& key, uint32_t type) {
    Str(key);
    Pod(type);
  }
  GgufBuilder& Count() {
    ++n_kv_;
    return *this;
  }
  std::vector<uint8_t> body_;
  uint64_t n_kv_ = 0;
};

// <pad> <eos> <bos> <unk> a b ab ▁ + 256 byte tokens.
GgufBuilder TinySpm() {
  std::vector<std::string> tokens = {"<pad>", "<eos>", "<bos>", "<unk>",
                                     "a",     "b",     "ab",    "\xE2\x96\x81"};
  std::vector<float> scores = {0, 0, 0, 0, -1, -1, -0.5f, -2};
  std::vector<int32_t> types = {3, 3, 3, 2, 1, 1, 1, 1};
  static const char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">");
    scores.push_back(0);
    types.push_back(6);
  }
  GgufBuilder g;
  g.String("general.architecture", "gemma3")
      .String("tokenizer.ggml.model", "llama")
      .Strings("tokenizer.ggml.tokens", tokens)
      .Floats("tokenizer.ggml.scores", scores)
      .Ints("tokenizer.ggml.token_type", types)
      .U32("tokenizer.ggml.bos_token_id", 2)
      .U32("tokenizer.ggml.eos_token_id", 1)
      .U32("tokenizer.ggml.unknown_token_id", 3)
      .U32("tokenizer.ggml.padding_token_id", 0)
      .Bool("tokenizer.ggml.add_space_prefix", false);
  return g;
}

TEST(VocabFromGguf, ReadsTokensIdsAndFlags) {
  auto file = TinySpm().Build();
  ASSERT_TRUE(file.ok()) << file.status().message();
  Result<SpmTokenizer> tok = SpmTokenizer::FromGguf(**file);
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  EXPECT_EQ(tok->vocab_size(), 264);
  EXPECT_EQ(tok->bos(), 2);
  EXPECT_EQ(tok->eos(), 1);
  EXPECT_TRUE(tok->vocab().add_bos());  // llama.cpp's SPM default when the key is absent
  EXPECT_FALSE(tok->vocab().add_space_prefix());
  EXPECT_EQ(tok->Encode("ab a", true, true), (std::vector<int32_t>{2, 6, 7, 4}));
}

TEST(VocabFromGguf, MismatchedArrayLengthsNameTheKey) {
  GgufBuilder g;
  g.String("tokenizer.ggml.model", "llama")
      .Strings("tokenizer.ggml.tokens", {"<pad>", "<eos>", "<bos>", "a"})
      .Floats("tokenizer.ggml.scores", {0, 0, 0})
      .U32("tokenizer.ggml.bos_token_id", 2)
      .U32("tokenizer.ggml.eos_token_id", 1);
  auto file = g.Build();
  ASSERT_TRUE(file.ok()) << file.status().message();
  Result<Vocab> v = Vocab::FromGguf(**file);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("tokenizer.ggml.scores has 3 entries but there are 4 tokens"),
            std::string::npos)
      << v.status().message();
}

TEST(VocabFromGguf, SpecialIdOutOfRangeIsAnError) {
  GgufBuilder g;
  g.String("tokenizer.ggml.model", "llama")
      .Strings("tokenizer.ggml.tokens", {"<pad>", "<eos>", "<bos>"})
      .U32("tokenizer.ggml.bos_token_id", 7)
      .U32("tokenizer.ggml.eos_token_id", 1)
      .U32("tokenizer.ggml.unknown_token_id", 0);
  auto file = g.Build();
  ASSERT_TRUE(file.ok()) << file.status().message();
  Result<Vocab> v = Vocab::FromGguf(**file);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("bos token id 7 is out of range for a vocabulary of 3"),
            std::string::npos)
      << v.status().message();
}

TEST(VocabFromGguf, UnknownTokenTypeIsAnError) {
  GgufBuilder g;
  g.String("tokenizer.ggml.model", "llama")
      .Strings("tokenizer.ggml.tokens", {"<pad>", "<eos>", "<bos>"})
      .Ints("tokenizer.ggml.token_type", {3, 3, 9})
      .U32("tokenizer.ggml.unknown_token_id", 0);
  auto file = g.Build();
  ASSERT_TRUE(file.ok()) << file.status().message();
  Result<Vocab> v = Vocab::FromGguf(**file);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("token_type[2] = 9"), std::string::npos)
      << v.status().message();
}

TEST(VocabFromGguf, MissingTokensAndBpeModelsAreReported) {
  auto no_tokens = GgufBuilder().String("tokenizer.ggml.model", "llama").Build();
  ASSERT_TRUE(no_tokens.ok());
  Result<Vocab> v = Vocab::FromGguf(**no_tokens);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), ErrorCode::kNotFound) << v.status().message();

  auto bpe = GgufBuilder().String("tokenizer.ggml.model", "gpt2").Build();
  ASSERT_TRUE(bpe.ok());
  v = Vocab::FromGguf(**bpe);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), ErrorCode::kUnimplemented);
}

}  // namespace
}  // namespace uniprefill::tokenizer
