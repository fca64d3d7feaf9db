// The synthetic GPU transformer (the bench's model): UniPrefill that keeps everything equals dense
// bit for bit, a packed batch equals each request alone, and fixed-ratio drops shrink the batch.
#include "model/cuda/synthetic_transformer.h"

#include <gtest/gtest.h>

#include <cmath>

#include "testing/cuda_test_util.h"

namespace uniprefill {
namespace {

std::unique_ptr<SyntheticTransformer> MakeTiny(DeviceContext& ctx, int64_t max_tokens) {
  Result<SyntheticShape> shape = SyntheticShapeByName("tiny");
  EXPECT_TRUE(shape.ok());
  Result<std::unique_ptr<SyntheticTransformer>> m =
      SyntheticTransformer::Create(ctx, *shape, max_tokens, 7);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return std::move(m).value();
}

TEST(CudaSyntheticTransformerTest, KeepEverythingEqualsDenseExactly) {
  UP_CUDA_TEST_CONTEXT(ctx);
  auto model = MakeTiny(ctx, 2048);
  std::vector<float> dense, kept_all;
  ASSERT_TRUE(model->Prefill({1000}, UniPrefillRun{}, 3, false, &dense).ok());
  UniPrefillRun up;
  up.enabled = true;
  up.selection.top_p = 1.0f;
  Result<PrefillTiming> t = model->Prefill({1000}, up, 3, false, &kept_all);
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->kept[0].size(), 1u);
  EXPECT_EQ(t->kept[0][0], 1000);
  ASSERT_EQ(dense.size(), kept_all.size());
  for (size_t i = 0; i < dense.size(); ++i) {
    ASSERT_TRUE(std::isfinite(dense[i]));
    ASSERT_EQ(dense[i], kept_all[i]) << i;
  }
}

TEST(CudaSyntheticTransformerTest, PackedBatchEqualsEachAlone) {
  UP_CUDA_TEST_CONTEXT(ctx);
  auto model = MakeTiny(ctx, 4096);
  for (bool drop : {false, true}) {
    UniPrefillRun up;
    up.enabled = drop;
    up.selection.mode = sparsity::SelectionMode::kFixedRatio;
    up.selection.keep_ratio = 0.5f;
    std::vector<float> a, b, both;
    // The same seed gives the same ids for the first request, so compare with seeds aligned:
    // request 0 alone uses ids from seed 5; the batch's first request too.
    Result<PrefillTiming> ta = model->Prefill({700}, up, 5, false, &a);
    Result<PrefillTiming> tb = model->Prefill({700, 300}, up, 5, false, &both);
    ASSERT_TRUE(ta.ok() && tb.ok());
    const size_t v = a.size();
    std::vector<float> first(both.begin(), both.begin() + v);
    EXPECT_LT(testing::NormalizedError(first, a), 2e-2) << "drop=" << drop;
    if (drop) {
      EXPECT_EQ(ta->kept[0], tb->kept[0]);
      EXPECT_LT(tb->kept[0][0], 700);
      EXPECT_LE(tb->kept[1][0], 300);
    }
  }
}

TEST(CudaSyntheticTransformerTest, FixedRatioKeepsAboutTheRatio) {
  UP_CUDA_TEST_CONTEXT(ctx);
  auto model = MakeTiny(ctx, 8192);
  UniPrefillRun up;
  up.enabled = true;
  up.selection.mode = sparsity::SelectionMode::kFixedRatio;
  up.selection.keep_ratio = 0.3f;
  Result<PrefillTiming> t = model->Prefill({8192}, up, 9, false, nullptr);
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->kept[0].size(), 1u);  // tiny has one drop layer
  // floor(0.3 * 128) = 38 blocks of 64, plus the sink and window blocks when not already chosen.
  EXPECT_GE(t->kept[0][0], 38 * 64);
  EXPECT_LE(t->kept[0][0], 38 * 64 + 256);
  EXPECT_GT(t->total_ms, 0);
  EXPECT_GT(t->uniprefill_ms, 0);
}

}  // namespace
}  // namespace uniprefill
