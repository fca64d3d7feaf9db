// Causal prefill attention on wgmma + TMA (flash_attention_wgmma.h). Why by hand: cuDNN's fused
// kernel is the bar (issue 17) and sets the ceiling of every dense prefill at 128K;
// FlashAttention-3 itself ships as a Python extension. The CPU op (ops::Attention) and ops::cuda::FlashAttention are its judges
// (tests/ops/cuda/flash_attention_wgmma_test.cc).
//
// One CTA = 128 query rows of one head: warps 0-7 are two consumer warpgroups of 64 rows (240
// registers a thread), warps 8-11 the producer warpgroup (24 registers; one thread works).
// Shared memory (1024-byte aligned, 128-byte swizzle as TMA writes it and wgmma reads it): Q
// [2 halves of d][128 rows][64 bf16], and kStages K and V tiles of the same shape (128 keys). The
// producer's one thread loads Q once, then K and V of every key tile the CTA needs into the ring,
// each tile completing on its own mbarrier (k_full / v_full) and refilled once all eight consumer
// warps arrived on its `empty` barrier.
//
// A consumer warpgroup per key tile j, from the last the CTA's rows see down to 0 (so the tiles
// that need the causal mask come first, and the others need none):
//   S = Q K^T  8 wgmma m64n128k16 from shared memory (K-major both), f32 in registers
//   mask (the first tiles), online softmax in the exp2 domain, P to bf16 in registers
//   O += P V   8 wgmma m64n128k16 with A = P from registers, B = V read N-major (imm-trans-b)
// Two schedules (WgmmaAttentionSchedule): kSerial issues S of tile j + 1 beside PV of tile j;
// kIntraOverlap (the default) runs the softmax of tile j while the tensor cores multiply PV of
// tile j - 1. The two warpgroups also interleave on their own.
// Split-KV (WgmmaAttentionProblem::splits): blockIdx.z is (sequence, split); a CTA walks only its
// split's share of the key tiles and writes its rows' partial output and log-sum-exp.
#include "ops/cuda/sm90/flash_attention_wgmma.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cmath>
#include <type_traits>

#include "ops/cuda/cuda_attention_merge.h"
#include "ops/cuda/flash_attention_mma.cuh"
#include "ops/cuda/sm90/wgmma_primitives.cuh"

namespace uniprefill::ops::cuda {
namespace {

using bf16 = __nv_bfloat16;
namespace fl = ::uniprefill::ops::cuda::flash;
namespace s90 = ::uniprefill::ops::cuda::sm90;

constexpr int kHeadDim = 128;
constexpr int kBlockM = 128, kBlockN = 128;
constexpr int kConsumerWarps = 8, kThreads = 3 * 128;  // two consumer warpgroups + the producer's
constexpr int kHalfBytes = kBlockN * 64 * 2;   // one [128 rows][64 bf16] swizzled half: 16 KiB
constexpr int kTileBytes = 2 * kHalfBytes;     // a [128][128] tile: 32 KiB
constexpr size_t SmemBytes(int stages) {
  return 1024 + size_t{kTileBytes} * (1 + 2 * stages) + 8 * (1 + 3 * stages);
}

static_assert(kBlockM == kBlockN, "the diagonal tile logic assumes square tiles");

struct KernelParams {
  bf16* out;
  int64_t out_row_stride;
  const int32_t* seq_begin;  // queries (and out)
  const int32_t* seq_len;
  const int32_t* k_seq_begin;  // keys and values
  const int32_t* k_seq_len;
  int group;         // hq / hkv
  float scale_log2;  // softmax scale * log2(e)
  int splits;        // key splits per query tile (WgmmaAttentionProblem::splits)
  bf16* partial;     // splits > 1: bf16 [splits, rows, hq, 128]
  float* lse;        // splits > 1: f32 [splits, hq, rows]
  int64_t rows;      // rows of q (the partial outputs' rows per split)
  int hq;
  const int32_t* q_coord;  // gathered queries (WgmmaAttentionProblem::q_coord), or null
  const int32_t* k_coord;
  int q_tiles;              // query tiles of the longest sequence
  bool kv_group_order;      // WgmmaTileOrder::kKvGroupLongestFirst (grid x: q_tiles * group)
  bool skip_unit_rescale;   // WgmmaAttentionProblem::skip_unit_rescale
};

#ifdef UP_SM90A_COMPILED
using fl::Exp2;
using fl::PackBf16x2;

// S (64 rows of this warpgroup x 128 keys) = Q K^T of key stage `k_stage`.
__device__ __forceinline__ void IssueQk(float (&s)[64], uint32_t q_base, uint32_t k_stage) {
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 16; ++kk) {
    const uint32_t offset = (kk / 4) * kHalfBytes + (kk % 4) * 32;
    s90::WgmmaM64N128K16SS(s, s90::KMajorSw128Descriptor(q_base + offset),
                           s90::KMajorSw128Descriptor(k_stage + offset), kk > 0);
  }
}
// O += P V of value stage `v_stage`; p holds P as the A fragments of 8 k steps of 16 keys.
__device__ __forceinline__ void IssuePv(float (&o)[64], const uint32_t (&p)[32], uint32_t v_stage) {
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk) {
    const uint32_t a[4] = {p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3]};
    s90::WgmmaM64N128K16RS(o, a, s90::MnMajorSw128Descriptor(v_stage + kk * 16 * 128, kHalfBytes));
  }
}

