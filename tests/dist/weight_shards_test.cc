// A rank's weight slices (dist/weight_shards.h) for every weight type the engine reads, checked by
// the math tensor parallelism relies on: column-parallel shards' outputs, side by side, are the
// full Linear's columns; row-parallel shards' outputs, summed (the all-reduce), are the full
// Linear's output. Two parts stacked along `out` (as fused QKV), shards that cut across them.
#include "dist/weight_shards.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "ops/ops.h"
#include "ops/ops_test_util.h"

namespace uniprefill::dist {
namespace {

using ::uniprefill::ops::testing::MaxErrorOverRms;
using ::uniprefill::ops::testing::RandomFloats;
using ::uniprefill::ops::testing::RandomWeights;

constexpr DType kTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0,
                            DType::kQ4_1, DType::kQ5_0, DType::kQ8_0, DType::kQ4_K,
                            DType::kQ5_K, DType::kQ6_K};
constexpr int64_t kIn = 512, kT = 3;

struct Weight {
  std::vector<std::vector<uint8_t>> storage;
  ops::LinearWeight w;
};

Weight MakeWeight(std::mt19937& rng, DType t) {
  Weight m;
  m.w.in_features = kIn;
  m.w.int16_decode_activations = false;
  for (int64_t rows : {24, 40}) {
    m.storage.push_back(RandomWeights(rng, t, rows, kIn));
    m.w.parts.push_back(TensorView::Contiguous(m.storage.back().data(), t, {rows, kIn}));
    m.w.out_features += rows;
  }
  return m;
}

std::vector<float> RunLinear(DeviceContext& ctx, const ops::LinearWeight& w, const float* x,
                       int64_t x_stride) {
  std::vector<float> out(kT * w.out_features);
  TensorView xv = TensorView::Contiguous(const_cast<float*>(x), DType::kF32, {kT, w.in_features});
  xv.stride[0] = x_stride;
  ops::Linear(ctx, TensorView::Contiguous(out.data(), DType::kF32, {kT, w.out_features}), xv, w);
  return out;
}

TEST(WeightShardsTest, ColumnAndRowParallelShardsRebuildTheFullLinear) {
  auto ctx = DeviceContext::Cpu(2);
  std::mt19937 rng(7);
  for (DType t : kTypes) {
    Weight full = MakeWeight(rng, t);
    const std::vector<float> x = RandomFloats(rng, kT * kIn);
    const std::vector<float> want = RunLinear(*ctx, full.w, x.data(), kIn);
    const int64_t out = full.w.out_features;
    for (int world : {2, 4}) {
      SCOPED_TRACE(std::string(DTypeName(t)) + ", " + std::to_string(world) + " ranks");
      // Column-parallel: rows [out r / N, out (r + 1) / N); rank shards cut across the parts.
      std::vector<float> side_by_side(kT * out, 0.0f);
      for (int r = 0; r < world; ++r) {
        const int64_t b = out * r / world, e = out * (r + 1) / world;
        Result<ops::LinearWeight> s = SliceOutputRows(full.w, b, e);
        ASSERT_TRUE(s.ok()) << s.status().message();
        ASSERT_EQ(s->out_features, e - b);
        const std::vector<float> part = RunLinear(*ctx, *s, x.data(), kIn);
        for (int64_t i = 0; i < kT; ++i) {
          for (int64_t j = b; j < e; ++j) side_by_side[i * out + j] = part[i * (e - b) + j - b];
        }
      }
      EXPECT_LT(MaxErrorOverRms(side_by_side, want), 1e-6);
      // Row-parallel: input columns [in r / N, ...), each rank's x slice; outputs summed.
      const int64_t cols = kIn / world;
      const auto info = GetDTypeInfo(static_cast<uint32_t>(t));
      if (cols % info->block_elems != 0) {
        std::vector<Buffer> storage;
        Result<ops::LinearWeight> s = SliceInputColumns(full.w, 0, cols, &storage);
        ASSERT_FALSE(s.ok()) << "a slice that cuts quant blocks must be refused";
        EXPECT_NE(s.status().message().find("blocks of"), std::string::npos);
        continue;
      }
      std::vector<float> sum(kT * out, 0.0f);
      for (int r = 0; r < world; ++r) {
        std::vector<Buffer> storage;
        Result<ops::LinearWeight> s = SliceInputColumns(full.w, r * cols, (r + 1) * cols, &storage);
        ASSERT_TRUE(s.ok()) << s.status().message();
        const std::vector<float> part = RunLinear(*ctx, *s, x.data() + r * cols, kIn);
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
      }
      EXPECT_LT(MaxErrorOverRms(sum, want), 2e-5);
    }
  }
}

TEST(WeightShardsTest, RangesOutsideTheWeightAreRefused) {
  std::mt19937 rng(3);
  Weight full = MakeWeight(rng, DType::kQ8_0);
  std::vector<Buffer> storage;
  EXPECT_FALSE(SliceOutputRows(full.w, 60, 70).ok());
  EXPECT_FALSE(SliceOutputRows(full.w, 5, 5).ok());
  EXPECT_FALSE(SliceInputColumns(full.w, 0, 544, &storage).ok());
  EXPECT_FALSE(SliceInputColumns(full.w, 16, 48, &storage).ok()) << "cuts Q8_0 blocks of 32";
  ops::LinearWeight random;
  random.random_parts.push_back({1, 8, 0.1f});
  random.out_features = 8;
  random.in_features = 64;
  EXPECT_FALSE(SliceOutputRows(random, 0, 4).ok());
}

}  // namespace
}  // namespace uniprefill::dist
