// Gemma 3 model code on a tiny random-weight GGUF: loading checks and cache/chunking invariants.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "model/model.h"
#include "testing/tiny_gemma3.h"
#include "testing/compare.h"

namespace uniprefill {
namespace {

using testing::BuildTinyGemma3;
using testing::TinyGemma3Options;
using testing::WriteTempFile;

Result<std::unique_ptr<Model>> LoadTiny(DeviceContext& ctx, const TinyGemma3Options& o,
                                        bool f32_weights = true) {
  const std::string path = WriteTempFile("tiny_gemma3_" + std::to_string(o.seed) + ".gguf",
                                         BuildTinyGemma3(o));
  LoadOptions lo;
  lo.f32_prefill_weights = f32_weights;
  return LoadModel(path, ctx, lo);
}

std::vector<int32_t> RandomTokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(4, 261);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = dist(rng);
  ids[0] = 2;
  return ids;
}

using testing::MaxAbsDiff;  // infinite on NaN or Inf

TEST(Gemma3TinyTest, LoadsConfigFromMetadata) {
  auto ctx = DeviceContext::Cpu(2);
  auto model = LoadTiny(*ctx, {});
  ASSERT_TRUE(model.ok()) << model.status().message();
  const ModelConfig& c = (*model)->config();
  EXPECT_EQ(c.n_layers, 6);
  EXPECT_EQ(c.hidden, 256);
  EXPECT_EQ(c.vocab_size, 262);
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_EQ(c.layer_kinds[5], LayerKind::kFullAttention);
  EXPECT_EQ(c.layer_kinds[4], LayerKind::kSlidingAttention);
  EXPECT_FLOAT_EQ(c.embedding_scale, 16.0f);
  EXPECT_TRUE(c.tied_embeddings);
}

// Chunked prefill (3 chunks of <= 512), one token at a time (the decode path, fused quantised
// matvecs, sliding-window cache shifting) and the f32-free model must all give the same logits.
TEST(Gemma3TinyTest, ChunkedPrefillEqualsTokenByTokenDecode) {
  auto ctx = DeviceContext::Cpu(2);
  auto model = LoadTiny(*ctx, {});
  ASSERT_TRUE(model.ok()) << model.status().message();
  Model& m = **model;
  const std::vector<int32_t> ids = RandomTokens(1100, 7);
  std::vector<float> whole(m.config().vocab_size), stepwise(m.config().vocab_size);
  auto c1 = m.NewCache(2048);
  ASSERT_TRUE(m.Forward(*ctx, ids, *c1, whole.data()).ok());
  auto c2 = m.NewCache(2048);
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_TRUE(m.Forward(*ctx, std::span(ids).subspan(i, 1), *c2, stepwise.data()).ok());
  }
  const double scale = testing::MaxAbs(whole);
  EXPECT_LT(MaxAbsDiff(whole, stepwise), 1e-3f * scale);
  EXPECT_EQ(c1->length(), 1100);
  EXPECT_EQ(c2->length(), 1100);

  auto quant_only = LoadTiny(*ctx, {}, /*f32_weights=*/false);
  ASSERT_TRUE(quant_only.ok());
  std::vector<float> fused(m.config().vocab_size);
  auto c3 = (*quant_only)->NewCache(2048);
  ASSERT_TRUE((*quant_only)->Forward(*ctx, ids, *c3, fused.data()).ok());
  EXPECT_LT(MaxAbsDiff(whole, fused), 1e-3f * scale);
}

TEST(Gemma3TinyTest, ThreadCountDoesNotChangeResults) {
  auto ctx1 = DeviceContext::Cpu(1);
  auto ctx2 = DeviceContext::Cpu(2);
  auto model = LoadTiny(*ctx1, {});
  ASSERT_TRUE(model.ok());
  const std::vector<int32_t> ids = RandomTokens(300, 3);
  std::vector<float> a((*model)->config().vocab_size), b(a.size());
  auto c1 = (*model)->NewCache(512); auto c2 = (*model)->NewCache(512);
  ASSERT_TRUE((*model)->Forward(*ctx1, ids, *c1, a.data()).ok());
  ASSERT_TRUE((*model)->Forward(*ctx2, ids, *c2, b.data()).ok());
  EXPECT_LT(MaxAbsDiff(a, b), 1e-4f);
}

TEST(Gemma3TinyTest, PromptLongerThanContextIsOutOfRange) {
  auto ctx = DeviceContext::Cpu(1);
  auto model = LoadTiny(*ctx, {});
  ASSERT_TRUE(model.ok());
  auto cache = (*model)->NewCache(64);
  std::vector<float> logits((*model)->config().vocab_size);
  Status st = (*model)->Forward(*ctx, RandomTokens(65, 1), *cache, logits.data());
  EXPECT_EQ(st.code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(cache->length(), 0);
}

TEST(Gemma3TinyTest, OutOfVocabularyTokenIsRejected) {
  auto ctx = DeviceContext::Cpu(1);
  auto model = LoadTiny(*ctx, {});
  ASSERT_TRUE(model.ok());
  auto cache = (*model)->NewCache(64);
  std::vector<float> logits((*model)->config().vocab_size);
  std::vector<int32_t> ids = {2, 5, 999};
  Status st = (*model)->Forward(*ctx, ids, *cache, logits.data());
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("999"), std::string::npos);
}

TEST(Gemma3TinyTest, UnsupportedQuantTypeNamesTensorAndType) {
  auto ctx = DeviceContext::Cpu(1);
  TinyGemma3Options o;
  o.q2k_attn_q = true;
  auto model = LoadTiny(*ctx, o);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), ErrorCode::kUnimplemented);
  EXPECT_NE(model.status().message().find("blk.0.attn_q.weight"), std::string::npos);
  EXPECT_NE(model.status().message().find("Q2_K"), std::string::npos);
}

TEST(Gemma3TinyTest, WrongShapeNamesTensorExpectedAndFound) {
  auto ctx = DeviceContext::Cpu(1);
  TinyGemma3Options o;
  o.wrong_ffn_shape = true;
  auto model = LoadTiny(*ctx, o);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().message().rfind(
                "tensor 'blk.1.ffn_up.weight' has shape [768, 256], expected [512, 256] from the "
                "model's metadata",
                0),
            0u);
}

TEST(Gemma3TinyTest, MissingTensorIsNamed) {
  auto ctx = DeviceContext::Cpu(1);
  TinyGemma3Options o;
  o.drop_output_norm = true;
  auto model = LoadTiny(*ctx, o);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("lacks tensor 'output_norm.weight'"), std::string::npos)
      << model.status().message();
}

TEST(Gemma3TinyTest, UnsupportedArchitectureIsNamed) {
  auto ctx = DeviceContext::Cpu(1);
  TinyGemma3Options o;
  o.architecture = "mamba";
  auto model = LoadTiny(*ctx, o);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), ErrorCode::kUnimplemented);
  EXPECT_NE(model.status().message().find("architecture 'mamba'"), std::string::npos);
}

}  // namespace
}  // namespace uniprefill
