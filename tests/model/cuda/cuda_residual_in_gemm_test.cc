// The residual updated in the output projections' epilogue (UNIPREFILL_CUDA_RESIDUAL_IN_GEMM=1,
// opt-in: CudaBackend::ResidualInGemm, ops::cuda::GemmAccumulate) against the separate add
// (AddRmsNorm), over the mixed scenario of testing/last_layer_scenario.h (fresh prompts, a
// decode, chunks over a cached prefix, decodes after) and a UniPrefill prefill with a drop
// (the compacted residual): within a bound of rounding (the sum rounded once to bf16 instead of
// the product and then the sum) where the model has no post-norms (Llama checkpoint, the tiny
// preset), bit for bit where it has them (Gemma 3: every block's output is normed before the
// add, so nothing changes). Written without a GPU (38th session).
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

// A model loaded with UNIPREFILL_CUDA_RESIDUAL_IN_GEMM set to `on`.
std::unique_ptr<Model> Load(DeviceContext& ctx, const std::string& source, const char* on) {
  return cuda_model_test::LoadWithVariables(ctx, source,
                                            {{"UNIPREFILL_CUDA_RESIDUAL_IN_GEMM", on}});
}

TEST(CudaResidualInGemmTest, EqualsTheSeparateAddWithinRounding) {
  UP_CUDA_TEST_CONTEXT(ctx);
  for (const char* source : {"llama", "tiny", "gemma3"}) {
    SCOPED_TRACE(source);
    const bool post_norms = std::string(source) == "gemma3";
    auto fused = Load(ctx, source, "1"), separate = Load(ctx, source, "0");
    ASSERT_TRUE(fused && separate);
    const testing::LastLayerScenario z;
    const testing::LastLayerTrace tf = testing::RunLastLayerScenario(*fused, ctx, Dense(), z);
    const testing::LastLayerTrace ts = testing::RunLastLayerScenario(*separate, ctx, Dense(), z);
    ASSERT_EQ(tf.logits.size(), ts.logits.size());
    double worst = 0;
    for (size_t i = 0; i < ts.logits.size(); ++i) {
      if (post_norms) {
        EXPECT_EQ(tf.logits[i], ts.logits[i]) << "logits " << i;
        continue;
      }
      const double e = testing::MaxErrorOverMaxAbs(tf.logits[i], ts.logits[i]);
      worst = std::max(worst, e);
      EXPECT_LE(e, kBound) << "logits " << i;
    }
    // A drop: the attention's projection adds into the residual the drop compacted.
    UniPrefillConfig up;
    up.enabled = true;
    up.drop_layers = cuda_model_test::TestDropLayers(fused->config());
    up.selection.mode = sparsity::SelectionMode::kFixedRatio;
    up.selection.keep_ratio = 0.5f;
    up.selection.block_size = 8;
    up.selection.sink = 4;
    up.selection.last_n = 8;
    const std::vector<int32_t> prompt =
        cuda_model_test::RandomTokens(257, fused->config().vocab_size, 41);
    std::vector<int32_t> tokens_f, tokens_s;
    std::vector<std::vector<float>> all_f, all_s;
    const std::vector<float> lf =
        cuda_model_test::Greedy(*fused, ctx, prompt, 3, up, &tokens_f, &all_f);
    const std::vector<float> ls =
        cuda_model_test::Greedy(*separate, ctx, prompt, 3, up, &tokens_s, &all_s);
    const double e = testing::MaxErrorOverMaxAbs(lf, ls);
    if (post_norms) {
      EXPECT_EQ(lf, ls);
    } else {
      EXPECT_LE(e, kBound) << "the prefill with a drop";
    }
    std::printf(
        "[%s] residual in the GEMM against the separate add: worst %.2e of the logits' "
        "scale, %.2e with a drop\n",
        source, worst, e);
  }
}

}  // namespace
}  // namespace uniprefill
