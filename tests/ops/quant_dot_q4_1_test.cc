// The AVX2 Q4_1 decode kernels (f32 activations, 1..7 rows; int16 activations, one row) vs the
// scalar reference: io/Dequantize of the row, then a double-precision dot. Random blocks, random
// activations, every row count and several row lengths (one block, odd block counts, SmolLM2's
// 576 and 1536).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "io/dequant.h"
#include "ops/cpu/cpu_quant_dot.h"
#include "ops/cpu/cpu_quant_dot_i16.h"
#include "ops_test_util.h"

namespace uniprefill::ops::cpu {
namespace {

using testing::RandomFloats;
using testing::RandomWeights;

constexpr int64_t kLengths[] = {32, 96, 576, 1536};

double ReferenceDot(const std::vector<uint8_t>& w, const float* x, int64_t n) {
  std::vector<float> row(n);
  EXPECT_TRUE(Dequantize(DType::kQ4_1, w.data(), row.data(), n).ok());
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(row[i]) * x[i];
  return sum;
}

// The scale of a dot's rounding error: sum |w_i x_i|.
double AbsDot(const std::vector<uint8_t>& w, const float* x, int64_t n) {
  std::vector<float> row(n);
  EXPECT_TRUE(Dequantize(DType::kQ4_1, w.data(), row.data(), n).ok());
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::fabs(static_cast<double>(row[i]) * x[i]);
  return sum;
}

TEST(QuantDotQ4_1, FusedF32KernelMatchesDequantisedDotForEveryRowCount) {
  const QuantDotFn dot = FusedQuantDot(DType::kQ4_1, CpuIsa::kAvx2);
  ASSERT_NE(dot, nullptr);
  std::mt19937 rng(41);
  for (int64_t n : kLengths) {
    for (int nx = 1; nx <= kQuantDotMaxRows; ++nx) {
      const std::vector<uint8_t> w = RandomWeights(rng, DType::kQ4_1, 1, n);
      const int64_t x_stride = n + 5, out_stride = 3;
      const std::vector<float> x = RandomFloats(rng, nx * x_stride);
      std::vector<float> out(nx * out_stride, NAN);
      dot(w.data(), x.data(), x_stride, nx, n, out.data(), out_stride);
      for (int r = 0; r < nx; ++r) {
        const float* xr = x.data() + r * x_stride;
        EXPECT_NEAR(out[r * out_stride], ReferenceDot(w, xr, n), 1e-5 * AbsDot(w, xr, n) + 1e-6)
            << "n " << n << " nx " << nx << " row " << r;
      }
    }
  }
}

TEST(QuantDotQ4_1, Int16KernelMatchesDequantisedDotWithinActivationRounding) {
  const QuantDotI16Fn dot = FusedQuantDotI16(DType::kQ4_1, CpuIsa::kAvx2);
  ASSERT_NE(dot, nullptr);
  std::mt19937 rng(42);
  for (int64_t n : kLengths) {
    for (int trial = 0; trial < 8; ++trial) {
      const std::vector<uint8_t> w = RandomWeights(rng, DType::kQ4_1, 1, n);
      const std::vector<float> x = RandomFloats(rng, n, -3.0f, 3.0f);
      std::vector<int16_t> xq(n);
      float scale = 0.0f;
      QuantizeRowI16(x.data(), n, xq.data(), &scale);
      const double got = static_cast<double>(scale) * dot(w.data(), xq.data(), n);
      // Each x moves by at most scale / 2: the dot by at most sum |w_i| * scale / 2.
      std::vector<float> row(n);
      ASSERT_TRUE(Dequantize(DType::kQ4_1, w.data(), row.data(), n).ok());
      double abs_w = 0.0;
      for (float v : row) abs_w += std::fabs(v);
      EXPECT_NEAR(got, ReferenceDot(w, x.data(), n),
                  abs_w * scale * 0.5 + 1e-5 * AbsDot(w, x.data(), n) + 1e-6)
          << "n " << n << " trial " << trial;
    }
  }
}

TEST(QuantDotQ4_1, MinOnlyBlocksGiveTheMinTimesTheActivationSum) {
  // d = 0, m = 0.5 (fp16 0x3800): every weight is 0.5 whatever the nibbles.
  std::vector<uint8_t> w(20 * 2, 0xA7);
  for (int b = 0; b < 2; ++b) {
    w[20 * b] = 0x00, w[20 * b + 1] = 0x00;  // d = +0
    w[20 * b + 2] = 0x00, w[20 * b + 3] = 0x38;
  }
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = static_cast<float>(i % 7) - 3.0f;
  double sum = 0.0;
  for (float v : x) sum += v;
  float out = NAN;
  FusedQuantDot(DType::kQ4_1, CpuIsa::kAvx2)(w.data(), x.data(), 64, 1, 64, &out, 1);
  EXPECT_FLOAT_EQ(out, static_cast<float>(0.5 * sum));
}

}  // namespace
}  // namespace uniprefill::ops::cpu