// Online softmax state of this thread's two rows: running max (raw scores) and partial sums of
// exp2 over this thread's columns (reduced across the quad at the end).
struct RowState {
  float m0, m1, l0, l1;
};

// Masks keys past each row's own key (when `mask`), updates the running max from the quad's
// scores, writes P = exp2(s * sl2 - max * sl2) as bf16 A fragments and returns the factors the
// output rows must be rescaled by.
__device__ __forceinline__ void Softmax(const float (&s)[64], uint32_t (&pf)[32], RowState& rs,
                                        float& corr0, float& corr1, int key0, int last_key0,
                                        int last_key1, bool mask, float sl2, int t) {
  // The scores are only read: S's registers belong to a wgmma group until the next wait on it,
  // and a write here would make ptxas serialise the pipeline.
  float x[64];
#pragma unroll
  for (int c = 0; c < 16; ++c) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int key = key0 + 8 * c + 2 * t + e;
      x[4 * c + e] = mask && key > last_key0 ? -INFINITY : s[4 * c + e];
      x[4 * c + 2 + e] = mask && key > last_key1 ? -INFINITY : s[4 * c + 2 + e];
    }
  }
  float mx0 = rs.m0, mx1 = rs.m1;
#pragma unroll
  for (int c = 0; c < 16; ++c) {
    mx0 = fmaxf(mx0, fmaxf(x[4 * c], x[4 * c + 1]));
    mx1 = fmaxf(mx1, fmaxf(x[4 * c + 2], x[4 * c + 3]));
  }
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
  // A row with no visible key yet (a chunk's first rows in the tile after its prefix's last) keeps
  // max -inf: its P is 0 and nothing may become NaN (-inf - -inf).
  corr0 = rs.m0 == -INFINITY ? 0.0f : Exp2((rs.m0 - mx0) * sl2);
  corr1 = rs.m1 == -INFINITY ? 0.0f : Exp2((rs.m1 - mx1) * sl2);
  rs.m0 = mx0;
  rs.m1 = mx1;
  const float base0 = mx0 == -INFINITY ? 0.0f : mx0 * sl2;
  const float base1 = mx1 == -INFINITY ? 0.0f : mx1 * sl2;
  float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
  for (int c = 0; c < 16; ++c) {
    const float a = Exp2(fmaf(x[4 * c], sl2, -base0));
    const float b = Exp2(fmaf(x[4 * c + 1], sl2, -base0));
    const float c2 = Exp2(fmaf(x[4 * c + 2], sl2, -base1));
    const float d = Exp2(fmaf(x[4 * c + 3], sl2, -base1));
    sum0 += a + b;
    sum1 += c2 + d;
    pf[2 * c] = PackBf16x2(a, b);
    pf[2 * c + 1] = PackBf16x2(c2, d);
  }
  rs.l0 = rs.l0 * corr0 + sum0;
  rs.l1 = rs.l1 * corr1 + sum1;
}

__device__ __forceinline__ void Rescale(float (&o)[64], float corr0, float corr1,
                                        bool skip_unit) {
  // Warp-uniform, after the PV GEMM's wait: no wgmma holds o here, so the branch costs ptxas
  // nothing in the pipeline.
  if (skip_unit && __all_sync(0xffffffffu, corr0 == 1.0f && corr1 == 1.0f)) return;
#pragma unroll
  for (int c = 0; c < 16; ++c) {
    o[4 * c] *= corr0;
    o[4 * c + 1] *= corr0;
    o[4 * c + 2] *= corr1;
    o[4 * c + 3] *= corr1;
  }
}

