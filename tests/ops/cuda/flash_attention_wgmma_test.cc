// The Hopper attention kernel (ops/cuda/sm90/flash_attention_wgmma.h) against the CPU
// ops::Attention and our flash attention (ops::cuda::FlashAttention) on the same bf16 inputs:
// packed batches of odd lengths (1, around the 128-row tiles, thousands), GQA ratios 1 / 4 / 8,
// both schedules and stage counts, q / k / v as column slices of one fused buffer whose spare
// columns are NaN, a strided output whose spare columns and the rows between sequences must stay
// NaN-poisoned (unwritten), true lengths below the capacities that sized the grid (a sync-free
// batch), gapped ascending positions (the kept tokens after a drop: the kernel masks by row
// index, which equals causal by position for them), chunks over a cached prefix (queries are the
// last rows of their keys, any prefix length), and split-KV (each query tile's keys in several
// CTAs, merged by MergeAttentionPieces; splits beyond a tile's keys). Skipped off compute
// capability 9.0.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "ops/cuda/cuda_attention.h"
#include "ops/cuda/cuda_attention_merge.h"
#include "ops/cuda/sm90/flash_attention_wgmma.h"
#include "ops/ops.h"
#include "testing/cuda_test_util.h"

namespace uniprefill::ops::cuda {
namespace {

using ::uniprefill::testing::Bf16BitsToF32;
using ::uniprefill::testing::F32ToBf16Bits;
using ::uniprefill::testing::RandomBf16Values;
using ::uniprefill::testing::RelativeL2Error;

constexpr int kD = 128;
// Normalised error against the f32 CPU reference (P and the output rounded to bf16: ~3e-3, as
// flash_attention_test.cc); a wrong mask, tile or fragment index gives O(1).
constexpr double kCpuTolerance = 1e-2;
// Against our flash attention, which rounds the same way in a different order: measured ~1e-3.
constexpr double kFlashTolerance = 5e-3;

#define UP_WGMMA_OR_SKIP(ctx)                                                            \
  do {                                                                                   \
    const cudaDeviceProp& props_ = (ctx).cuda().properties();                            \
    if (!WgmmaAttentionAvailable(props_.major, props_.minor)) {                          \
      GTEST_SKIP() << "the wgmma kernel needs compute capability 9.0 (this GPU is "      \
                   << props_.major << "." << props_.minor << ")";                        \
    }                                                                                    \
  } while (0)

struct Case {
  int hq = 8, hkv = 2;
  std::vector<int> lengths;   // true lengths (query rows)
  std::vector<int> prefixes;  // keys before each sequence's queries (empty: none)
  int spare_rows = 0;         // capacity - length of every sequence (rows left unwritten)
  int gap_rows = 0;           // rows between consecutive sequences' capacities
  int max_position_gap = 1;   // > 1: gapped ascending positions (after a drop)
  float q_range = 1.0f;
  WgmmaAttentionSchedule schedule = WgmmaAttentionSchedule::kIntraOverlap;
  int stages = 3;
  int splits = 1;  // > 1: split-KV, then MergeAttentionPieces per sequence
};

std::string Describe(const Case& c) {
  std::string s = "Hq " + std::to_string(c.hq) + " Hkv " + std::to_string(c.hkv) + " lengths";
  for (int l : c.lengths) s += " " + std::to_string(l);
  if (!c.prefixes.empty()) s += " prefixes";
  for (int l : c.prefixes) s += " " + std::to_string(l);
  s += " spare " + std::to_string(c.spare_rows) + " gap " + std::to_string(c.gap_rows) +
       " position gap " + std::to_string(c.max_position_gap) + " schedule " +
       (c.schedule == WgmmaAttentionSchedule::kSerial ? "serial" : "overlap") + " stages " +
       std::to_string(c.stages) + " splits " + std::to_string(c.splits);
  return s;
}

// Runs the case on random inputs, checks every sequence against the CPU and flash attention, the
// untouched rows and columns, and returns the outputs' bits for repeat comparisons.
std::vector<uint16_t> RunAndCheck(DeviceContext& gpu, DeviceContext& cpu, const Case& c,
                                  uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t hq = c.hq, hkv = c.hkv, n_seq = static_cast<int64_t>(c.lengths.size());
  // Sequence b: keys at rows [k_begin, + prefix + len), queries the last len of them.
  std::vector<int32_t> begin, len, cap, k_begin, k_len;
  int64_t rows = c.gap_rows;
  for (int64_t b = 0; b < n_seq; ++b) {
    const int l = c.lengths[b], prefix = c.prefixes.empty() ? 0 : c.prefixes[b];
    k_begin.push_back(static_cast<int32_t>(rows));
    k_len.push_back(prefix + l);
    begin.push_back(static_cast<int32_t>(rows + prefix));
    len.push_back(l);
    cap.push_back(l + c.spare_rows);
    rows += prefix + l + c.spare_rows + c.gap_rows;
  }
  // Fused [rows, ld] with 8 NaN columns past q | k | v; out [rows, hq D + 24].
  const int64_t ld = (hq + 2 * hkv) * kD + 8, o_row = hq * kD + 24;
  std::vector<float> q = RandomBf16Values(rng, rows * hq * kD, -c.q_range, c.q_range);
  std::vector<float> k = RandomBf16Values(rng, rows * hkv * kD);
  std::vector<float> v = RandomBf16Values(rng, rows * hkv * kD);
  std::vector<uint16_t> in(rows * ld, 0xFFFF);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t e = 0; e < hq * kD; ++e) in[t * ld + e] = F32ToBf16Bits(q[t * hq * kD + e]);
    for (int64_t e = 0; e < hkv * kD; ++e) {
      in[t * ld + hq * kD + e] = F32ToBf16Bits(k[t * hkv * kD + e]);
      in[t * ld + (hq + hkv) * kD + e] = F32ToBf16Bits(v[t * hkv * kD + e]);
    }
  }
  // Positions: per sequence ascending from a random start, gaps up to max_position_gap.
  std::vector<int32_t> pos(rows, 0);
  std::uniform_int_distribution<int32_t> gap(1, c.max_position_gap);
  for (int64_t b = 0; b < n_seq; ++b) {
    int32_t p = std::uniform_int_distribution<int32_t>(0, 9)(rng);
    for (int i = 0; i < k_len[b]; ++i, p += gap(rng)) pos[k_begin[b] + i] = p;
  }
  const DeviceBuffer in_dev = DeviceBuffer::FromHost(in);
  DeviceBuffer out_dev(rows * o_row * 2), flash_dev(rows * o_row * 2);
  out_dev.Fill(0xFF);  // bf16 0xFFFF is NaN
  flash_dev.Fill(0xFF);
  const DeviceBuffer begin_dev = DeviceBuffer::FromHost(begin);
  const DeviceBuffer len_dev = DeviceBuffer::FromHost(len);
  const DeviceBuffer k_begin_dev = DeviceBuffer::FromHost(k_begin);
  const DeviceBuffer k_len_dev = DeviceBuffer::FromHost(k_len);
  const DeviceBuffer pos_dev = DeviceBuffer::FromHost(pos);
  UP_CUDA_CHECK(cudaDeviceSynchronize());

