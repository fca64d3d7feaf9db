// The bf16 prefill GEMM on AMX tiles (ops/cpu/cpu_linear_bf16.h, cpu_gemm_bf16_amx.h): the bf16
// rounding and the panel layout against their definitions, and Linear with
// LinearWeight::bf16_prefill_gemm at the levels this machine has, forced in turn, against a
// scalar reference on the bf16-rounded operands. Below the amx-bf16 level the flag must leave
// Linear on the int16 rows (judged against the f32 reference).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_isa.h"
#include "core/device_context.h"
#include "io/dequant.h"
#include "ops/cpu/cpu_dequant_bf16_amx.h"
#include "ops/cpu/cpu_gemm_bf16_amx.h"
#include "ops/cpu/cpu_linear_bf16.h"
#include "ops/ops.h"
#include "ops/reference.h"
#include "ops_test_util.h"

namespace uniprefill::ops::cpu {
namespace {

using testing::MaxErrorOverRms;
using testing::RandomFloats;
using testing::RandomWeights;

// The definition: f32 -> bf16 rounding to nearest, ties to even (finite inputs).
uint16_t Bf16Rne(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float RoundBf16(float f) { return Bf16ToFloat(Bf16Rne(f)); }

TensorView Strided(std::vector<float>& v, int64_t rows, int64_t cols, int64_t stride) {
  TensorView t = TensorView::Contiguous(v.data(), DType::kF32, {rows, cols});
  t.stride[0] = stride;
  return t;
}

// The conversion, packing and decoders of the *_amx.cc files use no tile instruction: AVX-512 BF16
// runs them (and so they are also checked on CPUs, or VMs, that do not expose AMX).
bool HasAvx512Bf16() {
  return MissingCpuFeatures(CpuIsa::kAvx512Bf16, DetectCpuFeatures()).empty();
}

TEST(AmxBf16Pieces, ConvertRowsRoundsToNearestEven) {
  if (!HasAvx512Bf16()) GTEST_SKIP() << "this CPU lacks the avx512-bf16 level";
  std::mt19937 rng(71);
  const int64_t rows = 3, in = 96, xs = 101;
  std::vector<float> x = RandomFloats(rng, rows * xs);
  // Exact ties: 1 + 2^-8 (to 1, the even neighbour) and 1 + 3 * 2^-8 (to 1 + 2^-6, even).
  x[0] = 1.0f + std::ldexp(1.0f, -8);
  x[1] = 1.0f + 3.0f * std::ldexp(1.0f, -8);
  x[2] = -x[1];
  x[3] = 0.0f;
  x[4] = std::numeric_limits<float>::denorm_min();
  x[5] = 65504.0f * 1e30f;  // large finite
  std::vector<uint16_t> got(rows * in);
  amx::ConvertRowsBf16(x.data(), xs, rows, in, got.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < in; ++k) {
      ASSERT_EQ(got[r * in + k], Bf16Rne(x[r * xs + k])) << "row " << r << " k " << k;
    }
  }
}

TEST(AmxBf16Pieces, PackedPanelHoldsEachColumnsPairsWhereTheTilesReadThem) {
  if (!HasAvx512Bf16()) GTEST_SKIP() << "this CPU lacks the avx512-bf16 level";
  std::mt19937 rng(72);
  const int64_t in = 96;
  const int cols = 21;  // a partial panel: columns 21..31 must be zero
  std::vector<float> w = RandomFloats(rng, cols * in);
  std::vector<uint16_t> panel(amx::PanelElements(in), 0xffff);
  amx::PackPanelBf16(w.data(), cols, in, panel.data());
  for (int64_t s = 0; s < in / 32; ++s) {
    for (int j = 0; j < 2; ++j) {
      for (int kp = 0; kp < 16; ++kp) {
        for (int c = 0; c < 16; ++c) {
          const int col = 16 * j + c;
          const int64_t at = (((s * 2 + j) * 16 + kp) * 16 + c) * 2;
          const uint16_t lo = col < cols ? Bf16Rne(w[col * in + 32 * s + 2 * kp]) : 0;
          const uint16_t hi = col < cols ? Bf16Rne(w[col * in + 32 * s + 2 * kp + 1]) : 0;
          ASSERT_EQ(panel[at], lo) << "s " << s << " col " << col << " kp " << kp;
          ASSERT_EQ(panel[at + 1], hi) << "s " << s << " col " << col << " kp " << kp;
        }
      }
    }
  }
}

// The vector decoders of the few-rows path equal io/dequant.h's scalar ones rounded to bf16, bit
// for bit, on random blocks of every type they cover (whole rows of several blocks).
TEST(AmxBf16Pieces, VectorDequantEqualsTheScalarOneRounded) {
  if (!HasAvx512Bf16()) GTEST_SKIP() << "this CPU lacks the avx512-bf16 level";
  std::mt19937 rng(73);
  const DType types[] = {DType::kQ8_0, DType::kQ5_0, DType::kQ4_K, DType::kQ6_K,
                         DType::kF16,  DType::kBF16, DType::kF32};
  const int64_t rows = 5, in = 768;  // 3 K-quant blocks, 24 of the 32-value ones
  for (DType type : types) {
    ASSERT_TRUE(amx::HasDequantRowBf16(type)) << DTypeName(type);
    const std::vector<uint8_t> bytes = RandomWeights(rng, type, rows, in);
    std::vector<float> f32(in);
    std::vector<uint16_t> got(in);
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = bytes.data() + DTypeBytes(type, r * in);
      ASSERT_TRUE(Dequantize(type, row, f32.data(), in).ok());
      amx::DequantRowBf16(type, row, in, got.data());
      for (int64_t i = 0; i < in; ++i) {
        ASSERT_EQ(got[i], Bf16Rne(f32[i])) << DTypeName(type) << " row " << r << " i " << i;
      }
    }
  }
  EXPECT_FALSE(amx::HasDequantRowBf16(DType::kQ4_1));  // goes through io/dequant.h
}

class Bf16GemmLevelTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  void SetUp() override {
    const std::string missing = MissingCpuFeatures(GetParam(), DetectCpuFeatures());
    if (!missing.empty()) {
      GTEST_SKIP() << "this CPU lacks " << missing << ", needed by level "
                   << CpuIsaName(GetParam());
    }
  }
  CpuIsa isa() const { return GetParam(); }
  bool amx() const { return isa() >= CpuIsa::kAmxBf16; }
};