// kIntraOverlapPvBesideExp's softmax, in two halves. RowMax: the running max of this thread's
// two rows over the tile's unmasked scores, across the quad (shuffles). Exponentiate: the
// factors O must be rescaled by, and the probabilities written over the scores (S's wgmma group
// is complete once waited for, so its registers are this thread's), summed per thread, with no
// shuffle: ptxas ends a wgmma's flight at a shuffle (a block boundary in its SASS), so only the
// shuffle-free half can run beside the PV GEMM. Masked scores are skipped by the max and their
// probability zeroed (Softmax's exp2(-inf) was 0 too: the same bits, summed in the same order).
template <bool kMask>
__device__ __forceinline__ void RowMax(const float (&s)[64], const RowState& rs, float& mx0,
                                       float& mx1, int key0, int last_key0, int last_key1, int t) {
  mx0 = rs.m0;
  mx1 = rs.m1;
#pragma unroll
  for (int c = 0; c < 16; ++c) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int key = key0 + 8 * c + 2 * t + e;
      mx0 = fmaxf(mx0, kMask && key > last_key0 ? -INFINITY : s[4 * c + e]);
      mx1 = fmaxf(mx1, kMask && key > last_key1 ? -INFINITY : s[4 * c + 2 + e]);
    }
  }
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
}

template <bool kMask>
__device__ __forceinline__ void Exponentiate(float (&s)[64], RowState& rs, float mx0, float mx1,
                                             float& corr0, float& corr1, int key0,
                                             int last_key0, int last_key1, float sl2, int t) {
  // A row with no visible key yet keeps max -inf: its P is 0 and nothing may become NaN.
  corr0 = rs.m0 == -INFINITY ? 0.0f : Exp2((rs.m0 - mx0) * sl2);
  corr1 = rs.m1 == -INFINITY ? 0.0f : Exp2((rs.m1 - mx1) * sl2);
  rs.m0 = mx0;
  rs.m1 = mx1;
  const float base0 = mx0 == -INFINITY ? 0.0f : mx0 * sl2;
  const float base1 = mx1 == -INFINITY ? 0.0f : mx1 * sl2;
  float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
  for (int c = 0; c < 16; ++c) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int key = key0 + 8 * c + 2 * t + e;
      const float a = Exp2(fmaf(s[4 * c + e], sl2, -base0));
      const float b = Exp2(fmaf(s[4 * c + 2 + e], sl2, -base1));
      s[4 * c + e] = kMask && key > last_key0 ? 0.0f : a;
      s[4 * c + 2 + e] = kMask && key > last_key1 ? 0.0f : b;
    }
    sum0 += s[4 * c] + s[4 * c + 1];
    sum1 += s[4 * c + 2] + s[4 * c + 3];
  }
  rs.l0 = rs.l0 * corr0 + sum0;
  rs.l1 = rs.l1 * corr1 + sum1;
}

// P (bf16 A fragments of 8 k steps of 16 keys) from Exponentiate's probabilities.
__device__ __forceinline__ void PackP(const float (&s)[64], uint32_t (&pf)[32]) {
#pragma unroll
  for (int c = 0; c < 16; ++c) {
    pf[2 * c] = PackBf16x2(s[4 * c], s[4 * c + 1]);
    pf[2 * c + 1] = PackBf16x2(s[4 * c + 2], s[4 * c + 3]);
  }
}

