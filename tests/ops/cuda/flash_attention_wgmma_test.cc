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
#include <chrono>
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
#include "ops/cuda/cuda_dense_ops.h"
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
  WgmmaTileOrder tile_order = WgmmaTileOrder::kHeadMajor;
  bool skip_unit_rescale = false;
};

constexpr WgmmaAttentionSchedule kSchedules[] = {WgmmaAttentionSchedule::kSerial,
                                                 WgmmaAttentionSchedule::kIntraOverlap,
                                                 WgmmaAttentionSchedule::kIntraOverlapPvBesideExp};

const char* ScheduleName(WgmmaAttentionSchedule s) {
  switch (s) {
    case WgmmaAttentionSchedule::kSerial:
      return "serial";
    case WgmmaAttentionSchedule::kIntraOverlap:
      return "overlap";
    case WgmmaAttentionSchedule::kIntraOverlapPvBesideExp:
      return "pv beside exp";
  }
  return "?";
}

std::string Describe(const Case& c) {
  std::string s = "Hq " + std::to_string(c.hq) + " Hkv " + std::to_string(c.hkv) + " lengths";
  for (int l : c.lengths) s += " " + std::to_string(l);
  if (!c.prefixes.empty()) s += " prefixes";
  for (int l : c.prefixes) s += " " + std::to_string(l);
  s += " spare " + std::to_string(c.spare_rows) + " gap " + std::to_string(c.gap_rows) +
       " position gap " + std::to_string(c.max_position_gap) + " schedule " +
       ScheduleName(c.schedule) + " stages " +
       std::to_string(c.stages) + " splits " + std::to_string(c.splits) + " order " +
       (c.tile_order == WgmmaTileOrder::kHeadMajor ? "head" : "kv group") +
       " skip unit rescale " + (c.skip_unit_rescale ? "yes" : "no");
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
  p.tile_order = c.tile_order;
  p.skip_unit_rescale = c.skip_unit_rescale;
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
  for (auto schedule : kSchedules) {
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
  for (auto schedule : kSchedules) {
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
    for (auto schedule : kSchedules) {
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

// Every launch choice computes the same arithmetic: the tile order only changes when each CTA
// runs, the skipped rescale multiplies by exactly 1, and the schedules order the same operations
// differently in time. So every variant's output equals the default launch's bit for bit (each
// also checked against the CPU op and flash attention), on packed GQA batches with spare rows,
// chunks over prefixes split or not, and a peaked softmax (where the running max moves most).
// Sizes are kept small: each run is also checked against the CPU op.
TEST_F(WgmmaAttentionTest, LaunchChoicesChangeNoBit) {
  UP_CUDA_TEST_CONTEXT(ctx);
  UP_WGMMA_OR_SKIP(ctx);
  Case packed;
  packed.hq = 16;
  packed.hkv = 2;
  packed.lengths = {1, 77, 129, 300, 520};
  packed.spare_rows = 40;
  Case chunks;
  chunks.hq = 8;
  chunks.hkv = 2;
  chunks.lengths = {1, 64, 200, 385, 129};
  chunks.prefixes = {300, 128, 1, 900, 0};
  chunks.gap_rows = 5;
  Case split = chunks;
  split.splits = 3;
  Case peaked;
  peaked.lengths = {700, 64};
  peaked.q_range = 8.0f;
  for (const Case& base : {packed, chunks, split, peaked}) {
    const uint32_t seed = ++seed_;
    const std::vector<uint16_t> want = RunAndCheck(ctx, *cpu_, base, seed);  // the defaults
    for (auto schedule : kSchedules) {
      for (auto order : {WgmmaTileOrder::kHeadMajor, WgmmaTileOrder::kKvGroupLongestFirst}) {
        for (bool skip : {false, true}) {
          Case c = base;
          c.schedule = schedule;
          c.tile_order = order;
          c.skip_unit_rescale = skip;
          if (schedule == base.schedule && order == base.tile_order &&
              skip == base.skip_unit_rescale) {
            continue;  // the defaults: `want`
          }
          EXPECT_EQ(RunAndCheck(ctx, *cpu_, c, seed), want) << Describe(c);
        }
      }
    }
  }
}

// A drop layer's kept queries, gathered before their attention (q_coord / k_coord): each kept
// row's output equals its row of the whole (ungathered) attention bit for bit, for every schedule,
// tile order and rescale choice (a row sees the same key tiles in the same order; tiles wholly
// past its last key, which a gathered CTA may walk first, leave its state as it was). Kept sets:
// every row, one row, random subsets (always the last row), 1-row sequences, GQA 4 and 1, key
// coordinates from a non-zero base, and a row past its last key (kPaddingPosition: sees every
// key, as the last row). Split-KV over gathered queries against the CPU op by coordinates. The
// gathered output's spare rows stay NaN-poisoned.
TEST_F(WgmmaAttentionTest, GatheredQueriesEqualTheirRowsOfTheWholeAttention) {
  UP_CUDA_TEST_CONTEXT(ctx);
  UP_WGMMA_OR_SKIP(ctx);
  constexpr int32_t kPastEveryKey = 0x3fffffff;  // ops/cuda/cuda_uniprefill.h kPaddingPosition
  for (const auto& [hq, hkv] : {std::pair{8, 2}, std::pair{4, 4}}) {
    std::mt19937 rng(++seed_);
    const std::vector<int> lengths = {700, 1, 300, 129, 257};
    const int n_seq = static_cast<int>(lengths.size());
    std::vector<int32_t> begin, len, coord;  // key rows: the whole problem's sequences
    int rows = 0;
    for (int b = 0; b < n_seq; ++b) {
      begin.push_back(rows);
      len.push_back(lengths[b]);
      const int base = 17 * b;  // the keys' alive indices: base, base + 1, ...
      for (int i = 0; i < lengths[b]; ++i) coord.push_back(base + i);
      rows += lengths[b];
    }
    const std::vector<float> q = RandomBf16Values(rng, int64_t{rows} * hq * kD);
    const std::vector<float> k = RandomBf16Values(rng, int64_t{rows} * hkv * kD);
    const std::vector<float> v = RandomBf16Values(rng, int64_t{rows} * hkv * kD);
    // Kept rows per sequence (ascending, the last always): all, one, random halves, and for the
    // last sequence a padding row after its real ones.
    std::vector<int32_t> kept, kept_coord, kept_begin, kept_len;
    for (int b = 0; b < n_seq; ++b) {
      kept_begin.push_back(static_cast<int32_t>(kept.size()));
      for (int i = 0; i < lengths[b]; ++i) {
        const bool last = i + 1 == lengths[b];
        const bool keep = b == 0 ? true : b == 2 ? last : last || (rng() & 1);
        if (!keep) continue;
        kept.push_back(begin[b] + i);
        kept_coord.push_back(coord[begin[b] + i]);
      }
      if (b == n_seq - 1) {
        kept.push_back(begin[b] + lengths[b] - 1);  // sees what the last row sees
        kept_coord.push_back(kPastEveryKey);
      }
      kept_len.push_back(static_cast<int32_t>(kept.size()) - kept_begin.back());
    }
    const int t_out = static_cast<int>(kept.size());
    std::vector<float> q_kept(int64_t{t_out} * hq * kD);
    for (int j = 0; j < t_out; ++j) {
      std::copy_n(q.begin() + int64_t{kept[j]} * hq * kD, hq * kD,
                  q_kept.begin() + int64_t{j} * hq * kD);
    }
    auto bits = [](const std::vector<float>& x) {
      std::vector<uint16_t> b(x.size());
      for (size_t i = 0; i < x.size(); ++i) b[i] = F32ToBf16Bits(x[i]);
      return b;
    };
    const DeviceBuffer q_dev = DeviceBuffer::FromHost(bits(q));
    const DeviceBuffer q_kept_dev = DeviceBuffer::FromHost(bits(q_kept));
    const DeviceBuffer k_dev = DeviceBuffer::FromHost(bits(k));
    const DeviceBuffer v_dev = DeviceBuffer::FromHost(bits(v));
    const DeviceBuffer begin_dev = DeviceBuffer::FromHost(begin);
    const DeviceBuffer len_dev = DeviceBuffer::FromHost(len);
    const DeviceBuffer coord_dev = DeviceBuffer::FromHost(coord);
    const DeviceBuffer kept_begin_dev = DeviceBuffer::FromHost(kept_begin);
    const DeviceBuffer kept_len_dev = DeviceBuffer::FromHost(kept_len);
    const DeviceBuffer kept_coord_dev = DeviceBuffer::FromHost(kept_coord);
    const int spare = 3;  // output rows past the gathered ones, which must stay NaN
    DeviceBuffer whole_dev(int64_t{rows} * hq * kD * 2);
    DeviceBuffer out_dev(int64_t{t_out + spare} * hq * kD * 2);
    UP_CUDA_CHECK(cudaDeviceSynchronize());

    auto problem = [&](bool gathered, WgmmaAttentionSchedule schedule, WgmmaTileOrder order,
                       bool skip) {
      WgmmaAttentionProblem p;
      p.q = (gathered ? q_kept_dev : q_dev).as<__nv_bfloat16>();
      p.k = k_dev.as<__nv_bfloat16>();
      p.v = v_dev.as<__nv_bfloat16>();
      p.out = (gathered ? out_dev : whole_dev).as<__nv_bfloat16>();
      p.q_row_stride = p.out_row_stride = int64_t{hq} * kD;
      p.k_row_stride = p.v_row_stride = int64_t{hkv} * kD;
      p.rows = gathered ? t_out : rows;
      p.k_rows = rows;
      p.seq_begin = (gathered ? kept_begin_dev : begin_dev).as<int32_t>();
      p.seq_len = (gathered ? kept_len_dev : len_dev).as<int32_t>();
      if (gathered) {
        p.k_seq_begin = begin_dev.as<int32_t>();
        p.k_seq_len = len_dev.as<int32_t>();
        p.q_coord = kept_coord_dev.as<int32_t>();
        p.k_coord = coord_dev.as<int32_t>();
      }
      p.batch = n_seq;
      p.max_seqlen = gathered ? *std::max_element(kept_len.begin(), kept_len.end())
                              : *std::max_element(len.begin(), len.end());
      p.hq = hq;
      p.hkv = hkv;
      p.head_dim = kD;
      p.scale = 1.0f / std::sqrt(static_cast<float>(kD));
      p.schedule = schedule;
      p.tile_order = order;
      p.skip_unit_rescale = skip;
      return p;
    };
    // The whole attention, default launch; each kept row's bits from it.
    whole_dev.Fill(0xFF);
    const WgmmaAttentionProblem whole = problem(
        false, WgmmaAttentionSchedule::kIntraOverlapPvBesideExp, WgmmaTileOrder::kHeadMajor, true);
    ASSERT_EQ(LaunchFlashAttentionWgmma(whole, ctx.cuda().stream()), cudaSuccess);
    ctx.cuda().Synchronize();
    const std::vector<uint16_t> whole_out = whole_dev.ToHost<uint16_t>(int64_t{rows} * hq * kD);
    std::vector<uint16_t> want(int64_t{t_out + spare} * hq * kD, 0xFFFF);
    for (int j = 0; j < t_out; ++j) {
      std::copy_n(whole_out.begin() + int64_t{kept[j]} * hq * kD, hq * kD,
                  want.begin() + int64_t{j} * hq * kD);
    }
    for (auto schedule : kSchedules) {
      for (auto order : {WgmmaTileOrder::kHeadMajor, WgmmaTileOrder::kKvGroupLongestFirst}) {
        for (bool skip : {false, true}) {
          out_dev.Fill(0xFF);
          const WgmmaAttentionProblem p = problem(true, schedule, order, skip);
          ASSERT_TRUE(WgmmaAttentionCovers(p));
          ASSERT_EQ(LaunchFlashAttentionWgmma(p, ctx.cuda().stream()), cudaSuccess);
          ctx.cuda().Synchronize();
          EXPECT_EQ(out_dev.ToHost<uint16_t>(want.size()), want)
              << "Hq " << hq << " Hkv " << hkv << " schedule " << ScheduleName(schedule)
              << " order " << static_cast<int>(order) << " skip " << skip;
        }
      }
    }
    // Split-KV over the gathered queries, merged per sequence, against the CPU op by coordinates
    // (the splits cut each CTA's own key tiles, so bits differ from the whole problem's).
    const int splits = 3;
    DeviceBuffer partial_dev(int64_t{splits} * t_out * hq * kD * 2);
    DeviceBuffer lse_dev(int64_t{splits} * hq * t_out * 4);
    out_dev.Fill(0xFF);
    WgmmaAttentionProblem p = problem(true, WgmmaAttentionSchedule::kIntraOverlapPvBesideExp,
                                      WgmmaTileOrder::kKvGroupLongestFirst, true);
    p.splits = splits;
    p.partial = partial_dev.as<__nv_bfloat16>();
    p.lse = lse_dev.as<float>();
    ASSERT_TRUE(WgmmaAttentionCovers(p));
    ASSERT_EQ(LaunchFlashAttentionWgmma(p, ctx.cuda().stream()), cudaSuccess);
    for (int b = 0; b < n_seq; ++b) {
      TensorView seq_out =
          TensorView::Contiguous(out_dev.as<uint16_t>() + int64_t{kept_begin[b]} * hq * kD,
                                 DType::kBF16, {kept_len[b], hq, kD}, Device::kCuda);
      MergeAttentionPieces(ctx, seq_out, partial_dev.as<uint16_t>() + kept_begin[b] * hq * kD,
                           t_out, lse_dev.as<float>() + kept_begin[b], t_out, splits);
    }
    ctx.cuda().Synchronize();
    const std::vector<uint16_t> split_out = out_dev.ToHost<uint16_t>(want.size());
    AttentionParams params;
    params.scale = p.scale;
    for (int b = 0; b < n_seq; ++b) {
      const int n = kept_len[b];
      std::vector<float> ref(int64_t{n} * hq * kD), got(ref.size());
      std::vector<int32_t> q_pos(kept_coord.begin() + kept_begin[b],
                                 kept_coord.begin() + kept_begin[b] + n);
      for (int32_t& c : q_pos) c = std::min(c, coord[begin[b] + len[b] - 1]);
      auto host = [](const std::vector<float>& x, int64_t row0, int64_t nr, int64_t h) {
        return TensorView::Contiguous(const_cast<float*>(x.data()) + row0 * h * kD, DType::kF32,
                                      {nr, h, kD});
      };
      ::uniprefill::ops::Attention(*cpu_, host(ref, 0, n, hq), host(q_kept, kept_begin[b], n, hq),
                                   host(k, begin[b], len[b], hkv), host(v, begin[b], len[b], hkv),
                                   q_pos.data(), coord.data() + begin[b], params);
      for (int64_t e = 0; e < int64_t{n} * hq * kD; ++e) {
        got[e] = Bf16BitsToF32(split_out[int64_t{kept_begin[b]} * hq * kD + e]);
      }
      EXPECT_LT(RelativeL2Error(got, ref), kCpuTolerance) << "sequence " << b << " Hq " << hq;
    }
    for (int64_t e = int64_t{t_out} * hq * kD; e < static_cast<int64_t>(want.size()); ++e) {
      ASSERT_EQ(split_out[e], 0xFFFF) << "wrote past the gathered rows";
    }
  }
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


// The throughput tests' problem, the 8B shape (32 / 8 heads, d 128): `rows` queries at rows
// [0, rows) of q (the fused QKV's columns, row stride (Hq + 2 Hkv) D) and out, the last of `keys`
// keys at rows [0, keys) of k and v (their own planes, row stride Hkv D, as the pool's); meta is
// device int32 {0, rows, 0, keys}; split-KV into partial / lse where splits > 1.
constexpr int kServedHq = 32, kServedHkv = 8;
constexpr int64_t kServedQld = (kServedHq + 2 * kServedHkv) * kD, kServedKvld = kServedHkv * kD;

WgmmaAttentionProblem ServedChunkProblem(const DeviceBuffer& q, const DeviceBuffer& k,
                                         const DeviceBuffer& v, const DeviceBuffer& out,
                                         const DeviceBuffer& meta, int rows, int64_t keys,
                                         int splits, const DeviceBuffer& partial,
                                         const DeviceBuffer& lse) {
  WgmmaAttentionProblem p;
  p.q = q.as<__nv_bfloat16>();
  p.k = k.as<__nv_bfloat16>();
  p.v = v.as<__nv_bfloat16>();
  p.out = out.as<__nv_bfloat16>();
  p.q_row_stride = kServedQld;
  p.k_row_stride = p.v_row_stride = kServedKvld;
  p.out_row_stride = kServedHq * kD;
  p.rows = rows;
  p.k_rows = keys;
  p.seq_begin = meta.as<int32_t>();
  p.seq_len = meta.as<int32_t>() + 1;
  p.k_seq_begin = meta.as<int32_t>() + 2;
  p.k_seq_len = meta.as<int32_t>() + 3;
  p.batch = 1;
  p.max_seqlen = rows;
  p.hq = kServedHq;
  p.hkv = kServedHkv;
  p.head_dim = kD;
  p.scale = 1.0f / std::sqrt(static_cast<float>(kD));
  p.splits = splits;
  if (splits > 1) {
    p.partial = partial.as<__nv_bfloat16>();
    p.lse = lse.as<float>();
  }
  return p;
}

// The served 130K prompt's chunks (256-2048 rows over a ~120K cached prefix) against the whole
// prefill's rate, by key split: on an H100 (28th session) served 256-row chunks ran the kernel at
// ~548 TFLOP/s, here alone 629 in 2 splits (the split rule's pick; whole 128K: 576): the gap is
// the clock under the power limit (DISABLED_ThroughputDeepChunkBetweenGemms), these launches
// are a cool GPU's bursts. The 8B shape (32 / 8 heads,
// d 128), keys in their own planes as the pool's (row stride Hkv * D), q as the fused QKV's
// columns (row stride (Hq + 2 Hkv) D). Prints the kernel's and the merge's milliseconds and the
// kernel's rate (4 D Hq FLOPs per row-key pair, causal pairs only). Run by name on a GPU.
TEST_F(WgmmaAttentionTest, DISABLED_ThroughputChunksOverDeepPrefixesBySplits) {
  UP_CUDA_TEST_CONTEXT(ctx);
  UP_WGMMA_OR_SKIP(ctx);
  constexpr int kHq = kServedHq;
  constexpr int64_t kMaxKeys = 131072 + 2048, kQld = kServedQld, kKvld = kServedKvld;
  DeviceBuffer q_dev(kMaxKeys * kQld * 2), k_dev(kMaxKeys * kKvld * 2), v_dev(kMaxKeys * kKvld * 2);
  DeviceBuffer out_dev(kMaxKeys * kHq * kD * 2);
  constexpr int kMaxSplits = 8;
  DeviceBuffer partial_dev(int64_t{kMaxSplits} * 2048 * kHq * kD * 2);
  DeviceBuffer lse_dev(int64_t{kMaxSplits} * kHq * 2048 * 4);
  FillRandomBf16(ctx, q_dev.data(), kMaxKeys * kQld, 1, 1.0f);
  FillRandomBf16(ctx, k_dev.data(), kMaxKeys * kKvld, 2, 1.0f);
  FillRandomBf16(ctx, v_dev.data(), kMaxKeys * kKvld, 3, 1.0f);
  // Run one problem: `rows` queries, the last rows of `keys` keys; whole when rows == keys.
  const auto run = [&](int rows, int64_t keys, int splits, double* merge_ms) {
    const std::vector<int32_t> meta = {0, rows, 0, static_cast<int32_t>(keys)};
    const DeviceBuffer meta_dev = DeviceBuffer::FromHost(meta);
    UP_CUDA_CHECK(cudaDeviceSynchronize());
    const WgmmaAttentionProblem p = ServedChunkProblem(q_dev, k_dev, v_dev, out_dev, meta_dev, rows,
                                                       keys, splits, partial_dev, lse_dev);
    EXPECT_TRUE(WgmmaAttentionCovers(p));
    const int reps = keys > 65536 && rows == keys ? 3 : 20;
    const double ms = ::uniprefill::testing::MeanCudaMs(ctx, reps, [&] {
      EXPECT_EQ(LaunchFlashAttentionWgmma(p, ctx.cuda().stream()), cudaSuccess);
    });
    *merge_ms = 0;
    if (splits > 1) {
      TensorView o = TensorView::Contiguous(out_dev.as<uint16_t>(), DType::kBF16,
                                            {rows, kHq, kD}, Device::kCuda);
      *merge_ms = ::uniprefill::testing::MeanCudaMs(ctx, reps, [&] {
        MergeAttentionPieces(ctx, o, partial_dev.as<uint16_t>(), rows, lse_dev.as<float>(), rows,
                             splits);
      });
    }
    return ms;
  };
  const auto report = [&](int rows, int64_t keys, int splits) {
    double merge_ms = 0;
    const double ms = run(rows, keys, splits, &merge_ms);
    const double prefix = static_cast<double>(keys - rows);
    const double pairs = rows * prefix + rows * (rows + 1.0) / 2;
    std::printf("rows %5d keys %6lld splits %d: kernel %8.3f ms %6.1f TFLOP/s, merge %.3f ms\n",
                rows, static_cast<long long>(keys), splits, ms,
                4.0 * kD * kHq * pairs / (ms * 1e-3) / 1e12, merge_ms);
    std::fflush(stdout);
  };
  report(32768, 32768, 1);
  report(131072, 131072, 1);
  for (int rows : {256, 384, 512, 1024, 2048}) {
    for (int splits : {1, 2, 3, 4, 6, 8}) report(rows, 120000 + rows, splits);
  }
  for (int splits : {1, 2, 4, 8}) report(256, 60000 + 256, splits);
}


// The served chunks ran the kernel ~14% under its rate alone (28th session, H100: 256 rows
// ~129K deep, 0.98 ms a layer served against 0.86 alone). Is it the GEMMs between them? (On the
// H100: no, the power limit: p50 0.90 -> 0.94 -> 0.93 -> 0.97 ms as the SM clock fell to
// 1.47 GHz at 700 W, whichever phase.) The
// same 256-row chunk over a 120K prefix (2 splits), first back to back, then each launch between
// an 8B layer's four GEMMs at 256 rows (qkv, o, gate_up, down) as a served forward runs it; each
// attention launch timed by its own events. Each phase runs ~1.5 s and prints its wall-clock
// bounds (epoch ms) so that a clock sampler beside it (nvidia-smi -lms) can be read per phase.
TEST_F(WgmmaAttentionTest, DISABLED_ThroughputDeepChunkBetweenGemms) {
  UP_CUDA_TEST_CONTEXT(ctx);
  UP_WGMMA_OR_SKIP(ctx);
  constexpr int kHq = kServedHq, kRows = 256, kSplits = 2, kH = 4096, kF = 14336;
  constexpr int64_t kKeys = 120000 + kRows;
  constexpr int64_t kQld = kServedQld, kKvld = kServedKvld;
  DeviceBuffer q_dev(kRows * kQld * 2), k_dev(kKeys * kKvld * 2), v_dev(kKeys * kKvld * 2);
  DeviceBuffer out_dev(kRows * kHq * kD * 2);
  DeviceBuffer partial_dev(int64_t{kSplits} * kRows * kHq * kD * 2);
  DeviceBuffer lse_dev(int64_t{kSplits} * kHq * kRows * 4);
  FillRandomBf16(ctx, q_dev.data(), kRows * kQld, 1, 1.0f);
  FillRandomBf16(ctx, k_dev.data(), kKeys * kKvld, 2, 1.0f);
  FillRandomBf16(ctx, v_dev.data(), kKeys * kKvld, 3, 1.0f);
  // The layer's weights (bf16 [N, K]) and activations, random.
  DeviceBuffer w_qkv(kQld * kH * 2), w_o(kH * kH * 2), w_gu(2 * kF * kH * 2), w_down(kH * kF * 2);
  DeviceBuffer x(kRows * kF * 2), y(kRows * 2 * kF * 2);
  FillRandomBf16(ctx, w_qkv.data(), kQld * kH, 4, 0.02f);
  FillRandomBf16(ctx, w_o.data(), kH * kH, 5, 0.02f);
  FillRandomBf16(ctx, w_gu.data(), 2 * kF * kH, 6, 0.02f);
  FillRandomBf16(ctx, w_down.data(), kH * kF, 7, 0.02f);
  FillRandomBf16(ctx, x.data(), kRows * kF, 8, 1.0f);
  const std::vector<int32_t> meta = {0, kRows, 0, static_cast<int32_t>(kKeys)};
  const DeviceBuffer meta_dev = DeviceBuffer::FromHost(meta);
  UP_CUDA_CHECK(cudaDeviceSynchronize());
  const WgmmaAttentionProblem p = ServedChunkProblem(q_dev, k_dev, v_dev, out_dev, meta_dev, kRows,
                                                     kKeys, kSplits, partial_dev, lse_dev);
  ASSERT_TRUE(WgmmaAttentionCovers(p));
  cudaStream_t stream = ctx.cuda().stream();
  const auto gemm = [&](int64_t n, int64_t k, const DeviceBuffer& w) {
    Gemm(ctx, y.View(DType::kBF16, {kRows, n}), x.View(DType::kBF16, {kRows, k}),
         w.View(DType::kBF16, {n, k}));
  };
  constexpr int kLayers = 400;
  std::vector<cudaEvent_t> ev(2 * kLayers);
  for (cudaEvent_t& e : ev) UP_CUDA_CHECK(cudaEventCreate(&e));
  const auto epoch_ms = [] {
    return static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::system_clock::now().time_since_epoch())
                                      .count());
  };
  for (const bool between : {false, true, false, true}) {
    UP_CUDA_CHECK(cudaDeviceSynchronize());
    const long long begin = epoch_ms();
    for (int l = 0; l < kLayers; ++l) {
      if (between) gemm(kQld, kH, w_qkv);
      UP_CUDA_CHECK(cudaEventRecord(ev[2 * l], stream));
      ASSERT_EQ(LaunchFlashAttentionWgmma(p, stream), cudaSuccess);
      UP_CUDA_CHECK(cudaEventRecord(ev[2 * l + 1], stream));
      if (between) {
        gemm(kH, kH, w_o);
        gemm(2 * kF, kH, w_gu);
        gemm(kH, kF, w_down);
      }
    }
    UP_CUDA_CHECK(cudaDeviceSynchronize());
    const long long end = epoch_ms();
    std::vector<float> ms(kLayers);
    for (int l = 0; l < kLayers; ++l) {
      UP_CUDA_CHECK(cudaEventElapsedTime(&ms[l], ev[2 * l], ev[2 * l + 1]));
    }
    std::sort(ms.begin(), ms.end());
    std::printf("phase %s epoch ms %lld .. %lld: attention %d launches, p10 %.3f p50 %.3f p90 %.3f "
                "ms\n", between ? "between-gemms" : "back-to-back", begin, end, kLayers,
                ms[kLayers / 10], ms[kLayers / 2], ms[kLayers * 9 / 10]);
    std::fflush(stdout);
  }
  for (cudaEvent_t e : ev) cudaEventDestroy(e);
}

}  // namespace
}  // namespace uniprefill::ops::cuda
