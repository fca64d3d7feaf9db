// Every CPU ISA level this machine has, forced in turn: its decode kernels (f32 and int16
// activations) and Linear through a context at that level, against the scalar reference
// (ops/reference.h) on random weights and activations with odd sizes and strides. A level the CPU
// lacks skips, naming the missing features.
#include <gtest/gtest.h>

#include <cmath>
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
    for (int64_t t : {1, 2, 9}) {
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
      // int16 activations round each x to max|x| / 65534: ~1e-5 of the output scale.
      EXPECT_LT(MaxErrorOverRms(out, ref), int16 ? 1e-4 : 2e-5) << "T " << t << " int16 " << int16;
    }
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
  // AVX2 has no int16 K-quant kernels (those types keep f32 activations there).
  for (DType t : {DType::kQ4_K, DType::kQ6_K}) {
    EXPECT_EQ(FusedQuantDotI16Level(t, isa()), isa() == CpuIsa::kAvx2 ? "" : i16_level)
        << DTypeName(t);
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, IsaLevelTest,
                         ::testing::Values(CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Vnni,
                                           CpuIsa::kAvx512Bf16),
                         [](const ::testing::TestParamInfo<CpuIsa>& p) {
                           std::string name(CpuIsaName(p.param));
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

}  // namespace
}  // namespace uniprefill::ops::cpu
