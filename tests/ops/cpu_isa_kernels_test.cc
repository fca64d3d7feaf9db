// Every CPU ISA level this machine has, forced in turn: its decode kernels (f32 and int16
// activations) and Linear through a context at that level, against the scalar reference
// (ops/reference.h) on random weights and activations with odd sizes and strides. A level the CPU
// lacks skips, naming the missing features.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_isa.h"
#include "core/device_context.h"
#include "io/dequant.h"
#include "ops/cpu/cpu_quant_dot.h"
#include "ops/cpu/cpu_quant_dot_i16.h"
#include "ops/ops.h"
#include "ops/reference.h"
#include "ops_test_util.h"

namespace uniprefill::ops::cpu {
namespace {

using testing::MaxErrorOverRms;
using testing::RandomFloats;
using testing::RandomWeights;

constexpr DType kFusedTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,
                                 DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ4_K,
                                 DType::kQ5_K, DType::kQ6_K};

// Row lengths per type: odd block counts, and for the float types lengths that leave every
// remainder of the 8- and 16-lane loops.
std::vector<int64_t> Lengths(DType t) {
  if (t == DType::kF32 || t == DType::kF16 || t == DType::kBF16) return {1, 7, 15, 17, 33, 1001};
  if (t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K) return {256, 768, 2304};
  return {32, 96, 1184};
}

// One weight matrix [rows, in] of type t with its bytes.
struct Weight {
  std::vector<uint8_t> bytes;
  LinearWeight lw;
};

Weight MakeWeight(std::mt19937& rng, DType t, int64_t rows, int64_t in) {
  Weight w;
  w.bytes = RandomWeights(rng, t, rows, in);
  w.lw.in_features = in;
  w.lw.out_features = rows;
  w.lw.parts.push_back(TensorView::Contiguous(w.bytes.data(), t, {rows, in}));
  return w;
}

TensorView Strided(std::vector<float>& v, int64_t rows, int64_t cols, int64_t stride) {
  TensorView t = TensorView::Contiguous(v.data(), DType::kF32, {rows, cols});
  t.stride[0] = stride;
  return t;
}

// sum_i |w[o][i] x[r][i]| for every (r, o): the scale of a dot's rounding error. f32 [nx, rows].
std::vector<double> AbsDots(const Weight& w, const std::vector<float>& x, int nx, int64_t xs) {
  const TensorView& p = w.lw.parts[0];
  const int64_t rows = p.dim(0), in = p.dim(1);
  std::vector<float> deq(rows * in);
  EXPECT_TRUE(Dequantize(p.dtype, p.data, deq.data(), rows * in).ok());
  std::vector<double> out(nx * rows, 0.0);
  for (int r = 0; r < nx; ++r) {
    for (int64_t o = 0; o < rows; ++o) {
      for (int64_t i = 0; i < in; ++i)
        out[r * rows + o] += std::fabs(deq[o * in + i] * x[r * xs + i]);
    }
  }
  return out;
}

// Each group of kI16ScaleGroup activations (the last one shorter) gets its own scale: every value
// within half a step of its group's, the group's largest at +-32767, block sums dequantised.
TEST(QuantizeRowI16Groups, ScalesEachGroupByItsOwnMaximum) {
  std::mt19937 rng(2217);
  for (int64_t n : {32, 128, 576, 640, 1184}) {
    std::vector<float> x = RandomFloats(rng, n, -1.0f, 1.0f);
    for (int64_t i = 0; i < n; ++i) x[i] *= 1.0f + 100.0f * ((i / kI16ScaleGroup) % 2);
    const int64_t groups = (n + kI16ScaleGroup - 1) / kI16ScaleGroup;
    std::vector<int16_t> xq(n);
    std::vector<float> scale(groups), bsum(n / 32);
    QuantizeRowI16Groups(x.data(), n, xq.data(), scale.data(), bsum.data());
    for (int64_t g = 0; g < groups; ++g) {
      float amax = 0.0f;
      int peak = 0;
      for (int64_t i = g * kI16ScaleGroup; i < std::min(n, (g + 1) * kI16ScaleGroup); ++i) {
        amax = std::max(amax, std::fabs(x[i]));
        peak = std::max(peak, std::abs(static_cast<int>(xq[i])));
        // Half a step, plus the f32 rounding of scale * xq.
        const float bound = 0.5f * scale[g] + 1e-6f * std::fabs(x[i]);
        EXPECT_LE(std::fabs(x[i] - scale[g] * xq[i]), bound) << "n " << n << " i " << i;
      }
      EXPECT_FLOAT_EQ(scale[g], amax / 32767.0f) << "n " << n << " group " << g;
      EXPECT_EQ(peak, 32767) << "n " << n << " group " << g;
    }
    for (int64_t j = 0; j < n / 32; ++j) {
      double sum = 0.0;
      for (int i = 0; i < 32; ++i) sum += xq[32 * j + i];
      EXPECT_FLOAT_EQ(bsum[j], static_cast<float>(scale[32 * j / kI16ScaleGroup] * sum));
    }
  }
}

// The vectorised quantisation equals the scalar definition bit for bit: every length's vector
// body and tail, values on rounding ties (x * inv = k + 0.5) and at the clamp.
TEST(QuantizeRowI16, EqualsTheScalarDefinitionBitForBit) {
  std::mt19937 rng(2221);
  for (int64_t n = 1; n <= 70; ++n) {
    std::vector<float> x = RandomFloats(rng, n, -2.0f, 2.0f);
    x[0] = 2.0f;  // amax 2: inv = 32767 / 2, so x = (2k + 1) / 32767 lands on ties
    for (int64_t i = 1; i < n; i += 3) x[i] = static_cast<float>(2 * i + 1) / 32767.0f;
    std::vector<int16_t> xq(n);
    float scale = 0.0f;
    QuantizeRowI16(x.data(), n, xq.data(), &scale);
    float amax = 0.0f;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    EXPECT_EQ(scale, amax / 32767.0f);
    const float inv = 32767.0f / amax;
    for (int64_t i = 0; i < n; ++i) {
      const auto want =
          static_cast<int16_t>(std::lrintf(std::clamp(x[i] * inv, -32767.0f, 32767.0f)));
      EXPECT_EQ(xq[i], want) << "n " << n << " i " << i;
    }
  }
}

class IsaLevelTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  void SetUp() override {
    const std::string missing = MissingCpuFeatures(GetParam(), DetectCpuFeatures());
    if (!missing.empty()) {
      GTEST_SKIP() << "this CPU lacks " << missing << ", needed by level "
                   << CpuIsaName(GetParam());
    }
  }
  CpuIsa isa() const { return GetParam(); }
};