// Every weight type the loaders dequantise, as parts of odd sizes (panels straddle parts and the
// last one is partial), row counts with every kind of tail (past 16 and 32 rows of a block),
// strided activation and output rows, 2 threads. At amx-bf16: against the double-precision sum
// of the bf16-rounded weights times the bf16-rounded activations, so only the f32 accumulation
// is tolerated; below it (int16 rows): against the f32 reference.
TEST_P(Bf16GemmLevelTest, LinearWithBf16MatchesTheReferenceOnTheRoundedOperands) {
  std::unique_ptr<DeviceContext> ctx = DeviceContext::Cpu(2, isa());
  std::mt19937 rng(2240);
  const DType types[] = {DType::kQ8_0, DType::kQ5_0, DType::kQ4_K, DType::kQ6_K,
                         DType::kQ4_1, DType::kF16,  DType::kBF16, DType::kF32};
  const int64_t part_rows[] = {37, 6, 23, 9, 16, 5, 33, 11}, in = 512;
  std::vector<std::vector<uint8_t>> storage;
  LinearWeight w;
  w.in_features = in;
  w.bf16_prefill_gemm = true;
  for (int p = 0; p < 8; ++p) {
    storage.push_back(RandomWeights(rng, types[p], part_rows[p], in));
    w.parts.push_back(TensorView::Contiguous(storage.back().data(), types[p], {part_rows[p], in}));
    w.out_features += part_rows[p];
  }
  EXPECT_EQ(CanRunLinearBf16(w, isa()), amx());
  std::vector<float> wd(w.out_features * in);  // the weights dequantised, rounded at amx
  for (int64_t o = 0, p = 0, r = 0; o < w.out_features; ++o, ++r) {
    if (r == part_rows[p]) r = 0, ++p;
    const uint8_t* row =
        static_cast<const uint8_t*>(w.parts[p].data) + DTypeBytes(types[p], r * in);
    ASSERT_TRUE(Dequantize(types[p], row, &wd[o * in], in).ok());
    if (amx()) {
      for (int64_t i = 0; i < in; ++i) wd[o * in + i] = RoundBf16(wd[o * in + i]);
    }
  }
  // 2 to 64 rows: the few-rows layout (weights as the first tile operand), one or two token
  // panels, partial ones; above: the prefill panels.
  for (int64_t t : {2, 3, 16, 17, 33, 64, 65, 77, 96, 130, 300}) {
    const int64_t xs = in + 3, os = w.out_features + 2;
    std::vector<float> x = RandomFloats(rng, t * xs);
    std::vector<float> out(t * os, 0.0f), ref(t * os, 0.0f);
    Linear(*ctx, Strided(out, t, w.out_features, os), Strided(x, t, in, xs), w);
    if (amx()) {
      for (int64_t r = 0; r < t; ++r) {
        for (int64_t o = 0; o < w.out_features; ++o) {
          double sum = 0;
          for (int64_t i = 0; i < in; ++i) sum += double(wd[o * in + i]) * RoundBf16(x[r * xs + i]);
          ref[r * os + o] = static_cast<float>(sum);
        }
      }
    } else {
      reference::Linear(Strided(ref, t, w.out_features, os), Strided(x, t, in, xs), w);
    }
    EXPECT_LT(MaxErrorOverRms(out, ref), amx() ? 1e-5 : 2e-4) << "T " << t;
    // The stride padding between output rows is not written.
    for (int64_t r = 0; r < t; ++r) {
      ASSERT_EQ(out[r * os + w.out_features], 0.0f) << "row " << r;
      ASSERT_EQ(out[r * os + w.out_features + 1], 0.0f) << "row " << r;
    }
  }
}