  const uint16_t* base = in_dev.as<uint16_t>();
  WgmmaAttentionProblem p;
  p.q = reinterpret_cast<const __nv_bfloat16*>(base);
  p.k = reinterpret_cast<const __nv_bfloat16*>(base + hq * kD);
  p.v = reinterpret_cast<const __nv_bfloat16*>(base + (hq + hkv) * kD);
  p.out = out_dev.as<__nv_bfloat16>();
  p.q_row_stride = p.k_row_stride = p.v_row_stride = ld;
  p.out_row_stride = o_row;
  p.rows = rows;
  p.seq_begin = begin_dev.as<int32_t>();
  p.seq_len = len_dev.as<int32_t>();
  if (!c.prefixes.empty()) {
    p.k_seq_begin = k_begin_dev.as<int32_t>();
    p.k_seq_len = k_len_dev.as<int32_t>();
  }
  p.batch = static_cast<int>(n_seq);
  p.max_seqlen = *std::max_element(cap.begin(), cap.end());  // capacities size the grid
  p.hq = c.hq;
  p.hkv = c.hkv;
  p.head_dim = kD;
  p.scale = 1.0f / std::sqrt(static_cast<float>(kD));
  p.schedule = c.schedule;
  p.stages = c.stages;
  // Split-KV: partial outputs and log-sum-exps NaN-poisoned, so a row a split skipped shows.
  DeviceBuffer partial_dev(c.splits > 1 ? c.splits * rows * hq * kD * 2 : 16);
  DeviceBuffer lse_dev(c.splits > 1 ? c.splits * hq * rows * 4 : 16);
  if (c.splits > 1) {
    partial_dev.Fill(0xFF);
    lse_dev.Fill(0xFF);
    p.splits = c.splits;
    p.partial = partial_dev.as<__nv_bfloat16>();
    p.lse = lse_dev.as<float>();
  }
  EXPECT_TRUE(WgmmaAttentionCovers(p));
  EXPECT_EQ(LaunchFlashAttentionWgmma(p, gpu.cuda().stream()), cudaSuccess);
  for (int64_t b = 0; c.splits > 1 && b < n_seq; ++b) {
    TensorView seq_out = TensorView::Contiguous(out_dev.as<uint16_t>() + begin[b] * o_row,
                                                DType::kBF16, {len[b], hq, kD}, Device::kCuda);
    seq_out.stride[0] = o_row;
    MergeAttentionPieces(gpu, seq_out, partial_dev.as<uint16_t>() + begin[b] * hq * kD, rows,
                         lse_dev.as<float>() + begin[b], rows, c.splits);
  }

