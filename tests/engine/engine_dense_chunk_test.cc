// Engine::Generate prefills a dense prompt in chunks (EngineOptions::dense_prefill_chunk): each
// chunk attends the cached prefix plus itself, so the result must be the whole prompt's: the same
// greedy tokens and first logits within f32 rounding, for chunk sizes of 1, odd sizes, one smaller
// than the sliding window (8 on the tiny Gemma 3), and larger than the prompt. UniPrefill prompts
// are not chunked (their kept counts stay the whole prompt's).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "testing/tiny_gemma3.h"
#include "uniprefill/engine.h"

namespace uniprefill {
namespace {

std::unique_ptr<Engine> LoadTiny(int chunk, bool uniprefill, bool f32_decode = true) {
  EngineOptions o;
  o.f32_decode = f32_decode;
  o.kv_cache_dtype = "f32";  // chunked and whole sum in different orders; f16 keys would round
                             // a last-bit difference into ~1e-3 (3.7e-5 of the logit scale)
  o.model_path = testing::WriteTempFile("engine_dense_chunk_tiny.gguf", testing::BuildTinyGemma3());
  o.threads = 1;
  o.dense_prefill_chunk = chunk;
  o.uniprefill.enabled = uniprefill;
  auto engine = Engine::Load(o);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  return engine.ok() ? std::move(*engine) : nullptr;
}

GenerationResult Greedy(Engine& e, const std::vector<int32_t>& prompt) {
  SamplingParams p;
  p.max_tokens = 12;
  p.ignore_eos = true;
  p.return_first_logits = true;
  auto r = e.Generate(prompt, p);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : GenerationResult{};
}

std::vector<int32_t> Prompt(int n) {
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = 3 + (i * 37 + i / 5) % 250;  // byte-level ids
  return ids;
}

// f32 activations in every matmul (f32_decode): chunks of a few rows would otherwise take the
// int16-activation kernels where the whole prompt takes sgemm, a ~1e-4 relative difference that
// is the kernels', not the chunking's (the default-settings case below bounds it).
void ExpectChunksEqualWhole(bool f32_decode, double bound) {
  const std::vector<int32_t> prompt = Prompt(97);
  auto whole = LoadTiny(0, false, f32_decode);
  ASSERT_NE(whole, nullptr);
  const GenerationResult ref = Greedy(*whole, prompt);
  ASSERT_FALSE(ref.first_logits.empty());
  double scale = 0;
  for (float x : ref.first_logits) scale = std::max(scale, std::fabs(double(x)));
  for (int chunk : {1, 5, 7, 32, 96, 97, 4096}) {
    auto chunked = LoadTiny(chunk, false, f32_decode);
    ASSERT_NE(chunked, nullptr);
    const GenerationResult got = Greedy(*chunked, prompt);
    ASSERT_EQ(got.first_logits.size(), ref.first_logits.size());
    double diff = 0;
    for (size_t i = 0; i < ref.first_logits.size(); ++i) {
      diff = std::max(diff, std::fabs(double(got.first_logits[i]) - ref.first_logits[i]));
    }
    EXPECT_LE(diff, bound * scale) << "chunk " << chunk;
    EXPECT_EQ(got.text, ref.text) << "chunk " << chunk;
  }
}

TEST(EngineDenseChunkTest, ChunkedDensePrefillEqualsTheWholePrompt) {
  ExpectChunksEqualWhole(/*f32_decode=*/true, 1e-5);
}

TEST(EngineDenseChunkTest, ChunkedDensePrefillWithInt16KernelsStaysClose) {
  ExpectChunksEqualWhole(/*f32_decode=*/false, 1e-3);
}

TEST(EngineDenseChunkTest, UniPrefillPromptsRunWhole) {
  const std::vector<int32_t> prompt = Prompt(300);
  auto whole = LoadTiny(0, true);
  auto chunked = LoadTiny(7, true);
  ASSERT_NE(whole, nullptr);
  ASSERT_NE(chunked, nullptr);
  const GenerationResult a = Greedy(*whole, prompt), b = Greedy(*chunked, prompt);
  ASSERT_FALSE(a.kept.empty()) << "the tiny model should have a drop layer";
  ASSERT_EQ(a.kept.size(), b.kept.size());
  for (size_t i = 0; i < a.kept.size(); ++i) EXPECT_EQ(a.kept[i].alive, b.kept[i].alive);
  EXPECT_EQ(a.first_logits, b.first_logits);  // the same single forward
}

TEST(EngineDenseChunkTest, NegativeChunkIsRefused) {
  EngineOptions o;
  o.model_path = testing::WriteTempFile("engine_dense_chunk_tiny.gguf", testing::BuildTinyGemma3());
  o.dense_prefill_chunk = -1;
  auto engine = Engine::Load(o);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("negative"), std::string::npos);
}

}  // namespace
}  // namespace uniprefill