// The int8 tiles of a single Q8_0 weight (cpu_gemm_q8_0_amx.h), 2 to 16 rows, a last group of 5
// weight rows (37 = 2 x 16 + 5), strided rows. At amx-bf16: against the double-precision sum of
// the int8 products per block, each times its two scales, with the activations quantised as
// the kernel's contract says (per token and 32 inputs, scale max|x| / 127, round to nearest
// even; an all-zero block stays zero), and loosely against the f32 reference (the int8
// activations' rounding); below it, the int16 rows against the f32 reference.
TEST_P(Bf16GemmLevelTest, Q8_0FewRowsOnInt8TilesMatchTheBlockSums) {
  std::unique_ptr<DeviceContext> ctx = DeviceContext::Cpu(2, isa());
  std::mt19937 rng(2242);
  const int64_t in = 640;
  for (int64_t cols : {37, 256}) {
    std::vector<uint8_t> bytes = RandomWeights(rng, DType::kQ8_0, cols, in);
    LinearWeight w;
    w.in_features = in;
    w.out_features = cols;
    w.bf16_prefill_gemm = true;
    w.parts.push_back(TensorView::Contiguous(bytes.data(), DType::kQ8_0, {cols, in}));
    for (int64_t t : {2, 3, 16}) {
      const int64_t xs = in + 5, os = cols + 2;
      std::vector<float> x = RandomFloats(rng, t * xs);
      for (int64_t i = 0; i < 32; ++i) x[xs + 64 + i] = 0.0f;  // one all-zero block
      std::vector<float> out(t * os, 0.0f), ref(t * os, 0.0f), exact(t * os, 0.0f);
      Linear(*ctx, Strided(out, t, cols, os), Strided(x, t, in, xs), w);
      reference::Linear(Strided(ref, t, cols, os), Strided(x, t, in, xs), w);
      if (!amx()) {
        EXPECT_LT(MaxErrorOverRms(out, ref), 2e-4) << "cols " << cols << " T " << t;
        continue;
      }
      for (int64_t r = 0; r < t; ++r) {
        for (int64_t o = 0; o < cols; ++o) {
          const uint8_t* row = bytes.data() + DTypeBytes(DType::kQ8_0, o * in);
          double sum = 0;
          for (int64_t b = 0; b < in / 32; ++b) {
            const float* xb = &x[r * xs + 32 * b];
            float amax = 0.0f;
            for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
            if (amax == 0.0f) continue;
            const float inv = 127.0f / amax;
            uint16_t h;
            std::memcpy(&h, row + 34 * b, 2);
            const int8_t* q = reinterpret_cast<const int8_t*>(row + 34 * b + 2);
            int64_t dot = 0;
            for (int i = 0; i < 32; ++i) {
              dot += int64_t(q[i]) * static_cast<int64_t>(std::nearbyint(xb[i] * inv));
            }
            sum += double(HalfToFloat(h)) * double(amax / 127.0f) * double(dot);
          }
          exact[r * os + o] = static_cast<float>(sum);
        }
      }
      EXPECT_LT(MaxErrorOverRms(out, exact), 1e-5) << "cols " << cols << " T " << t;
      EXPECT_LT(MaxErrorOverRms(out, ref), 3e-2) << "cols " << cols << " T " << t;
      for (int64_t r = 0; r < t; ++r) {  // the stride padding is not written
        ASSERT_EQ(out[r * os + cols], 0.0f) << "row " << r;
        ASSERT_EQ(out[r * os + cols + 1], 0.0f) << "row " << r;
      }
    }
  }
}

TEST_P(Bf16GemmLevelTest, InputsNotAMultipleOf32KeepTheOtherPaths) {
  std::mt19937 rng(2241);
  std::vector<uint8_t> bytes = RandomWeights(rng, DType::kF16, 4, 48);
  LinearWeight w;
  w.in_features = 48;
  w.out_features = 4;
  w.bf16_prefill_gemm = true;
  w.parts.push_back(TensorView::Contiguous(bytes.data(), DType::kF16, {4, 48}));
  EXPECT_FALSE(CanRunLinearBf16(w, isa()));
  std::unique_ptr<DeviceContext> ctx = DeviceContext::Cpu(2, isa());
  const int64_t t = 70;
  std::vector<float> x = RandomFloats(rng, t * 48), out(t * 4), ref(t * 4);
  Linear(*ctx, Strided(out, t, 4, 4), Strided(x, t, 48, 48), w);
  reference::Linear(Strided(ref, t, 4, 4), Strided(x, t, 48, 48), w);
  EXPECT_LT(MaxErrorOverRms(out, ref), 2e-4);
}

INSTANTIATE_TEST_SUITE_P(Levels, Bf16GemmLevelTest,
                         ::testing::Values(CpuIsa::kAvx2, CpuIsa::kAvx512Bf16, CpuIsa::kAmxBf16),
                         [](const ::testing::TestParamInfo<CpuIsa>& p) {
                           std::string name(CpuIsaName(p.param));
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

}  // namespace
}  // namespace uniprefill::ops::cpu
