// Linear vs the scalar reference (dequantise + double dot) for every dequantisable weight type,
// decode (fused matvec, 1..7 rows per pass), batched int16 rows (2..kQuantBatchMaxRows rows, or
// more without an f32 copy) and prefill (sgemm on the f32 copy) paths, fused parts, strided rows,
// 1 and 2 threads.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "io/dequant.h"
#include "ops/ops.h"
#include "ops/reference.h"
#include "ops_test_util.h"

namespace uniprefill::ops {
namespace {

using testing::MaxErrorOverRms;
using testing::RandomFloats;
using testing::RandomWeights;

constexpr DType kAllTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0,
                               DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0,
                               DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

struct Case {
  std::vector<DType> part_types;
  std::vector<int64_t> part_rows;
  int64_t in;
  int64_t t;
  bool with_f32;
  bool int16 = false;  // products on int16-quantised activations (one row and batched rows)
  // With int16: the bound on MaxErrorOverRms. The rounding of each x (max|x| / 65534) gives
  // ~1e-5 of the output scale per output; the max over a few hundred outputs reaches ~1e-4.
  double int16_tol = 1e-4;
};

// Runs one case on ctx and compares to the reference; x and out rows are strided.
void RunCase(DeviceContext& ctx, const Case& c, std::mt19937& rng) {
  std::vector<std::vector<uint8_t>> storage;
  LinearWeight w;
  w.in_features = c.in;
  w.int16_decode_activations = c.int16;
  for (size_t i = 0; i < c.part_types.size(); ++i) {
    storage.push_back(RandomWeights(rng, c.part_types[i], c.part_rows[i], c.in));
    w.parts.push_back(TensorView::Contiguous(storage.back().data(), c.part_types[i],
                                             {c.part_rows[i], c.in}));
    w.out_features += c.part_rows[i];
  }
  if (c.with_f32) {
    w.f32 = Buffer(sizeof(float) * w.out_features * c.in);
    int64_t row = 0;
    for (const TensorView& p : w.parts) {
      ASSERT_TRUE(Dequantize(p.dtype, p.data, w.f32.as<float>() + row * c.in, p.dim(0) * c.in).ok());
      row += p.dim(0);
    }
  }
  const int64_t x_stride = c.in + 3, out_stride = w.out_features + 5;
  std::vector<float> x = RandomFloats(rng, c.t * x_stride);
  std::vector<float> out(c.t * out_stride, 0.0f), ref(c.t * out_stride, 0.0f);
  auto view = [](std::vector<float>& v, int64_t rows, int64_t cols, int64_t stride) {
    TensorView t = TensorView::Contiguous(v.data(), DType::kF32, {rows, cols});
    t.stride[0] = stride;
    return t;
  };
  Linear(ctx, view(out, c.t, w.out_features, out_stride), view(x, c.t, c.in, x_stride), w);
  reference::Linear(view(ref, c.t, w.out_features, out_stride), view(x, c.t, c.in, x_stride), w);
  std::string types;
  for (DType t : c.part_types) types += std::string(DTypeName(t)) + " ";
  // int16 activations round each x to max|x| / 65534: ~1e-5 of the output scale, bounded here.
  EXPECT_LT(MaxErrorOverRms(out, ref), c.int16 ? c.int16_tol : 2e-5)
      << "types " << types << "in " << c.in << " T " << c.t << " f32 " << c.with_f32
      << " threads " << ctx.threads();
}

class LinearTest : public ::testing::TestWithParam<int> {
 protected:
  std::unique_ptr<DeviceContext> ctx_ = DeviceContext::Cpu(GetParam());
};

TEST_P(LinearTest, MatchesReferenceForEveryTypeAndRowCount) {
  std::mt19937 rng(1234);
  for (DType type : kAllTypes) {
    for (int64_t in : {256, 768}) {
      for (int64_t t : {1, 2, 3, 7, 8, 33}) {
        for (int64_t rows : {1, 37}) {
          RunCase(*ctx_, {{type}, {rows}, in, t, false}, rng);
        }
      }
    }
  }
}

TEST_P(LinearTest, GemmPathOnF32CopyMatchesReference) {
  std::mt19937 rng(99);
  for (DType type : {DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    for (int64_t t : {1, 3, 8, 33}) RunCase(*ctx_, {{type}, {70}, 512, t, true}, rng);
  }
}

TEST_P(LinearTest, FusedPartsWriteTheirColumnRanges) {
  std::mt19937 rng(7);
  for (int64_t t : {1, 3, 8, 33}) {
    RunCase(*ctx_, {{DType::kQ5_0, DType::kQ8_0, DType::kQ6_K}, {40, 9, 17}, 256, t, false}, rng);
    RunCase(*ctx_, {{DType::kQ4_K, DType::kQ5_K}, {3, 50}, 512, t, t == 8}, rng);
  }
}

TEST_P(LinearTest, FloatTypesHandleOddInnerSizes) {
  std::mt19937 rng(5);
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t in : {1, 7, 8, 37, 100}) {
      for (int64_t t : {1, 2, 5, 9}) RunCase(*ctx_, {{type}, {13}, in, t, false}, rng);
    }
  }
}

TEST_P(LinearTest, Int16DecodeActivationsStayCloseToReference) {
  std::mt19937 rng(99);
  for (DType t : kAllTypes) {
    for (int64_t in : {256, 512, 2048}) {  // multiples of the K-quant block
      for (int64_t tt : {1, 2}) RunCase(*ctx_, Case{{t}, {67}, in, tt, false, true}, rng);
    }
  }
  // Mixed parts: the int16 kernel for some, the f32 kernels for the others, one quantised row.
  RunCase(*ctx_, Case{{DType::kQ5_0, DType::kQ6_K, DType::kQ8_0}, {33, 17, 40}, 512, 1, false, true},
          rng);
}

// Several rows on int16 activations (LinearInt16Rows where every part has an int16 kernel, the
// old paths otherwise): odd row counts around the kernels' 4-row groups and the 64-row limit,
// with and without the f32 copy (above 64 rows with a copy: sgemm).
TEST_P(LinearTest, BatchedInt16RowsStayCloseToReference) {
  std::mt19937 rng(2024);
  for (DType t : kAllTypes) {
    for (int64_t in : {256, 1280}) {
      for (int64_t tt : {2, 3, 5, 8, 13, 64, 65}) {
        RunCase(*ctx_, Case{{t}, {37}, in, tt, tt % 2 == 1, true, 2e-4}, rng);
      }
    }
  }
  for (int64_t tt : {4, 9, 31, 70}) {
    RunCase(*ctx_,
            Case{{DType::kQ4_K, DType::kQ8_0, DType::kQ6_K, DType::kQ5_0, DType::kQ4_1},
                 {19, 5, 33, 2, 11}, 512, tt, tt == 70, true, 2e-4},
            rng);
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, LinearTest, ::testing::Values(1, 2));

}  // namespace
}  // namespace uniprefill::ops