TEST_P(IsaLevelTest, F32ActivationKernelsMatchTheReferenceForEveryRowCount) {
  std::mt19937 rng(2212);
  for (DType t : kFusedTypes) {
    const QuantDotFn dot = FusedQuantDot(t, isa());
    ASSERT_NE(dot, nullptr) << DTypeName(t);
    for (int64_t in : Lengths(t)) {
      const int64_t rows = 3, xs = in + 5, os = rows + 2;
      const Weight w = MakeWeight(rng, t, rows, in);
      for (int nx = 1; nx <= kQuantDotMaxRows; ++nx) {
        std::vector<float> x = RandomFloats(rng, nx * xs, -2.0f, 2.0f);
        std::vector<float> out(nx * os, NAN), ref(nx * os, NAN);
        reference::Linear(Strided(ref, nx, rows, os), Strided(x, nx, in, xs), w.lw);
        const int64_t row_bytes = DTypeBytes(t, in);
        for (int64_t o = 0; o < rows; ++o)
          dot(w.bytes.data() + o * row_bytes, x.data(), xs, nx, in, &out[o], os);
        const std::vector<double> abs = AbsDots(w, x, nx, xs);
        for (int r = 0; r < nx; ++r) {
          for (int64_t o = 0; o < rows; ++o) {
            EXPECT_NEAR(out[r * os + o], ref[r * os + o], 1e-5 * abs[r * rows + o] + 1e-6)
                << DTypeName(t) << " in " << in << " nx " << nx << " row " << r << " out " << o;
          }
        }
      }
    }
  }
}

