// The AVX-512 f32 decoders (ops/cpu/cpu_dequant_f32_avx512.h) and the prefill GEMM that makes its
// f32 operand per call with them (LinearWeight::f32_on_call): both must give exactly what the
// scalar io/dequant.h and a kept f32 copy give, so dropping the copies changes no number.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/cpu_isa.h"
#include "core/device_context.h"
#include "io/dequant.h"
#include "ops/cpu/cpu_dequant_f32_avx512.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/ops.h"
#include "ops_test_util.h"

namespace uniprefill::ops::cpu {
namespace {

using testing::RandomFloats;
using testing::RandomWeights;

bool HasAvx512() { return MissingCpuFeatures(CpuIsa::kAvx512, DetectCpuFeatures()).empty(); }

const DType kTypes[] = {DType::kQ8_0, DType::kQ5_0, DType::kQ4_K, DType::kQ6_K,
                        DType::kF16,  DType::kBF16, DType::kF32};

TEST(DequantF32Avx512, EqualsTheScalarOneBitForBit) {
  if (!HasAvx512()) GTEST_SKIP() << "this CPU lacks the avx512 level";
  std::mt19937 rng(91);
  const int64_t rows = 6, in = 1024;  // 4 K-quant blocks, 32 of the 32-value ones
  for (DType type : kTypes) {
    ASSERT_TRUE(HasDequantRowF32Avx512(type)) << DTypeName(type);
    const std::vector<uint8_t> bytes = RandomWeights(rng, type, rows, in);
    std::vector<float> want(in), got(in);
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = bytes.data() + DTypeBytes(type, r * in);
      ASSERT_TRUE(Dequantize(type, row, want.data(), in).ok());
      std::fill(got.begin(), got.end(), std::nanf(""));
      DequantRowF32Avx512(type, row, in, got.data());
      ASSERT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * in), 0)
          << DTypeName(type) << " row " << r;
    }
  }
  EXPECT_FALSE(HasDequantRowF32Avx512(DType::kQ4_1));  // keeps a copy: no vector decoder
}

// Two stacked parts of different types (as q, k, v are), prefill-sized row counts: the per-call
// operand and the kept copy give the same outputs to the bit; weights a decoder lacks (Q4_1)
// are not offered the per-call path.
TEST(DequantF32Avx512, GemmOnCallEqualsTheKeptCopy) {
  if (!HasAvx512()) GTEST_SKIP() << "this CPU lacks the avx512 level";
  std::unique_ptr<DeviceContext> ctx = DeviceContext::Cpu(2, CpuIsa::kAvx512);
  std::mt19937 rng(17);
  const int64_t in = 512;
  const std::pair<DType, DType> pairs[] = {{DType::kQ4_K, DType::kQ6_K},
                                           {DType::kQ8_0, DType::kQ5_0},
                                           {DType::kF16, DType::kBF16}};
  for (auto [a, b] : pairs) {
    const int64_t rows_a = 96, rows_b = 40;
    const std::vector<uint8_t> wa = RandomWeights(rng, a, rows_a, in);
    const std::vector<uint8_t> wb = RandomWeights(rng, b, rows_b, in);
    auto stacked = [&] {
      LinearWeight w;
      w.in_features = in;
      w.out_features = rows_a + rows_b;
      w.parts = {TensorView::Contiguous(const_cast<uint8_t*>(wa.data()), a, {rows_a, in}),
                 TensorView::Contiguous(const_cast<uint8_t*>(wb.data()), b, {rows_b, in})};
      return w;
    };
    LinearWeight w = stacked();
    ASSERT_TRUE(CanDequantiseForGemm(w, CpuIsa::kAvx512));
    EXPECT_FALSE(CanDequantiseForGemm(w, CpuIsa::kAvx2));
    LinearWeight copy = stacked();
    copy.f32 = Buffer(sizeof(float) * w.out_features * in);
    ASSERT_TRUE(Dequantize(a, wa.data(), copy.f32.as<float>(), rows_a * in).ok());
    ASSERT_TRUE(Dequantize(b, wb.data(), copy.f32.as<float>() + rows_a * in, rows_b * in).ok());
    LinearWeight on_call = stacked();
    on_call.f32_on_call = true;
    for (int64_t T : {65, 200}) {
      std::vector<float> x = RandomFloats(rng, T * in);
      std::vector<float> want(T * w.out_features), got(T * w.out_features, std::nanf(""));
      TensorView xv = TensorView::Contiguous(x.data(), DType::kF32, {T, in});
      cpu::Linear(*ctx, TensorView::Contiguous(want.data(), DType::kF32, {T, w.out_features}), xv,
             copy);
      cpu::Linear(*ctx, TensorView::Contiguous(got.data(), DType::kF32, {T, w.out_features}), xv,
             on_call);
      ASSERT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * got.size()), 0)
          << DTypeName(a) << " + " << DTypeName(b) << ", " << T << " rows";
    }
  }
  LinearWeight q41;
  const std::vector<uint8_t> bytes = RandomWeights(rng, DType::kQ4_1, 8, in);
  q41.in_features = in;
  q41.out_features = 8;
  q41.parts = {TensorView::Contiguous(const_cast<uint8_t*>(bytes.data()), DType::kQ4_1, {8, in})};
  EXPECT_FALSE(CanDequantiseForGemm(q41, CpuIsa::kAvx512));
}

}  // namespace
}  // namespace uniprefill::ops::cpu