  // Flash attention on each sequence's rows, by position.
  AttentionParams params;
  params.scale = p.scale;
  for (int64_t b = 0; b < n_seq; ++b) {
    const std::vector<int32_t> cu_q = {0, len[b]}, cu_k = {0, k_len[b]};
    const DeviceBuffer cu_q_dev = DeviceBuffer::FromHost(cu_q);
    const DeviceBuffer cu_k_dev = DeviceBuffer::FromHost(cu_k);
    UP_CUDA_CHECK(cudaDeviceSynchronize());
    auto view = [&](const DeviceBuffer& buf, int64_t row0, int64_t n, int64_t col, int64_t h,
                    int64_t stride) {
      TensorView t = TensorView::Contiguous(buf.as<uint16_t>() + row0 * stride + col,
                                            DType::kBF16, {n, h, kD}, Device::kCuda);
      t.stride[0] = stride;
      return t;
    };
    VarlenBatch vb{cu_q_dev.as<int32_t>(), cu_k_dev.as<int32_t>(), 1, len[b], k_len[b]};
    FlashAttention(gpu, view(flash_dev, begin[b], len[b], 0, hq, o_row),
                   view(in_dev, begin[b], len[b], 0, hq, ld),
                   view(in_dev, k_begin[b], k_len[b], hq * kD, hkv, ld),
                   view(in_dev, k_begin[b], k_len[b], (hq + hkv) * kD, hkv, ld),
                   pos_dev.as<int32_t>() + begin[b], pos_dev.as<int32_t>() + k_begin[b], vb,
                   params);
    gpu.cuda().Synchronize();
  }
  gpu.cuda().Synchronize();
  const std::vector<uint16_t> out = out_dev.ToHost<uint16_t>(rows * o_row);
  const std::vector<uint16_t> flash = flash_dev.ToHost<uint16_t>(rows * o_row);