// The int16 kernels are judged on the activations they see (xq * scale), so the only tolerated
// error is f32 rounding; the activation rounding itself is QuantizeRowI16's (tested with Linear).
TEST_P(IsaLevelTest, Int16ActivationKernelsMatchTheReferenceOnTheQuantisedActivations) {
  std::mt19937 rng(2213);
  int kernels = 0;
  for (DType t : kFusedTypes) {
    const QuantDotI16Fn dot = FusedQuantDotI16(t, isa());
    if (dot == nullptr) continue;
    ++kernels;
    for (int64_t in : Lengths(t)) {
      const int64_t rows = 5;
      const Weight w = MakeWeight(rng, t, rows, in);
      const std::vector<float> x = RandomFloats(rng, in, -3.0f, 3.0f);
      std::vector<int16_t> xq(in);
      float scale = 0.0f;
      QuantizeRowI16(x.data(), in, xq.data(), &scale);
      std::vector<float> xd(in);
      for (int64_t i = 0; i < in; ++i) xd[i] = scale * xq[i];
      std::vector<float> ref(rows, NAN);
      reference::Linear(Strided(ref, 1, rows, rows), Strided(xd, 1, in, in), w.lw);
      const std::vector<double> abs = AbsDots(w, xd, 1, in);
      const int64_t row_bytes = DTypeBytes(t, in);
      for (int64_t o = 0; o < rows; ++o) {
        const double got =
            static_cast<double>(scale) * dot(w.bytes.data() + o * row_bytes, xq.data(), in);
        EXPECT_NEAR(got, ref[o], 1e-5 * abs[o] + 1e-6)
            << DTypeName(t) << " in " << in << " row " << o;
      }
    }
  }
  EXPECT_GE(kernels, 3) << "every level has int16 kernels for Q8_0, Q5_0 and Q4_1";
}

