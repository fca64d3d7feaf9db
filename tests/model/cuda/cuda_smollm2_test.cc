// The real SmolLM2-135M-Instruct (Llama family; Q4_1 weights and a Q8_0 tied head, dequantised to
// bf16 at upload) on the GPU against the host model (f32) and the committed fp32 numpy logits
// (tools/make_smollm2_goldens.py), on its 4 golden prompts (short text to ~7.3K tokens): the
// sibling of CudaModelGemma270mTest (cuda_model_test.cc) with the same bounds: first-token logits
// within kLogitsBound of the host's, top-5 equal but for near-ties, 32 greedy tokens equal until a
// near-tie, and within kLogitsBound of fp32. Then a UniPrefill drop (fixed ratio 0.5 at a middle
// layer) on the longest prompt: kept counts equal to the host's, logits and greedy tokens as above. A missing model file is a failure, like every required
// asset; UNIPREFILL_ALLOW_MISSING_ASSETS=1 turns it into a one-line skip.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model.h"
#include "testing/compare.h"
#include "testing/cuda_model_fixtures.h"
#include "testing/cuda_test_util.h"
#include "testing/required_asset.h"

namespace uniprefill {
namespace {

using namespace cuda_model_test;  // NOLINT: the shared helpers (testing/cuda_model_fixtures.h)

std::string SmolLm2() { return SourceDir() + "/models/smollm2-135m-instruct-q4_1.gguf"; }
std::string Goldens() { return SourceDir() + "/tests/goldens/model_smollm2/"; }

nlohmann::json ReadGolden(int prompt) {
  const std::string path = Goldens() + "prompt" + std::to_string(prompt) + ".json";
  EXPECT_TRUE(std::filesystem::exists(path)) << path;
  return nlohmann::json::parse(std::ifstream(path));
}

TEST(CudaModelSmolLm2Test, MatchesHostAndFp32Goldens) {
  UP_CUDA_TEST_CONTEXT(ctx);
  UP_REQUIRE_ASSET(SmolLm2(), "the second model (SmolLM2-135M-Instruct, Q4_1 GGUF)");
  Pair p = Load(SmolLm2(), ctx);
  ASSERT_TRUE(p.cpu && p.gpu);
  EXPECT_EQ(p.gpu->device(), Device::kCuda);
  for (int prompt = 1; prompt <= 4; ++prompt) {
    const nlohmann::json g = ReadGolden(prompt);
    const std::vector<int32_t> ids = g["ids"].get<std::vector<int32_t>>();
    const std::string label = "smollm2 prompt" + std::to_string(prompt);
    ComparePrompt(p, ctx, ids, Dense(), label);
    // Against the fp32 numpy forward (the CPU golden test's reference).
    std::ifstream in(Goldens() + g["fp32"]["logits_file"].get<std::string>(), std::ios::binary);
    std::vector<float> ref(p.cpu->config().vocab_size);
    in.read(reinterpret_cast<char*>(ref.data()),
            static_cast<std::streamsize>(ref.size() * sizeof(float)));
    ASSERT_TRUE(in.good()) << label << ": short fp32 logits file";
    auto cache = p.gpu->NewCache(static_cast<int>(ids.size()) + 1);
    std::vector<float> logits(ref.size());
    ASSERT_TRUE(p.gpu->Forward(ctx, ids, *cache, logits.data()).ok());
    const double err = testing::RelativeL2Error(logits, ref);
    std::printf("[%s] vs fp32 numpy: normalised error %.2e, argmax %d/%d\n", label.c_str(), err,
                TopK(logits, 1)[0], TopK(ref, 1)[0]);
    EXPECT_LT(err, kLogitsBound) << label;
  }
}

// UniPrefill on the GPU with the real Llama-family model: fixed ratio 0.5 (the sync-free path) at
// a middle layer (every SmolLM2 layer is full attention), default block sizes, on the ~7.3K-token
// prompt. Fixed ratio fixes the kept count, so the count check cannot trip on a near-tie of block
// scores (top-p's boundary block could); a wrong selection shows in the logits and tokens.
TEST(CudaModelSmolLm2Test, FixedRatioDropMatchesHost) {
  UP_CUDA_TEST_CONTEXT(ctx);
  UP_REQUIRE_ASSET(SmolLm2(), "the second model (SmolLM2-135M-Instruct, Q4_1 GGUF)");
  Pair p = Load(SmolLm2(), ctx);
  ASSERT_TRUE(p.cpu && p.gpu);
  const std::vector<int32_t> ids = ReadGolden(4)["ids"].get<std::vector<int32_t>>();
  UniPrefillConfig up;
  up.enabled = true;
  up.drop_layers = {p.cpu->config().n_layers / 2};
  up.selection.mode = sparsity::SelectionMode::kFixedRatio;
  up.selection.keep_ratio = 0.5f;
  ComparePrompt(p, ctx, ids, up, "smollm2 keep 0.5");
}

}  // namespace
}  // namespace uniprefill