  std::vector<bool> in_sequence(rows, false);
  for (int64_t b = 0; b < n_seq; ++b) {
    std::fill(in_sequence.begin() + begin[b], in_sequence.begin() + begin[b] + len[b], true);
    const int64_t n = len[b];
    std::vector<float> ref(n * hq * kD), got(n * hq * kD), fl(n * hq * kD);
    auto host = [](std::vector<float>& x, int64_t row0, int64_t nr, int64_t h) {
      return TensorView::Contiguous(x.data() + row0 * h * kD, DType::kF32, {nr, h, kD});
    };
    ::uniprefill::ops::Attention(cpu, host(ref, 0, n, hq), host(q, begin[b], n, hq),
                                 host(k, k_begin[b], k_len[b], hkv),
                                 host(v, k_begin[b], k_len[b], hkv),
                                 pos.data() + begin[b], pos.data() + k_begin[b], params);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t e = 0; e < hq * kD; ++e) {
        got[t * hq * kD + e] = Bf16BitsToF32(out[(begin[b] + t) * o_row + e]);
        fl[t * hq * kD + e] = Bf16BitsToF32(flash[(begin[b] + t) * o_row + e]);
      }
    }
    EXPECT_LT(RelativeL2Error(got, ref), kCpuTolerance) << "sequence " << b << "; " << Describe(c);
    EXPECT_LT(RelativeL2Error(got, fl), kFlashTolerance) << "sequence " << b << "; " << Describe(c);
  }
  // Rows outside every sequence (spare capacity, gaps) and the spare columns stay NaN.
  int64_t touched = 0;
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t e = in_sequence[t] ? hq * kD : 0; e < o_row; ++e) {
      touched += out[t * o_row + e] != 0xFFFF;
    }
  }
  EXPECT_EQ(touched, 0) << "wrote outside the sequences' rows or past Hq * D; " << Describe(c);
  return out;
}

class WgmmaAttentionTest : public ::testing::Test {
 protected:
  std::unique_ptr<DeviceContext> cpu_ = DeviceContext::Cpu(2);
  uint32_t seed_ = 4000;
};

TEST_F(WgmmaAttentionTest, PackedBatchesMatchCpuAndFlashAcrossGqaSchedulesAndStages) {
  UP_CUDA_TEST_CONTEXT(ctx);
  UP_WGMMA_OR_SKIP(ctx);
  for (auto schedule : {WgmmaAttentionSchedule::kSerial, WgmmaAttentionSchedule::kIntraOverlap}) {
    for (int stages : {2, 3}) {
      for (auto [hq, hkv] : {std::pair{8, 8}, std::pair{8, 2}, std::pair{16, 2}}) {
        Case c;
        c.hq = hq;
        c.hkv = hkv;
        c.lengths = {1, 77, 128, 129, 255, 256, 300, 1000};
        c.schedule = schedule;
        c.stages = stages;
        RunAndCheck(ctx, *cpu_, c, ++seed_);
      }
    }
  }
}

TEST_F(WgmmaAttentionTest, LongSequenceMatches) {
  UP_CUDA_TEST_CONTEXT(ctx);
  UP_WGMMA_OR_SKIP(ctx);
  Case c;
  c.hq = 32;
  c.hkv = 8;
  c.lengths = {2049, 4500};
  RunAndCheck(ctx, *cpu_, c, ++seed_);
}

// A sync-free batch: the grid is sized by capacities, the kernel reads true counts on the
// device; rows past a count and rows between sequences are never written.
TEST_F(WgmmaAttentionTest, TrueCountsBelowCapacitiesAndGapsBetweenSequences) {
  UP_CUDA_TEST_CONTEXT(ctx);
  UP_WGMMA_OR_SKIP(ctx);
  Case c;
  c.lengths = {5, 200, 640, 129};
  c.spare_rows = 150;
  c.gap_rows = 37;
  RunAndCheck(ctx, *cpu_, c, ++seed_);
}

// The kept tokens after a drop: gapped ascending positions, compacted rows.
TEST_F(WgmmaAttentionTest, GappedPositionsEqualCausalByRow) {
  UP_CUDA_TEST_CONTEXT(ctx);
  UP_WGMMA_OR_SKIP(ctx);
  Case c;
  c.lengths = {300, 1100};
  c.max_position_gap = 9;
  RunAndCheck(ctx, *cpu_, c, ++seed_);
}

// Large logits (a peaked softmax): the running max must rescale exactly.
TEST_F(WgmmaAttentionTest, PeakedSoftmaxMatches) {
  UP_CUDA_TEST_CONTEXT(ctx);
  UP_WGMMA_OR_SKIP(ctx);
  Case c;
  c.lengths = {700, 64};
  c.q_range = 8.0f;
  RunAndCheck(ctx, *cpu_, c, ++seed_);
}

