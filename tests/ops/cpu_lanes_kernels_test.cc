// The lanes kernels (cpu_quant_lanes_i16.h) at every CPU ISA level this machine has: against the
// scalar reference (reference::Linear) on the activations they see, every lane count 1..16 and
// weight-row counts that leave every remainder of the kernels' 4-row passes; the int32 block sums
// at their extreme; Q8_0 with its load-time block sums (AttachBlockQuantSums) equal to without,
// bit for bit; Linear through a context on step sizes that take them; and the level check.
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
#include "ops/cpu/cpu_quant_dot_i16.h"
#include "ops/cpu/cpu_quant_lanes_i16.h"
#include "ops/ops.h"
#include "ops/reference.h"
#include "ops_test_util.h"

namespace uniprefill::ops::cpu {
namespace {

using testing::MaxErrorOverRms;
using testing::RandomFloats;
using testing::RandomWeights;

TensorView Strided(std::vector<float>& v, int64_t rows, int64_t cols, int64_t stride) {
  TensorView t = TensorView::Contiguous(v.data(), DType::kF32, {rows, cols});
  t.stride[0] = stride;
  return t;
}

LinearWeight OnePart(std::vector<uint8_t>& bytes, DType t, int64_t rows, int64_t in) {
  LinearWeight lw;
  lw.in_features = in;
  lw.out_features = rows;
  lw.parts.push_back(TensorView::Contiguous(bytes.data(), t, {rows, in}));
  return lw;
}

// Rows quantised as the batched Linear quantises them, and the f32 values they stand for.
struct QuantRows {
  int64_t xs, ss, bs;  // strides, padded so a wrong stride shows
  std::vector<int16_t> xq;
  std::vector<float> scale, bsum, xd;
  I16Rows View() const { return {xq.data(), xs, scale.data(), ss, bsum.data(), bs}; }
};

QuantRows MakeRows(std::mt19937& rng, int nx, int64_t in) {
  const int64_t groups = (in + kI16ScaleGroup - 1) / kI16ScaleGroup;
  QuantRows q{in + 32, groups + 1, in / 32 + 2, {}, {}, {}, {}};
  q.xq.assign(nx * q.xs, 0);
  q.scale.assign(nx * q.ss, NAN);
  q.bsum.assign(nx * q.bs, NAN);
  q.xd.resize(nx * in);
  for (int r = 0; r < nx; ++r) {
    std::vector<float> x = RandomFloats(rng, in, -3.0f, 3.0f);
    // Magnitudes differing by group and row: a wrong group's or lane's scale shows.
    for (int64_t i = 0; i < in; ++i) x[i] *= ((i / kI16ScaleGroup + r) % 3 == 1) ? 40.0f : 1.0f;
    QuantizeRowI16Groups(x.data(), in, &q.xq[r * q.xs], &q.scale[r * q.ss], &q.bsum[r * q.bs]);
    for (int64_t i = 0; i < in; ++i) {
      q.xd[r * in + i] = q.scale[r * q.ss + i / kI16ScaleGroup] * q.xq[r * q.xs + i];
    }
  }
  return q;
}

class LanesLevelTest : public ::testing::TestWithParam<CpuIsa> {
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

// Lengths with one block, a short last scale group (1184 = 4 * 256 + 160) and Gemma 3's 640.
TEST_P(LanesLevelTest, LanesKernelsMatchTheReferenceForEveryLaneAndRowCount) {
  std::mt19937 rng(2219);
  int kernels = 0;
  for (DType t : {DType::kQ8_0, DType::kQ5_0}) {
    const QuantDotI16LanesFn lanes = FusedQuantDotI16Lanes(t, isa());
    if (lanes == nullptr) continue;
    ++kernels;
    for (int64_t in : {32, 640, 1184}) {
      const int64_t rows = 9, row_bytes = DTypeBytes(t, in);
      std::vector<uint8_t> bytes = RandomWeights(rng, t, rows, in);
      const LinearWeight lw = OnePart(bytes, t, rows, in);
      const std::vector<int16_t> sums =
          t == DType::kQ8_0 ? BlockQuantSums(bytes.data(), rows, in) : std::vector<int16_t>{};
      for (int nx = 1; nx <= kI16Lanes; ++nx) {
        const QuantRows q = MakeRows(rng, nx, in);
        I16LanesBuffer buf;
        TransposeRowsI16(q.View(), nx, in, &buf, I16LanesLayoutOf(t));  // only what it reads
        std::vector<float> xd = q.xd;
        std::vector<float> ref(nx * rows, NAN);
        reference::Linear(Strided(ref, nx, rows, rows), Strided(xd, nx, in, in), lw);
        for (int nw = 1; nw <= rows; ++nw) {
          const int64_t os = rows + 5;
          std::vector<float> out(nx * os, NAN);
          lanes(bytes.data(), row_bytes, nullptr, nw, buf.View(), nx, in, out.data(), os);
          if (!sums.empty()) {  // the load-time sums: the same bits
            std::vector<float> with_sums(nx * os, NAN);
            lanes(bytes.data(), row_bytes, sums.data(), nw, buf.View(), nx, in, with_sums.data(),
                  os);
            for (size_t i = 0; i < out.size(); ++i) {
              ASSERT_TRUE(std::memcmp(&out[i], &with_sums[i], 4) == 0)
                  << "with block sums, element " << i << " nx " << nx << " nw " << nw;
            }
          }
          for (int r = 0; r < nx; ++r) {
            for (int64_t o = 0; o < rows; ++o) {
              const float got = out[r * os + o];
              if (o >= nw) {
                EXPECT_TRUE(std::isnan(got)) << "wrote past nw " << nw << " at " << o;
                continue;
              }
              double abs = 0.0;  // the scale of the dot's f32 rounding
              std::vector<float> deq(in);
              ASSERT_TRUE(Dequantize(t, bytes.data() + o * row_bytes, deq.data(), in).ok());
              for (int64_t i = 0; i < in; ++i) abs += std::fabs(deq[i] * xd[r * in + i]);
              EXPECT_NEAR(got, ref[r * rows + o], 1e-5 * abs + 1e-6)
                  << DTypeName(t) << " in " << in << " nx " << nx << " nw " << nw << " row " << r
                  << " out " << o;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(kernels, isa() >= CpuIsa::kAvx512Vnni ? 2 : 0);
}

// Q8_0 at d = 1/64, q = -128 against activations -32767 in every lane: each block's int32 sum is
// at its bound (32 * 128 * 32767) and must not wrap.
TEST_P(LanesLevelTest, LanesKernelsDoNotOverflowAtExtremeWeightsAndActivations) {
  const QuantDotI16LanesFn lanes = FusedQuantDotI16Lanes(DType::kQ8_0, isa());
  if (lanes == nullptr) GTEST_SKIP() << "no lanes kernel at this level";
  const int64_t in = 512;
  std::vector<uint8_t> block(34, 0x80), w;
  block[0] = 0x00, block[1] = 0x24;
  for (int64_t b = 0; b < in / 32; ++b) w.insert(w.end(), block.begin(), block.end());
  std::vector<int16_t> xq(kI16Lanes * in, -32767);
  std::vector<float> scale(kI16Lanes * 2, 1.0f), bsum(kI16Lanes * in / 32, 0.0f);
  const I16Rows rows{xq.data(), in, scale.data(), 2, bsum.data(), in / 32};
  I16LanesBuffer buf;
  TransposeRowsI16(rows, kI16Lanes, in, &buf, I16LanesLayoutOf(DType::kQ8_0));
  const std::vector<int16_t> sums = BlockQuantSums(w.data(), 1, in);
  for (const int16_t* block_sums : {static_cast<const int16_t*>(nullptr), sums.data()}) {
    std::vector<float> out(kI16Lanes, NAN);
    lanes(w.data(), DTypeBytes(DType::kQ8_0, in), block_sums, 1, buf.View(), kI16Lanes, in,
          out.data(), 1);
    const double expected = in * (-128.0 / 64.0) * -32767.0;
    for (float got : out) EXPECT_NEAR(got, expected, 1e-6 * expected);
  }
}

// The load-time sums of Q8_0 blocks: each block's 32 quants, at both extremes and at random.
TEST(BlockQuantSumsTest, SumEachBlocksQuants) {
  std::vector<uint8_t> w(3 * 34, 0);
  for (int i = 0; i < 32; ++i) {
    w[2 + i] = 0x80;            // -128: the sum -4096
    w[34 + 2 + i] = 0x7f;       // 127: 4064
    w[68 + 2 + i] = static_cast<uint8_t>(i * 37);
  }
  int third = 0;
  for (int i = 0; i < 32; ++i) third += static_cast<int8_t>(static_cast<uint8_t>(i * 37));
  EXPECT_EQ(BlockQuantSums(w.data(), 1, 96), (std::vector<int16_t>{-4096, 4064,
                                                                     static_cast<int16_t>(third)}));
  EXPECT_EQ(BlockQuantSums(w.data(), 3, 32), (std::vector<int16_t>{-4096, 4064,
                                                                     static_cast<int16_t>(third)}));
}

// A Q8_0 and a Q5_0 part (lanes kernels at VNNI) next to a Q4_1 part (f32 activations) at step
// sizes with whole and partial groups of 16 rows and a tail below 9 rows (the 8-row kernels).
TEST_P(LanesLevelTest, BatchedLinearWithLanesMatchesTheReference) {
  std::unique_ptr<DeviceContext> ctx = DeviceContext::Cpu(2, isa());
  std::mt19937 rng(2220);
  const DType types[] = {DType::kQ8_0, DType::kQ5_0, DType::kQ4_1};
  const int64_t part_rows[] = {37, 6, 23}, in = 640;
  for (int64_t t : {9, 15, 16, 17, 40, 64, 70}) {
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
    // With the Q8_0 part's load-time block sums (VNNI levels): the same bits.
    AttachBlockQuantSums(w, isa());
    EXPECT_EQ(!w.block_quant_sums.empty(), isa() >= CpuIsa::kAvx512Vnni);
    std::vector<float> with_sums(t * os, 0.0f);
    Linear(*ctx, Strided(with_sums, t, w.out_features, os), Strided(x, t, in, xs), w);
    EXPECT_EQ(0, std::memcmp(out.data(), with_sums.data(), out.size() * 4)) << "T " << t;
  }
}

TEST_P(LanesLevelTest, VnniLevelsRunLanesKernelsForQ8_0AndQ5_0) {
  const std::string_view level = isa() >= CpuIsa::kAvx512Vnni ? "avx512-vnni" : "";
  for (DType t : {DType::kQ8_0, DType::kQ5_0}) {
    EXPECT_EQ(FusedQuantDotI16LanesLevel(t, isa()), level) << DTypeName(t);
  }
  for (DType t : {DType::kQ4_K, DType::kQ6_K, DType::kQ4_1}) {
    EXPECT_EQ(FusedQuantDotI16LanesLevel(t, isa()), "") << DTypeName(t);
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, LanesLevelTest,
                         ::testing::Values(CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Vnni,
                                           CpuIsa::kAvx512Bf16, CpuIsa::kAmxBf16),
                         [](const ::testing::TestParamInfo<CpuIsa>& p) {
                           std::string name(CpuIsaName(p.param));
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

}  // namespace
}  // namespace uniprefill::ops::cpu