template <WgmmaAttentionSchedule kSchedule, int kStages>
__global__ void __launch_bounds__(kThreads, 1)
    FlashAttentionWgmmaKernel(const __grid_constant__ CUtensorMap q_map,
                              const __grid_constant__ CUtensorMap k_map,
                              const __grid_constant__ CUtensorMap v_map, KernelParams p) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  const uint32_t q_smem = s90::SmemAddress(smem);
  const uint32_t k_smem = q_smem + kTileBytes;                 // stage s at + s * kTileBytes
  const uint32_t v_smem = k_smem + kStages * kTileBytes;
  const uint32_t bars = v_smem + kStages * kTileBytes;
  const uint32_t q_full = bars;
  auto k_full = [&](int s) { return bars + 8 * (1 + s); };
  auto v_full = [&](int s) { return bars + 8 * (1 + kStages + s); };
  auto empty = [&](int s) { return bars + 8 * (1 + 2 * kStages + s); };

  // Heaviest tiles first: of this head (kHeadMajor) or of the kv head's group (blockIdx.y the kv
  // head, the group's heads fastest).
  const int bx = static_cast<int>(blockIdx.x), by = static_cast<int>(blockIdx.y);
  const int q_tile = p.kv_group_order ? p.q_tiles - 1 - bx / p.group : p.q_tiles - 1 - bx;
  const int head = p.kv_group_order ? by * p.group + bx % p.group : by;
  const int b = static_cast<int>(blockIdx.z) / p.splits, split = blockIdx.z % p.splits;
  const int seq_begin = p.seq_begin[b], seq_len = p.seq_len[b];
  const int k_begin = p.k_seq_begin[b], k_len = p.k_seq_len[b];
  const int offset = k_len - seq_len;  // query i is key offset + i
  const int q0 = q_tile * kBlockM;
  if (q0 >= seq_len) return;
  const int kv_head = head / p.group;
  // The last key query row i (of this sequence) sees: offset + i, or with gathered queries its
  // coordinate's (rows past the sequence as its last row; at most the last key).
  const int k_coord0 = p.q_coord != nullptr ? p.k_coord[k_begin] : 0;
  const auto last_key = [&](int i) {
    if (p.q_coord == nullptr) return offset + i;
    return max(-1, min(p.q_coord[seq_begin + min(i, seq_len - 1)] - k_coord0, k_len - 1));
  };
  // The key tiles this CTA's rows see, [0, all_tiles); its split's share [lo, hi), walked down.
  const int all_tiles = (min(last_key(q0 + kBlockM - 1) + 1, k_len) + kBlockN - 1) / kBlockN;
  const int lo = all_tiles * split / p.splits, hi = all_tiles * (split + 1) / p.splits;
  const int n_tiles = hi - lo;

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int wg = warp / 4, wi = warp % 4, g = lane / 4, t = lane % 4;
  const int row0 = q0 + wg * 64 + wi * 16 + g, row1 = row0 + 8;  // within the sequence
  // The epilogue: this thread's two rows normalised, to out (one piece) or to the split's partial
  // output with the rows' log-sum-exp (natural log of sum exp(scale * s)).
  const auto write_rows = [&](const float (&o)[64], float m0, float m1, float l0, float l1) {
    const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
    const int64_t stride = p.splits > 1 ? int64_t{p.hq} * kHeadDim : p.out_row_stride;
    bf16* head_base = (p.splits > 1 ? p.partial + split * p.rows * stride : p.out) +
                      head * kHeadDim + 2 * t;
    if (row0 < seq_len) {
      uint32_t* dst = reinterpret_cast<uint32_t*>(head_base + (seq_begin + row0) * stride);
#pragma unroll
      for (int c = 0; c < 16; ++c) dst[4 * c] = PackBf16x2(o[4 * c] * inv0, o[4 * c + 1] * inv0);
    }
    if (row1 < seq_len) {
      uint32_t* dst = reinterpret_cast<uint32_t*>(head_base + (seq_begin + row1) * stride);
#pragma unroll
      for (int c = 0; c < 16; ++c) {
        dst[4 * c] = PackBf16x2(o[4 * c + 2] * inv1, o[4 * c + 3] * inv1);
      }
    }
    if (p.splits > 1 && t == 0) {
      constexpr float kLn2 = 0.6931471805599453f;
      float* lse = p.lse + (int64_t{split} * p.hq + head) * p.rows + seq_begin;
      const auto log_sum_exp = [&](float m, float l) {
        return l > 0.0f ? (m * p.scale_log2 + log2f(l)) * kLn2 : -INFINITY;
      };
      if (row0 < seq_len) lse[row0] = log_sum_exp(m0, l0);
      if (row1 < seq_len) lse[row1] = log_sum_exp(m1, l1);
    }
  };
  if (n_tiles == 0) {  // a split past this tile's keys: nothing seen (weight 0 in the merge)
    if (warp < kConsumerWarps) {
      float zero[64];
#pragma unroll
      for (int i = 0; i < 64; ++i) zero[i] = 0.0f;
      write_rows(zero, -INFINITY, -INFINITY, 0.0f, 0.0f);
    }
    return;
  }
  if (threadIdx.x == 0) {
    s90::MbarrierInit(q_full, 1);
    for (int s = 0; s < kStages; ++s) {
      s90::MbarrierInit(k_full(s), 1);
      s90::MbarrierInit(v_full(s), 1);
      s90::MbarrierInit(empty(s), kConsumerWarps);
    }
    s90::FenceBarrierInit();
  }
  __syncthreads();

  if (warp >= kConsumerWarps) {  // the producer warpgroup: one thread issues every load
    s90::LowerRegisterLimit<24>();
    if (warp != kConsumerWarps || lane != 0) return;
    s90::PrefetchTensorMap(&q_map);
    s90::PrefetchTensorMap(&k_map);
    s90::PrefetchTensorMap(&v_map);
    s90::MbarrierArriveExpectTx(q_full, kTileBytes);
    s90::TmaLoad3d(q_smem, &q_map, 0, head, seq_begin + q0, q_full);
    s90::TmaLoad3d(q_smem + kHalfBytes, &q_map, 64, head, seq_begin + q0, q_full);
    for (int it = 0; it < n_tiles; ++it) {
      const int j = hi - 1 - it, s = it % kStages, round = it / kStages;
      s90::MbarrierWait(empty(s), (round & 1) ^ 1);
      const int key_row = k_begin + j * kBlockN;
      const uint32_t ks = k_smem + s * kTileBytes, vs = v_smem + s * kTileBytes;
      s90::MbarrierArriveExpectTx(k_full(s), kTileBytes);
      s90::TmaLoad3d(ks, &k_map, 0, kv_head, key_row, k_full(s));
      s90::TmaLoad3d(ks + kHalfBytes, &k_map, 64, kv_head, key_row, k_full(s));
      s90::MbarrierArriveExpectTx(v_full(s), kTileBytes);
      s90::TmaLoad3d(vs, &v_map, 0, kv_head, key_row, v_full(s));
      s90::TmaLoad3d(vs + kHalfBytes, &v_map, 64, kv_head, key_row, v_full(s));
    }
    return;
  }

  // A consumer: warpgroup wg, warp wi in it; lane (g, t) holds rows row0 = g and row1 = g + 8 of
  // the warp's 16 (see wgmma_primitives.cuh).
  s90::RaiseRegisterLimit<240>();
  const int key_row0 = last_key(row0), key_row1 = last_key(row1);  // the rows' last keys
  const uint32_t q_base = q_smem + wg * 64 * 128;
  float o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  RowState rs{-INFINITY, -INFINITY, 0.0f, 0.0f};
  const float sl2 = p.scale_log2;
  const int mask_from = last_key(q0 + wg * 64);  // a key tile ending past this needs the mask

  s90::MbarrierWait(q_full, 0);
  float s[64];
  uint32_t pf[32];
  // The overlap schedules' last step: PV of the last key tile from P buffer p_last, then its
  // stage released.
  const auto last_pv = [&](uint32_t (&p_last)[32]) {
    const int last = (n_tiles - 1) % kStages, last_round = (n_tiles - 1) / kStages;
    s90::MbarrierWait(v_full(last), last_round & 1);
    s90::FenceRegisters(p_last);
    s90::FenceRegisters(o);
    s90::WgmmaFence();
    IssuePv(o, p_last, v_smem + last * kTileBytes);
    s90::WgmmaCommit();
    s90::WgmmaWait<0>();
    s90::FenceRegisters(o);
    __syncwarp();
    if (lane == 0) s90::MbarrierArrive(empty(last));
  };
  if constexpr (kSchedule == WgmmaAttentionSchedule::kSerial) {
    // S of tile it + 1 runs beside PV of tile it; the softmax waits for both.
    s90::MbarrierWait(k_full(0), 0);
    s90::WgmmaFence();
    IssueQk(s, q_base, k_smem);
    s90::WgmmaCommit();
    for (int it = 0; it < n_tiles; ++it) {
      const int j = hi - 1 - it, st = it % kStages, round = it / kStages;
      s90::WgmmaWait<0>();
      s90::FenceRegisters(s);
      float corr0, corr1;
      Softmax(s, pf, rs, corr0, corr1, j * kBlockN, key_row0, key_row1,
              j * kBlockN + kBlockN - 1 > mask_from, sl2, t);
      Rescale(o, corr0, corr1, p.skip_unit_rescale);
      s90::MbarrierWait(v_full(st), round & 1);
      if (it + 1 < n_tiles) {
        s90::MbarrierWait(k_full((it + 1) % kStages), ((it + 1) / kStages) & 1);
      }
      s90::FenceRegisters(pf);
      s90::FenceRegisters(o);
      s90::WgmmaFence();
      IssuePv(o, pf, v_smem + st * kTileBytes);
      s90::WgmmaCommit();
      if (it + 1 < n_tiles) {
        IssueQk(s, q_base, k_smem + ((it + 1) % kStages) * kTileBytes);
        s90::WgmmaCommit();
      }
      if (it + 1 < n_tiles) {
        s90::WgmmaWait<1>();  // the PV (committed first) is done; the next S may still run
      } else {
        s90::WgmmaWait<0>();
      }
      __syncwarp();
      if (lane == 0) s90::MbarrierArrive(empty(st));
    }
  } else if constexpr (kSchedule == WgmmaAttentionSchedule::kIntraOverlap) {
    // FlashAttention-3's intra-warpgroup overlap: the softmax of tile it runs while the tensor
    // cores multiply PV of tile it - 1. Two P buffers (the running PV still reads the older),
    // swapped by unrolling the loop by two rather than by copies.
    s90::MbarrierWait(k_full(0), 0);
    s90::WgmmaFence();
    IssueQk(s, q_base, k_smem);
    s90::WgmmaCommit();
    s90::WgmmaWait<0>();
    s90::FenceRegisters(s);
    {
      float corr0, corr1;
      Softmax(s, pf, rs, corr0, corr1, (hi - 1) * kBlockN, key_row0, key_row1,
              (hi - 1) * kBlockN + kBlockN - 1 > mask_from, sl2, t);
    }
    uint32_t pf2[32];
    // One step: S of tile it, PV of tile it - 1 from p_prev, softmax of tile it into p_next.
    auto step = [&](int it, uint32_t (&p_prev)[32], uint32_t (&p_next)[32]) {
      const int j = hi - 1 - it, st = it % kStages, round = it / kStages;
      const int prev = (it - 1) % kStages, prev_round = (it - 1) / kStages;
      s90::MbarrierWait(k_full(st), round & 1);
      s90::MbarrierWait(v_full(prev), prev_round & 1);
      s90::FenceRegisters(p_prev);
      s90::FenceRegisters(o);
      s90::WgmmaFence();
      IssueQk(s, q_base, k_smem + st * kTileBytes);
      s90::WgmmaCommit();
      IssuePv(o, p_prev, v_smem + prev * kTileBytes);
      s90::WgmmaCommit();
      s90::WgmmaWait<1>();  // S (committed first) is done; PV may still run
      s90::FenceRegisters(s);
      float corr0, corr1;
      Softmax(s, p_next, rs, corr0, corr1, j * kBlockN, key_row0, key_row1,
              j * kBlockN + kBlockN - 1 > mask_from, sl2, t);
      s90::WgmmaWait<0>();
      s90::FenceRegisters(o);
      s90::FenceRegisters(p_prev);
      Rescale(o, corr0, corr1, p.skip_unit_rescale);
      __syncwarp();
      if (lane == 0) s90::MbarrierArrive(empty(prev));
    };
    int it = 1;
    for (; it + 1 < n_tiles; it += 2) {
      step(it, pf, pf2);
      step(it + 1, pf2, pf);
    }
    if (it < n_tiles) {
      step(it, pf, pf2);
      last_pv(pf2);
    } else {
      last_pv(pf);
    }
  } else {
    // kIntraOverlapPvBesideExp: the exponentials of tile it beside the PV GEMM of tile it - 1,
    // arranged so that ptxas keeps them there. S of tile it runs alone and is waited for; its
    // row max (with the quad's shuffles) follows with no wgmma in flight; then PV of it - 1 is
    // issued and the exponentials, written over S's registers, run beside it (ptxas interleaves
    // the 8 PV wgmmas with them); after its wait O is rescaled and P packed into the one P
    // buffer. The tiles that need the causal mask (the first, from the diagonal) and the others
    // run in loops of their own, so the unmasked ones carry no mask state. (kIntraOverlap issues
    // S and PV together and takes the max after S's wait: ptxas ends the PV's flight at the
    // max's shuffles, so its SASS waits for PV before every exponential; 30th session.)
    const auto needs_mask = [&](int it) { return (hi - it) * kBlockN - 1 > mask_from; };
    float mx0, mx1, corr0, corr1;
    s90::MbarrierWait(k_full(0), 0);
    s90::WgmmaFence();
    IssueQk(s, q_base, k_smem);
    s90::WgmmaCommit();
    s90::WgmmaWait<0>();
    s90::FenceRegisters(s);
    const int key_first = (hi - 1) * kBlockN;
    if (needs_mask(0)) {
      RowMax<true>(s, rs, mx0, mx1, key_first, key_row0, key_row1, t);
      Exponentiate<true>(s, rs, mx0, mx1, corr0, corr1, key_first, key_row0, key_row1, sl2, t);
    } else {
      RowMax<false>(s, rs, mx0, mx1, key_first, key_row0, key_row1, t);
      Exponentiate<false>(s, rs, mx0, mx1, corr0, corr1, key_first, key_row0, key_row1, sl2, t);
    }
    PackP(s, pf);
    const auto step = [&](int it, auto mask_tag) {
      constexpr bool kMask = decltype(mask_tag)::value;
      const int j = hi - 1 - it, st = it % kStages, round = it / kStages;
      const int prev = (it - 1) % kStages, prev_round = (it - 1) / kStages;
      s90::MbarrierWait(k_full(st), round & 1);
      s90::WgmmaFence();
      IssueQk(s, q_base, k_smem + st * kTileBytes);
      s90::WgmmaCommit();
      s90::WgmmaWait<0>();
      s90::FenceRegisters(s);
      RowMax<kMask>(s, rs, mx0, mx1, j * kBlockN, key_row0, key_row1, t);
      s90::MbarrierWait(v_full(prev), prev_round & 1);
      s90::FenceRegisters(pf);
      s90::FenceRegisters(o);
      s90::WgmmaFence();
      IssuePv(o, pf, v_smem + prev * kTileBytes);
      s90::WgmmaCommit();
      Exponentiate<kMask>(s, rs, mx0, mx1, corr0, corr1, j * kBlockN, key_row0, key_row1, sl2, t);
      s90::FenceRegisters(s);  // the probabilities before the wait in the PTX
      s90::WgmmaWait<0>();
      s90::FenceRegisters(o);
      s90::FenceRegisters(pf);
      Rescale(o, corr0, corr1, p.skip_unit_rescale);
      PackP(s, pf);
      __syncwarp();
      if (lane == 0) s90::MbarrierArrive(empty(prev));
    };
    int it = 1;
    for (; it < n_tiles && needs_mask(it); ++it) step(it, std::true_type{});
    for (; it < n_tiles; ++it) step(it, std::false_type{});
    last_pv(pf);
  }
  float l0 = rs.l0, l1 = rs.l1;
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  write_rows(o, rs.m0, rs.m1, l0, l1);
}
#else
template <WgmmaAttentionSchedule kSchedule, int kStages>
__global__ void FlashAttentionWgmmaKernel(const __grid_constant__ CUtensorMap,
                                          const __grid_constant__ CUtensorMap,
                                          const __grid_constant__ CUtensorMap, KernelParams) {
  __trap();  // built without sm_90a code: WgmmaAttentionAvailable() said no
}
#endif  // UP_SM90A_COMPILED