// A chunk of a prefill over its cached prefix: prefixes on and off the 128-row tiles, so a CTA's
// first key tile can hold no key for its first rows (their running max stays -inf a tile).
TEST_F(WgmmaAttentionTest, ChunksOverACachedPrefixMatch) {
  UP_CUDA_TEST_CONTEXT(ctx);
  UP_WGMMA_OR_SKIP(ctx);
  for (auto schedule : {WgmmaAttentionSchedule::kSerial, WgmmaAttentionSchedule::kIntraOverlap}) {
    Case c;
    c.hq = 16;
    c.hkv = 4;
    c.lengths = {1, 64, 200, 512, 129};
    c.prefixes = {300, 128, 1, 2000, 0};
    c.gap_rows = 5;
    c.schedule = schedule;
    RunAndCheck(ctx, *cpu_, c, ++seed_);
  }
}

// Split-KV: chunks over prefixes on and off the tiles, splits that divide a tile's keys evenly
// or not, and more splits than a tile has keys (those CTAs write log-sum-exp -inf, weight 0).
TEST_F(WgmmaAttentionTest, SplitKeysMergeToTheWholeAttention) {
  UP_CUDA_TEST_CONTEXT(ctx);
  UP_WGMMA_OR_SKIP(ctx);
  for (int splits : {2, 3, 7, 16}) {
    for (auto schedule :
         {WgmmaAttentionSchedule::kSerial, WgmmaAttentionSchedule::kIntraOverlap}) {
      Case c;
      c.hq = 16;
      c.hkv = 4;
      c.lengths = {1, 64, 200, 385, 129};
      c.prefixes = {300, 128, 1, 3000, 0};
      c.gap_rows = 5;
      c.schedule = schedule;
      c.splits = splits;
      RunAndCheck(ctx, *cpu_, c, ++seed_);
    }
  }
}

TEST_F(WgmmaAttentionTest, RepeatedRunsAreBitIdentical) {
  UP_CUDA_TEST_CONTEXT(ctx);
  UP_WGMMA_OR_SKIP(ctx);
  Case c;
  c.lengths = {333, 1024};
  EXPECT_EQ(RunAndCheck(ctx, *cpu_, c, 77), RunAndCheck(ctx, *cpu_, c, 77));
}

TEST_F(WgmmaAttentionTest, UncoveredProblemsAreRejectedWithoutALaunch) {
  UP_CUDA_TEST_CONTEXT(ctx);
  WgmmaAttentionProblem p;
  EXPECT_FALSE(WgmmaAttentionCovers(p));
  EXPECT_EQ(LaunchFlashAttentionWgmma(p, ctx.cuda().stream()), cudaErrorInvalidValue);
  alignas(16) static int32_t dummy[4] = {0, 0, 0, 0};
  p.q = p.k = p.v = reinterpret_cast<const __nv_bfloat16*>(dummy);
  p.out = reinterpret_cast<__nv_bfloat16*>(dummy);
  p.q_row_stride = p.k_row_stride = p.v_row_stride = p.out_row_stride = 1024;
  p.rows = 1;
  p.seq_begin = p.seq_len = dummy;
  p.batch = p.max_seqlen = 1;
  p.hq = 8;
  p.hkv = 2;
  p.head_dim = 128;
  EXPECT_TRUE(WgmmaAttentionCovers(p));
  p.head_dim = 64;  // only 128
  EXPECT_FALSE(WgmmaAttentionCovers(p));
  p.head_dim = 128;
  p.hkv = 3;  // hq must be a multiple of hkv
  EXPECT_FALSE(WgmmaAttentionCovers(p));
  p.hkv = 2;
  p.stages = 4;
  EXPECT_FALSE(WgmmaAttentionCovers(p));
  p.stages = 3;
  p.q_row_stride = 1020;  // rows 16-byte aligned for the tensor maps
  EXPECT_FALSE(WgmmaAttentionCovers(p));
  p.q_row_stride = 1024;
  p.splits = 2;  // split-KV needs its partial outputs and log-sum-exps
  EXPECT_FALSE(WgmmaAttentionCovers(p));
  p.partial = reinterpret_cast<__nv_bfloat16*>(dummy);
  p.lse = reinterpret_cast<float*>(dummy);
  EXPECT_TRUE(WgmmaAttentionCovers(p));
  p.splits = kMaxAttentionPieces + 1;  // more than one merge takes
  EXPECT_FALSE(WgmmaAttentionCovers(p));
}

}  // namespace
}  // namespace uniprefill::ops::cuda
