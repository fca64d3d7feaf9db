// The int8-activation multi-row kernels (ops/cpu/cpu_quant_dot_i8.h) and LinearInt8Rows at every
// CPU ISA level this machine has, forced in turn: the activation quantisation against its
// definition, each kernel against the scalar reference (ops/reference.h) on the activations it
// sees, the int32 sums at their extremes, and Linear through a context at the level. Levels
// without VNNI have no int8 kernel: there the int8 flag must fall back to the int16 rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_isa.h"
#include "core/device_context.h"
#include "io/dequant.h"
#include "ops/cpu/cpu_linear_int8_rows.h"
#include "ops/cpu/cpu_quant_dot_i8.h"
#include "ops/ops.h"
#include "ops/reference.h"
#include "ops_test_util.h"

namespace uniprefill::ops::cpu {
namespace {

using testing::MaxErrorOverRms;
using testing::RandomFloats;
using testing::RandomWeights;

constexpr DType kInt8Types[] = {DType::kQ8_0, DType::kQ5_0, DType::kQ4_K, DType::kQ6_K};

TensorView Strided(std::vector<float>& v, int64_t rows, int64_t cols, int64_t stride) {
  TensorView t = TensorView::Contiguous(v.data(), DType::kF32, {rows, cols});
  t.stride[0] = stride;
  return t;
}

LinearWeight OnePart(std::vector<uint8_t>& bytes, DType t, int64_t rows, int64_t in) {
  LinearWeight w;
  w.in_features = in;
  w.out_features = rows;
  w.parts.push_back(TensorView::Contiguous(bytes.data(), t, {rows, in}));
  return w;
}

// sum_i |w[o][i] x[r][i]| for every (r, o) of x f32 [nx, in]: the scale of a dot's rounding error.
std::vector<double> AbsDots(const LinearWeight& w, const std::vector<float>& x, int nx) {
  const TensorView& p = w.parts[0];
  const int64_t rows = p.dim(0), in = p.dim(1);
  std::vector<float> deq(rows * in);
  EXPECT_TRUE(Dequantize(p.dtype, p.data, deq.data(), rows * in).ok());
  std::vector<double> out(nx * rows, 0.0);
  for (int r = 0; r < nx; ++r) {
    for (int64_t o = 0; o < rows; ++o) {
      for (int64_t i = 0; i < in; ++i)
        out[r * rows + o] += std::fabs(deq[o * in + i] * x[r * in + i]);
    }
  }
  return out;
}

// Row lengths per type: multiples of 64 with a short last scale group (640, 1216) for the
// 32-blocks.
std::vector<int64_t> Lengths(DType t) {
  if (t == DType::kQ4_K || t == DType::kQ6_K) return {256, 768, 2304};
  return {64, 192, 640, 1216};
}

// Each block of 32 activations gets its own scale, stored on the 8 kernel lanes of its 4-value
// groups: every value within half a step of its block's, the block's largest at +-127, stored
// + 128, block sums dequantised.
TEST(QuantizeRowI8Blocks, ScalesEachBlockByItsOwnMaximum) {
  std::mt19937 rng(2231);
  for (int64_t n : {64, 576, 640, 1216}) {
    std::vector<float> x = RandomFloats(rng, n, -1.0f, 1.0f);
    for (int64_t i = 0; i < n; ++i) x[i] *= 1.0f + 100.0f * ((i / 32) % 2);
    std::vector<uint8_t> xu(n);
    std::vector<float> scale(n / 4), bsum(n / 32);
    QuantizeRowI8Blocks(x.data(), n, xu.data(), scale.data(), bsum.data());
    for (int64_t j = 0; j < n / 32; ++j) {
      const float s = scale[8 * j];
      float amax = 0.0f;
      int peak = 0, sum = 0;
      for (int64_t i = 32 * j; i < 32 * j + 32; ++i) {
        const int xq = static_cast<int>(xu[i]) - 128;
        EXPECT_EQ(scale[i / 4], s) << "every lane of block " << j << " holds its scale";
        amax = std::max(amax, std::fabs(x[i]));
        peak = std::max(peak, std::abs(xq));
        sum += xq;
        EXPECT_LE(std::fabs(x[i] - s * xq), 0.5f * s + 1e-6f * std::fabs(x[i]))
            << "n " << n << " i " << i;
        EXPECT_GE(xu[i], 1) << "xq stays within +-127";
      }
      EXPECT_FLOAT_EQ(s, amax / 127.0f) << "n " << n << " block " << j;
      EXPECT_EQ(peak, 127) << "n " << n << " block " << j;
      EXPECT_FLOAT_EQ(bsum[j], s * static_cast<float>(sum));
    }
  }
}

TEST(QuantizeRowI8Blocks, AnAllZeroBlockHasScaleZeroAndZeros) {
  std::vector<float> x(64, 0.0f);
  x[44] = -2.0f;
  std::vector<uint8_t> xu(64);
  std::vector<float> scale(16), bsum(2);
  QuantizeRowI8Blocks(x.data(), 64, xu.data(), scale.data(), bsum.data());
  for (int l = 0; l < 8; ++l) EXPECT_EQ(scale[l], 0.0f) << l;
  for (int l = 8; l < 16; ++l) EXPECT_FLOAT_EQ(scale[l], 2.0f / 127.0f) << l;
  for (int i = 0; i < 32; ++i) EXPECT_EQ(xu[i], 128) << i;
  EXPECT_EQ(xu[44], 1);
  EXPECT_FLOAT_EQ(bsum[1], -2.0f);
}

class Int8LevelTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  void SetUp() override {
    const std::string missing = MissingCpuFeatures(GetParam(), DetectCpuFeatures());
    if (!missing.empty()) {
      GTEST_SKIP() << "this CPU lacks " << missing << ", needed by level "
                   << CpuIsaName(GetParam());
    }
  }
  CpuIsa isa() const { return GetParam(); }
  bool vnni() const { return isa() >= CpuIsa::kAvx512Vnni; }
};

// Every row count 1..kQuantDotI8Rows, strided activation, scale, block-sum and output rows,
// activations whose magnitude differs by block (a wrong block's scale shows): each row's result
// is judged on its own quantised activations, so the only tolerated error is f32 rounding.
TEST_P(Int8LevelTest, MultiRowInt8KernelsMatchTheReferenceForEveryRowCount) {
  std::mt19937 rng(2232);
  int kernels = 0;
  for (DType t : kInt8Types) {
    const QuantDotI8RowsFn dot = FusedQuantDotI8Rows(t, isa());
    if (dot == nullptr) continue;
    ++kernels;
    for (int64_t in : Lengths(t)) {
      const int64_t rows = 3, os = rows + 3;
      const int64_t xs = in + 64, ss = in / 4 + 16, bs = in / 32 + 2;  // strides with padding
      std::vector<uint8_t> bytes = RandomWeights(rng, t, rows, in);
      const LinearWeight w = OnePart(bytes, t, rows, in);
      for (int nx = 1; nx <= kQuantDotI8Rows; ++nx) {
        // uint8 [nx, xs] activations + 128, their f32 [nx, ss] scales per lane, f32 [nx, bs]
        // block sums, and f32 [nx, in] the values they stand for.
        std::vector<uint8_t> xu(nx * xs, 128);
        std::vector<float> scale(nx * ss, NAN), bsum(nx * bs, NAN), xd(nx * in);
        for (int r = 0; r < nx; ++r) {
          std::vector<float> x = RandomFloats(rng, in, -3.0f, 3.0f);
          for (int64_t i = 0; i < in; ++i) x[i] *= (i / 32) % 3 == 1 ? 40.0f : 1.0f;
          QuantizeRowI8Blocks(x.data(), in, &xu[r * xs], &scale[r * ss], &bsum[r * bs]);
          for (int64_t i = 0; i < in; ++i) {
            xd[r * in + i] = scale[r * ss + i / 4] * (xu[r * xs + i] - 128);
          }
        }
        std::vector<float> ref(nx * rows, NAN), out(nx * os, NAN);
        reference::Linear(Strided(ref, nx, rows, rows), Strided(xd, nx, in, in), w);
        const std::vector<double> abs = AbsDots(w, xd, nx);
        const int64_t row_bytes = DTypeBytes(t, in);
        const I8Rows rows_in{xu.data(), xs, scale.data(), ss, bsum.data(), bs};
        for (int64_t o = 0; o < rows; ++o) {
          dot(bytes.data() + o * row_bytes, rows_in, nx, in, &out[o], os);
        }
        for (int r = 0; r < nx; ++r) {
          for (int64_t o = 0; o < rows; ++o) {
            EXPECT_NEAR(out[r * os + o], ref[r * rows + o], 1e-5 * abs[r * rows + o] + 1e-6)
                << DTypeName(t) << " in " << in << " nx " << nx << " row " << r << " out " << o;
          }
        }
      }
    }
  }
  EXPECT_EQ(kernels, vnni() ? 4 : 0) << "Q8_0, Q5_0, Q4_K, Q6_K on the VNNI levels only";
}

// The largest |q| with every activation at -127 and at +127 (xu at both ends of 0..255): the
// per-lane int32 sums, the +128 correction included, are at their bound and must be exact.
TEST_P(Int8LevelTest, Int8KernelsAreExactAtExtremeWeightsAndActivations) {
  const int64_t in = 512;
  struct Extreme {
    DType type;
    std::vector<uint8_t> block;
  };
  // Q4_K: d = 1/64 (0x2400), dmin = 0, every 6-bit scale and min 63, every nibble 15. Q6_K:
  // ql = qh = 0 (q = -32), scales -128, d = 1/64. Q8_0: d = 1/64, q = -128. Q5_0: q = -16.
  std::vector<uint8_t> q4k(144, 0xFF), q6k(210, 0x00), q80(34, 0x80), q50(22, 0x00);
  q4k[0] = 0x00, q4k[1] = 0x24, q4k[2] = 0x00, q4k[3] = 0x00;
  for (int i = 192; i < 208; ++i) q6k[i] = 0x80;
  q6k[208] = 0x00, q6k[209] = 0x24;
  q80[0] = 0x00, q80[1] = 0x24;
  q50[0] = 0x00, q50[1] = 0x24;
  for (const Extreme& e : {Extreme{DType::kQ4_K, q4k}, Extreme{DType::kQ6_K, q6k},
                           Extreme{DType::kQ8_0, q80}, Extreme{DType::kQ5_0, q50}}) {
    const QuantDotI8RowsFn rows = FusedQuantDotI8Rows(e.type, isa());
    if (rows == nullptr) continue;
    const int64_t block_len = e.type == DType::kQ4_K || e.type == DType::kQ6_K ? 256 : 32;
    std::vector<uint8_t> w;
    for (int64_t b = 0; b < in / block_len; ++b) w.insert(w.end(), e.block.begin(), e.block.end());
    std::vector<float> deq(in);
    ASSERT_TRUE(Dequantize(e.type, w.data(), deq.data(), in).ok());
    for (int xq : {-127, 127}) {
      double expected = 0.0;
      for (int64_t i = 0; i < in; ++i) expected += static_cast<double>(deq[i]) * xq;
      ASSERT_NE(expected, 0.0);
      // Two rows, every group scale 1 (block sums are the Q4_K min terms' inputs).
      const std::vector<uint8_t> xu(2 * in, static_cast<uint8_t>(xq + 128));
      const std::vector<float> bsum(2 * in / 32, 32.0f * xq), scale(2 * in / 4, 1.0f);
      std::vector<float> out(2, NAN);
      const I8Rows x{xu.data(), in, scale.data(), in / 4, bsum.data(), in / 32};
      rows(w.data(), x, 2, in, out.data(), 1);
      for (float got : out) {
        EXPECT_NEAR(got, expected, 1e-6 * std::fabs(expected)) << DTypeName(e.type) << " " << xq;
      }
    }
  }
}

// LinearWeight::int8_rows_activations through a context at the level, 2 threads, odd row counts.
// Parts with int8 kernels only: judged against the reference on the int8-rounded activations,
// so only f32 rounding is tolerated (the int16 rows would miss by their own rounding, ~1e-3).
// Levels without VNNI fall back to the int16 rows: judged against the f32 reference.
TEST_P(Int8LevelTest, LinearWithInt8RowsMatchesTheReferenceOnTheRoundedActivations) {
  std::unique_ptr<DeviceContext> ctx = DeviceContext::Cpu(2, isa());
  std::mt19937 rng(2233);
  const int64_t part_rows[] = {11, 6, 23, 9}, in = 768;
  for (int64_t t : {2, 3, 9, 16, 67}) {
    std::vector<std::vector<uint8_t>> storage;
    LinearWeight w;
    w.in_features = in;
    w.int8_rows_activations = true;
    for (int p = 0; p < 4; ++p) {
      storage.push_back(RandomWeights(rng, kInt8Types[p], part_rows[p], in));
      w.parts.push_back(
          TensorView::Contiguous(storage.back().data(), kInt8Types[p], {part_rows[p], in}));
      w.out_features += part_rows[p];
    }
    EXPECT_EQ(CanRunLinearInt8Rows(w, isa()), vnni());
    const int64_t xs = in + 1, os = w.out_features + 2;
    std::vector<float> x = RandomFloats(rng, t * xs);
    std::vector<float> xd(t * in);
    for (int64_t r = 0; r < t; ++r) {
      std::vector<uint8_t> xu(in);
      std::vector<float> scale(in / 4), bsum(in / 32);
      QuantizeRowI8Blocks(&x[r * xs], in, xu.data(), scale.data(), bsum.data());
      for (int64_t i = 0; i < in; ++i) {
        xd[r * in + i] = vnni() ? scale[i / 4] * (xu[i] - 128) : x[r * xs + i];
      }
    }
    std::vector<float> out(t * os, 0.0f), ref(t * os, 0.0f);
    Linear(*ctx, Strided(out, t, w.out_features, os), Strided(x, t, in, xs), w);
    reference::Linear(Strided(ref, t, w.out_features, os), Strided(xd, t, in, in), w);
    EXPECT_LT(MaxErrorOverRms(out, ref), vnni() ? 2e-5 : 2e-4) << "T " << t;
  }
}

// A Q4_1 part (no int8 kernel: f32 activations in the same call) next to int8 parts, against the
// f32 reference: the int8 rounding (half a step, group max / 254) bounds the error.
TEST_P(Int8LevelTest, LinearWithInt8RowsAndAnF32PartStaysWithinTheRounding) {
  std::unique_ptr<DeviceContext> ctx = DeviceContext::Cpu(2, isa());
  std::mt19937 rng(2234);
  const DType types[] = {DType::kQ8_0, DType::kQ4_1, DType::kQ6_K};
  const int64_t part_rows[] = {7, 13, 5}, in = 512;
  for (int64_t t : {2, 33}) {
    std::vector<std::vector<uint8_t>> storage;
    LinearWeight w;
    w.in_features = in;
    w.int8_rows_activations = true;
    for (int p = 0; p < 3; ++p) {
      storage.push_back(RandomWeights(rng, types[p], part_rows[p], in));
      w.parts.push_back(
          TensorView::Contiguous(storage.back().data(), types[p], {part_rows[p], in}));
      w.out_features += part_rows[p];
    }
    std::vector<float> x = RandomFloats(rng, t * in);
    std::vector<float> out(t * w.out_features, 0.0f), ref(t * w.out_features, 0.0f);
    Linear(*ctx, Strided(out, t, w.out_features, w.out_features), Strided(x, t, in, in), w);
    reference::Linear(Strided(ref, t, w.out_features, w.out_features), Strided(x, t, in, in), w);
    // Per value error std (1/127) / sqrt(12) against the values' std 1/sqrt(3): ~4e-3 of the
    // output RMS per output; the max over ~800 outputs stays below ~4x that.
    EXPECT_LT(MaxErrorOverRms(out, ref), 2e-2) << "T " << t;
  }
}

TEST_P(Int8LevelTest, RowsNotAMultipleOf64LongTakeTheInt16Rows) {
  std::mt19937 rng(2235);
  std::vector<uint8_t> bytes = RandomWeights(rng, DType::kQ8_0, 4, 96);
  EXPECT_FALSE(CanRunLinearInt8Rows(OnePart(bytes, DType::kQ8_0, 4, 96), isa()));
}

// The VNNI levels run their own int8 kernels (a silent fall back would pass the tests above).
TEST_P(Int8LevelTest, TheVnniLevelsRunTheirOwnInt8Kernels) {
  for (DType t : kInt8Types) {
    EXPECT_EQ(FusedQuantDotI8RowsLevel(t, isa()), vnni() ? "avx512-vnni" : "") << DTypeName(t);
  }
  EXPECT_EQ(FusedQuantDotI8RowsLevel(DType::kQ4_1, isa()), "");
  EXPECT_EQ(FusedQuantDotI8RowsLevel(DType::kQ5_K, isa()), "");
}

INSTANTIATE_TEST_SUITE_P(Levels, Int8LevelTest,
                         ::testing::Values(CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Vnni,
                                           CpuIsa::kAvx512Bf16, CpuIsa::kAmxBf16),
                         [](const ::testing::TestParamInfo<CpuIsa>& p) {
                           std::string name(CpuIsaName(p.param));
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

}  // namespace
}  // namespace uniprefill::ops::cpu