// The driver's tensor-map encoder, looked up once through the runtime (no link to libcuda).
PFN_cuTensorMapEncodeTiled_v12000 TensorMapEncoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      fn = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// A [rows, heads, 128] bf16 view with `row_stride` elements per row, read in boxes of 128 rows x
// 64 elements of one head (128 bytes: the 128-byte swizzle's row). Rows past the end read zero.
bool EncodeRowsMap(CUtensorMap* map, const bf16* base, int64_t rows, int heads,
                   int64_t row_stride) {
  const auto encode = TensorMapEncoder();
  if (encode == nullptr) return false;
  const cuuint64_t dims[3] = {kHeadDim, static_cast<cuuint64_t>(heads),
                              static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[2] = {kHeadDim * sizeof(bf16),
                                 static_cast<cuuint64_t>(row_stride) * sizeof(bf16)};
  const cuuint32_t box[3] = {64, 1, kBlockN};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<bf16*>(base), dims, strides,
                box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <WgmmaAttentionSchedule kSchedule, int kStages, typename Launch>
cudaError_t LaunchVariant(Launch&& launch) {
  constexpr size_t smem = SmemBytes(kStages);
  static const cudaError_t configured =
      cudaFuncSetAttribute(FlashAttentionWgmmaKernel<kSchedule, kStages>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (configured != cudaSuccess) return configured;
  launch(FlashAttentionWgmmaKernel<kSchedule, kStages>, smem);
  return cudaGetLastError();
}

template <typename Launch>
cudaError_t Dispatch(WgmmaAttentionSchedule schedule, int stages, Launch&& launch) {
  using S = WgmmaAttentionSchedule;
  switch (schedule) {
    case S::kSerial:
      return stages == 3 ? LaunchVariant<S::kSerial, 3>(launch)
                         : LaunchVariant<S::kSerial, 2>(launch);
    case S::kIntraOverlap:
      return stages == 3 ? LaunchVariant<S::kIntraOverlap, 3>(launch)
                         : LaunchVariant<S::kIntraOverlap, 2>(launch);
    case S::kIntraOverlapPvBesideExp:
      return stages == 3 ? LaunchVariant<S::kIntraOverlapPvBesideExp, 3>(launch)
                         : LaunchVariant<S::kIntraOverlapPvBesideExp, 2>(launch);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

bool WgmmaAttentionAvailable(int device_major, int device_minor) {
  return device_major == 9 && device_minor == 0 && TensorMapEncoder() != nullptr;
}

bool WgmmaAttentionCovers(const WgmmaAttentionProblem& p) {
  return p.head_dim == kHeadDim && p.hq > 0 && p.hkv > 0 && p.hq % p.hkv == 0 && p.batch > 0 &&
         p.rows > 0 && p.max_seqlen > 0 && p.q_row_stride % 8 == 0 && p.k_row_stride % 8 == 0 &&
         p.v_row_stride % 8 == 0 && Aligned16(p.q) && Aligned16(p.k) && Aligned16(p.v) &&
         (p.splits == 1 ? p.out_row_stride % 2 == 0 && p.out != nullptr &&
                              reinterpret_cast<uintptr_t>(p.out) % 4 == 0
                        : p.splits > 1 && p.splits <= kMaxAttentionPieces && p.partial != nullptr &&
                              Aligned16(p.partial) && p.lse != nullptr) &&
         int64_t{p.batch} * p.splits < 65536 && p.seq_begin != nullptr && p.seq_len != nullptr &&
         (p.k_seq_begin == nullptr) == (p.k_seq_len == nullptr) &&
         (p.q_coord == nullptr) == (p.k_coord == nullptr) && p.k_rows < (int64_t{1} << 31) &&
         p.rows < (int64_t{1} << 31) && (p.stages == 2 || p.stages == 3);
}

cudaError_t LaunchFlashAttentionWgmma(const WgmmaAttentionProblem& p, cudaStream_t stream) {
  if (!WgmmaAttentionCovers(p)) return cudaErrorInvalidValue;
  CUtensorMap q_map, k_map, v_map;
  const int64_t k_rows = p.k_rows > 0 ? p.k_rows : p.rows;
  if (!EncodeRowsMap(&q_map, p.q, p.rows, p.hq, p.q_row_stride) ||
      !EncodeRowsMap(&k_map, p.k, k_rows, p.hkv, p.k_row_stride) ||
      !EncodeRowsMap(&v_map, p.v, k_rows, p.hkv, p.v_row_stride)) {
    return cudaErrorInvalidValue;
  }
  KernelParams kp;
  kp.out = p.out;
  kp.out_row_stride = p.out_row_stride;
  kp.seq_begin = p.seq_begin;
  kp.seq_len = p.seq_len;
  kp.k_seq_begin = p.k_seq_begin != nullptr ? p.k_seq_begin : p.seq_begin;
  kp.k_seq_len = p.k_seq_len != nullptr ? p.k_seq_len : p.seq_len;
  kp.group = p.hq / p.hkv;
  kp.scale_log2 = p.scale * 1.4426950408889634f;
  kp.splits = p.splits;
  kp.partial = p.partial;
  kp.lse = p.lse;
  kp.rows = p.rows;
  kp.hq = p.hq;
  kp.q_coord = p.q_coord;
  kp.k_coord = p.k_coord;
  kp.q_tiles = (p.max_seqlen + kBlockM - 1) / kBlockM;
  kp.kv_group_order = p.tile_order == WgmmaTileOrder::kKvGroupLongestFirst;
  kp.skip_unit_rescale = p.skip_unit_rescale;
  const dim3 grid = kp.kv_group_order
                        ? dim3(kp.q_tiles * kp.group, p.hkv, p.batch * p.splits)
                        : dim3(kp.q_tiles, p.hq, p.batch * p.splits);
  return Dispatch(p.schedule, p.stages, [&](auto kernel, size_t smem) {
    kernel<<<grid, kThreads, smem, stream>>>(q_map, k_map, v_map, kp);
  });
}

}  // namespace uniprefill::ops::cuda
