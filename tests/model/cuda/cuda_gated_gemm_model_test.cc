// The dense FFN's fused gate | up GEMM through the backend (UNIPREFILL_CUDA_GATED_GEMM=1, opt-in,
// where the build and device hold it: Load interleaves the gate and up rows). Three arms of the
// same model over the mixed scenario of testing/last_layer_scenario.h (fresh prompts, a decode,
// chunks over a cached prefix, decodes after): the fused GEMM on every forward (min rows 1), the
// interleaved rows unfused on every forward (cuBLASLt + GatedActivationPairs), and the old layout
// (=0). Unfused interleaved equals the old layout bit for bit (the same GEMM shapes and formula);
// fused is within a bound of rounding (gate and up never rounded to bf16 before the product).
// Llama and Gemma 3 (SiLU, GELU) tiny checkpoints and the tiny preset.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/model_presets.h"
#include "model/transformer_model.h"
#include "testing/compare.h"
#include "testing/cuda_model_fixtures.h"
#include "testing/cuda_test_util.h"
#include "testing/last_layer_scenario.h"

namespace uniprefill {
namespace {

constexpr double kBound = 2e-2;  // of the logits' scale, as the other bf16 whole-model tests

UniPrefillConfig Dense() {
  UniPrefillConfig c;
  c.enabled = false;
  return c;
}

// The model with UNIPREFILL_CUDA_GATED_GEMM and its minimum rows set for its load.
std::unique_ptr<Model> Load(DeviceContext& ctx, const std::string& source, const char* on,
                            const char* min_rows) {
  return cuda_model_test::LoadWithVariables(
      ctx, source,
      {{"UNIPREFILL_CUDA_GATED_GEMM", on}, {"UNIPREFILL_CUDA_GATED_GEMM_MIN_ROWS", min_rows}});
}

TEST(CudaGatedGemmModelTest, FusedUnfusedAndTheOldLayoutAgree) {
  UP_CUDA_TEST_CONTEXT(ctx);
  for (const char* source : {"llama", "gemma3", "tiny"}) {
    SCOPED_TRACE(source);
    auto fused = Load(ctx, source, "1", "1"), pairs = Load(ctx, source, "1", "1000000000"),
         old = Load(ctx, source, "0", "1");
    ASSERT_TRUE(fused && pairs && old);
    const testing::LastLayerScenario z;
    const testing::LastLayerTrace tf = testing::RunLastLayerScenario(*fused, ctx, Dense(), z);
    const testing::LastLayerTrace tp = testing::RunLastLayerScenario(*pairs, ctx, Dense(), z);
    const testing::LastLayerTrace to = testing::RunLastLayerScenario(*old, ctx, Dense(), z);
    ASSERT_EQ(tf.logits.size(), to.logits.size());
    ASSERT_EQ(tp.logits.size(), to.logits.size());
    double worst = 0;
    for (size_t i = 0; i < to.logits.size(); ++i) {
      EXPECT_EQ(tp.logits[i], to.logits[i]) << "unfused interleaved logits " << i;
      const double e = testing::MaxErrorOverMaxAbs(tf.logits[i], to.logits[i]);
      worst = std::max(worst, e);
      EXPECT_LE(e, kBound) << "fused logits " << i;
    }
    std::printf("[%s] fused gated GEMM against the old layout: worst %.2e of the logits' scale\n",
                source, worst);
  }
}

}  // namespace
}  // namespace uniprefill