// The multi-row kernels against the same reference, every row count 1..kQuantDotI16Rows, strided
// activation, scale and output rows, lengths with a short last scale group, and activations whose
// magnitude differs by group (so a wrong group's scale shows): each row's result is judged on its
// own quantised activations.
TEST_P(IsaLevelTest, MultiRowInt16KernelsMatchTheReferenceForEveryRowCount) {
  std::mt19937 rng(2215);
  int kernels = 0;
  for (DType t : kFusedTypes) {
    const QuantDotI16RowsFn dot = FusedQuantDotI16Rows(t, isa());
    if (dot == nullptr) continue;
    ++kernels;
    for (int64_t in : Lengths(t)) {
      const int64_t rows = 3, os = rows + 3;
      const int64_t groups = (in + kI16ScaleGroup - 1) / kI16ScaleGroup, nb = in / 32;
      const int64_t xs = in + 32, ss = groups + 1, bs = nb + 2;  // strides with padding
      const Weight w = MakeWeight(rng, t, rows, in);
      for (int nx = 1; nx <= kQuantDotI16Rows; ++nx) {
        // int16 [nx, xs] activations, their f32 [nx, ss] group scales, f32 [nx, bs] block sums,
        // and f32 [nx, in] the values they stand for.
        std::vector<int16_t> xq(nx * xs, 0);
        std::vector<float> scale(nx * ss, NAN), bsum(nx * bs, NAN), xd(nx * in);
        for (int r = 0; r < nx; ++r) {
          std::vector<float> x = RandomFloats(rng, in, -3.0f, 3.0f);
          for (int64_t i = 0; i < in; ++i) x[i] *= (i / kI16ScaleGroup) % 3 == 1 ? 40.0f : 1.0f;
          QuantizeRowI16Groups(x.data(), in, &xq[r * xs], &scale[r * ss], &bsum[r * bs]);
          for (int64_t i = 0; i < in; ++i) {
            xd[r * in + i] = scale[r * ss + i / kI16ScaleGroup] * xq[r * xs + i];
          }
        }
        std::vector<float> ref(nx * rows, NAN), out(nx * os, NAN);
        reference::Linear(Strided(ref, nx, rows, rows), Strided(xd, nx, in, in), w.lw);
        const std::vector<double> abs = AbsDots(w, xd, nx, in);
        const int64_t row_bytes = DTypeBytes(t, in);
        const I16Rows rows_in{xq.data(), xs, scale.data(), ss, bsum.data(), bs};
        for (int64_t o = 0; o < rows; ++o) {
          dot(w.bytes.data() + o * row_bytes, rows_in, nx, in, &out[o], os);
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
  // Q8_0, Q5_0, Q4_K, Q6_K on the AVX-512 levels; none on AVX2.
  EXPECT_EQ(kernels, isa() == CpuIsa::kAvx2 ? 0 : 4);
}

// The largest |q * scale| and |xq| everywhere: the int32 sums of a block or super-block are at
// their bound (cpu_quant_dot_i16_avx512_kernels.h) and must not wrap.
TEST_P(IsaLevelTest, Int16KernelsDoNotOverflowAtExtremeWeightsAndActivations) {
  const int64_t in = 512;
  struct Extreme {
    DType type;
    std::vector<uint8_t> block;
  };
  // Q4_K: d = 1/64 (0x2400), dmin = 0, every 6-bit scale and min 63 (all scale bytes 0xFF), every
  // nibble 15. Q6_K: ql = qh = 0 (q = -32), scales -128, d = 1/64. Q8_0: d = 1/64, q = -128.
  std::vector<uint8_t> q4k(144, 0xFF), q6k(210, 0x00), q80(34, 0x80);
  q4k[0] = 0x00, q4k[1] = 0x24, q4k[2] = 0x00, q4k[3] = 0x00;
  for (int i = 192; i < 208; ++i) q6k[i] = 0x80;
  q6k[208] = 0x00, q6k[209] = 0x24;
  q80[0] = 0x00, q80[1] = 0x24;
  for (const Extreme& e :
       {Extreme{DType::kQ4_K, q4k}, Extreme{DType::kQ6_K, q6k}, Extreme{DType::kQ8_0, q80}}) {
    const QuantDotI16Fn dot = FusedQuantDotI16(e.type, isa());
    if (dot == nullptr) continue;
    const int64_t blocks = in / (e.block.size() == 34 ? 32 : 256);
    std::vector<uint8_t> w;
    for (int64_t b = 0; b < blocks; ++b) w.insert(w.end(), e.block.begin(), e.block.end());
    std::vector<float> deq(in);
    ASSERT_TRUE(Dequantize(e.type, w.data(), deq.data(), in).ok());
    const std::vector<int16_t> xq(in, -32767);
    double expected = 0.0;
    for (int64_t i = 0; i < in; ++i) expected += static_cast<double>(deq[i]) * -32767.0;
    ASSERT_NE(expected, 0.0);
    EXPECT_NEAR(dot(w.data(), xq.data(), in), expected, 1e-6 * std::fabs(expected))
        << DTypeName(e.type);
    if (const QuantDotI16RowsFn rows = FusedQuantDotI16Rows(e.type, isa())) {
      // Two rows of the same extreme activations, every group scale 1 (block sums are the min
      // terms' inputs).
      const std::vector<int16_t> xq2(2 * in, -32767);
      const std::vector<float> bsum(2 * in / 32, -32767.0f * 32), scale(2 * in / 128, 1.0f);
      std::vector<float> out(2, NAN);
      const I16Rows x{xq2.data(), in, scale.data(), in / 128, bsum.data(), in / 32};
      rows(w.data(), x, 2, in, out.data(), 1);
      for (float got : out) {
        EXPECT_NEAR(got, expected, 1e-6 * std::fabs(expected)) << DTypeName(e.type) << " rows";
      }
    }
  }
}

// Linear through a context forced to the level: fused parts of several types, decode and short
// chunks, int16 activations on and off, 2 threads.
TEST_P(IsaLevelTest, LinearOnAContextAtTheLevelMatchesTheReference) {
  std::unique_ptr<DeviceContext> ctx = DeviceContext::Cpu(2, isa());
  ASSERT_EQ(ctx->cpu_isa(), isa());
  std::mt19937 rng(2214);
  const DType types[] = {DType::kQ8_0, DType::kQ4_K, DType::kQ6_K, DType::kQ5_0, DType::kQ4_1};
  const int64_t part_rows[] = {13, 7, 21, 3, 9};
  const int64_t in = 768;
  for (bool int16 : {false, true}) {
    for (int64_t t : {1, 2, 5, 9, 64, 67}) {
      std::vector<std::vector<uint8_t>> storage;
      LinearWeight w;
      w.in_features = in;
      w.int16_decode_activations = int16;
      for (int p = 0; p < 5; ++p) {
        storage.push_back(RandomWeights(rng, types[p], part_rows[p], in));
        w.parts.push_back(
            TensorView::Contiguous(storage.back().data(), types[p], {part_rows[p], in}));
        w.out_features += part_rows[p];
      }
      const int64_t xs = in + 3, os = w.out_features + 5;
      std::vector<float> x = RandomFloats(rng, t * xs);
      std::vector<float> out(t * os, 0.0f), ref(t * os, 0.0f);
      Linear(*ctx, Strided(out, t, w.out_features, os), Strided(x, t, in, xs), w);
      reference::Linear(Strided(ref, t, w.out_features, os), Strided(x, t, in, xs), w);
      // int16 activations round each x to max|x| / 65534: ~1e-5 of the output scale per output;
      // the max over the 64-row cases' ~3,400 outputs reaches ~1e-4.
      EXPECT_LT(MaxErrorOverRms(out, ref), int16 ? (t == 1 ? 1e-4 : 2e-4) : 2e-5)
          << "T " << t << " int16 " << int16;
    }
  }
}

// Q8_0 and Q5_0 parts (multi-row int16 kernels on the AVX-512 levels) next to a Q4_1 part (f32
// activations within the same LinearInt16Rows call) at odd row counts; AVX2 takes the old paths.
TEST_P(IsaLevelTest, BatchedInt16LinearMatchesTheReference) {
  std::unique_ptr<DeviceContext> ctx = DeviceContext::Cpu(2, isa());
  std::mt19937 rng(2216);
  const DType types[] = {DType::kQ8_0, DType::kQ5_0, DType::kQ4_1};
  const int64_t part_rows[] = {11, 6, 23}, in = 640;
  for (int64_t t : {2, 3, 6, 16, 33}) {
    std::vector<std::vector<uint8_t>> storage;
    LinearWeight w;
    w.in_features = in;
    for (int p = 0; p < 3; ++p) {
      storage.push_back(RandomWeights(rng, types[p], part_rows[p], in));
      w.parts.push_back(
          TensorView::Contiguous(storage.back().data(), types[p], {part_rows[p], in}));
      w.out_features += part_rows[p];
    }
    const int64_t xs = in + 1, os = w.out_features + 2;
    std::vector<float> x = RandomFloats(rng, t * xs);
    std::vector<float> out(t * os, 0.0f), ref(t * os, 0.0f);
    Linear(*ctx, Strided(out, t, w.out_features, os), Strided(x, t, in, xs), w);
    reference::Linear(Strided(ref, t, w.out_features, os), Strided(x, t, in, xs), w);
    EXPECT_LT(MaxErrorOverRms(out, ref), 2e-4) << "T " << t;
  }
}

// Each level above AVX2 runs kernels of its own for the decode types of the default models (a
// dispatcher that silently fell back would pass the accuracy tests above).
TEST_P(IsaLevelTest, TheLevelRunsItsOwnKernelsForTheDecodeTypes) {
  const std::string_view f32_level = isa() == CpuIsa::kAvx2 ? "avx2" : "avx512";
  const std::string_view i16_level = isa() == CpuIsa::kAvx2     ? "avx2"
                                     : isa() == CpuIsa::kAvx512 ? "avx512"
                                                                : "avx512-vnni";
  for (DType t : {DType::kQ8_0, DType::kQ4_1, DType::kQ4_K, DType::kQ6_K, DType::kF16}) {
    EXPECT_EQ(FusedQuantDotLevel(t, isa()), f32_level) << DTypeName(t);
  }
  for (DType t : {DType::kQ8_0, DType::kQ5_0, DType::kQ4_1}) {
    EXPECT_EQ(FusedQuantDotI16Level(t, isa()), i16_level) << DTypeName(t);
  }
  for (DType t : {DType::kQ8_0, DType::kQ5_0, DType::kQ4_K, DType::kQ6_K}) {
    EXPECT_EQ(FusedQuantDotI16RowsLevel(t, isa()), isa() == CpuIsa::kAvx2 ? "" : i16_level)
        << DTypeName(t);
  }
  EXPECT_EQ(FusedQuantDotI16RowsLevel(DType::kQ4_1, isa()), "");
  // AVX2 has no int16 K-quant kernels (those types keep f32 activations there).
  for (DType t : {DType::kQ4_K, DType::kQ6_K}) {
    EXPECT_EQ(FusedQuantDotI16Level(t, isa()), isa() == CpuIsa::kAvx2 ? "" : i16_level)
        << DTypeName(t);
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, IsaLevelTest,
                         ::testing::Values(CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Vnni,
                                           CpuIsa::kAvx512Bf16, CpuIsa::kAmxBf16),
                         [](const ::testing::TestParamInfo<CpuIsa>& p) {
                           std::string name(CpuIsaName(p.param));
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

}  // namespace
}  // namespace uniprefill::ops::cpu
