// Paged decode attention on tensor cores (PagedDecodeAttention's default kernel; dispatch, splits
// and the split merge live in paged_attention.cu). Private to ops/cuda.
//
// Why: the CUDA-core kernel (lanes over dims, shuffle-reduced dot products, loads issued one step
// ahead) streamed K / V at about a third of HBM bandwidth on the H200 (docs/gpu_performance.md,
// decode): latency-bound with few bytes in flight per SM. Here the loads go through a cp.async
// pipeline of kStages tiles, so two to three tiles per CTA are always in flight, and the
// arithmetic is two small tensor-core GEMMs per tile, which costs nothing beside the loads.
//
// One CTA = (split, kv head x head chunk, request), 4 warps. The chunk's query heads (up to 16:
// GQA groups share every K / V row the CTA loads) are the 16 rows of an mma.m16n8k16 A operand,
// zero rows past the group. Keys stream in tiles of 64 (16 per warp), each tile's K rows, V rows
// and positions copied global -> shared by cp.async into stage t % kStages:
//   S [16 heads, 16 keys] = Q K^T           (D / 16 k-steps, 2 n-tiles, ldmatrix on K rows)
//   mask: a key past seq_len / the split, on a released page (table entry < 0) or whose position
//         fails the causal / window test scores -inf; its K / V were zero-filled or are finite
//         cache rows, so P V adds exactly 0 (NaN poison past seq_len is never read);
//   online softmax per head row in the warp (quad shuffles), O rescaled only when a max grows;
//   O [16, D] += P V                          (P from registers as bf16, ldmatrix.trans on V rows)
// Each warp keeps its own (m, l, O) over its 16 keys of every tile; the 4 warps merge through
// shared memory at the end, and the CTA writes out (one split) or its normalised partial output
// and log2-sum-exp to the scratch for paged_attention.cu's SplitReduceKernel.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "ops/cuda/flash_attention_mma.cuh"
#include "ops/cuda/paged_decode_common.cuh"

namespace uniprefill::ops::cuda::paged {

template <int D>
struct TcShape {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRows = 16;      // query heads per CTA (the mma's M)
  static constexpr int kTileKeys = 64;  // keys per stage, 16 per warp
  static constexpr int kRowStride = D + 8;  // bf16; 16 spare bytes put ldmatrix rows on new banks
  // Stages in the cp.async ring: (kStages - 1) tiles of 2 * 64 * D * 2 bytes in flight per CTA,
  // within 2 CTAs per SM of shared memory for D <= 128.
  static constexpr int kStages = D == 64 ? 4 : (D == 128 ? 3 : 2);
  static constexpr bool kQInRegs = D <= 128;  // D 256: Q fragments re-read from shared
  static constexpr int kChunks = D / 8;      // 16-byte chunks per K / V row
  static constexpr int kRowsPerPass = kThreads / kChunks;
  static constexpr int kPasses = kTileKeys / kRowsPerPass;
  static constexpr int kOStride = D + 4;  // f32 row stride of the warps' outputs in the epilogue
  static constexpr int kKvElems = kTileKeys * kRowStride;  // one stage's K (or V) rows
  static constexpr size_t kSmemBytes =
      sizeof(__nv_bfloat16) * (kRows * kRowStride + 2 * kStages * kKvElems) +
      sizeof(int32_t) * (kStages * kTileKeys + kTableTile);
  static_assert(D % 64 == 0 && kThreads % kChunks == 0 && kTileKeys % kRowsPerPass == 0);
  static_assert(sizeof(float) * kWarps * kRows * (kOStride + 2) <=
                    sizeof(__nv_bfloat16) * 2 * kStages * kKvElems,
                "the epilogue reuses the stage buffers");
};

template <int D>
__global__ void __launch_bounds__(TcShape<D>::kThreads) PagedDecodeTcKernel(const DecodeArgs a) {
  using S = TcShape<D>;
  using bf16 = __nv_bfloat16;
  using flash::CpAsync16;
  using flash::CpAsync4;
  using flash::Exp2;
  using flash::LdMatrixX4;
  using flash::LdMatrixX4Trans;
  using flash::MmaBf16;
  using flash::PackBf16x2;
  constexpr float kNegInf = -__builtin_huge_valf();
  constexpr int RS = S::kRowStride;

  extern __shared__ uint4 smem_vec[];  // 16-byte aligned
  bf16* const sQ = reinterpret_cast<bf16*>(smem_vec);   // [16, RS]
  bf16* const sKV = sQ + S::kRows * RS;                  // stage s: K [64, RS], then V [64, RS]
  int32_t* const sPos = reinterpret_cast<int32_t*>(sKV + 2 * S::kStages * S::kKvElems);
  int32_t* const sTable = sPos + S::kStages * S::kTileKeys;  // [kTableTile]

  const int split = blockIdx.x;
  const int kvh = blockIdx.y / a.head_chunks;
  const int chunk = blockIdx.y % a.head_chunks;
  const int b = blockIdx.z;
  const int h0 = kvh * a.group + chunk * S::kRows;
  const int ng = min(S::kRows, a.group - chunk * S::kRows);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;

  const int seq = a.seq_lens[b];
  const int qp = a.q_pos[b];
  const int k_begin = split * a.keys_per_split;
  const int k_end = min(seq, k_begin + a.keys_per_split);
  const int n_tiles = k_end > k_begin ? (k_end - k_begin + S::kTileKeys - 1) / S::kTileKeys : 0;
  const int bt_mask = (1 << a.block_shift) - 1;
  const int32_t* table = a.table + static_cast<int64_t>(b) * a.table_stride;
  const bf16* kv_head = a.kv + static_cast<int64_t>(kvh) * D;

  // Q rows: head h0 + r for r < ng, zeros after.
  for (int i = tid; i < S::kRows * S::kChunks; i += S::kThreads) {
    const int r = i / S::kChunks, c = i % S::kChunks;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < ng) {
      v = *reinterpret_cast<const uint4*>(a.q + b * a.q_row + (h0 + r) * a.q_head + c * 8);
    }
    *reinterpret_cast<uint4*>(sQ + r * RS + c * 8) = v;
  }

  // The block-table window in shared memory: entries of pages win0 .. win0 + kTableTile - 1.
  // Refilled (by every thread, at the same point of the loop) when a tile to issue leaves it.
  int win0 = INT_MIN / 2;
  const auto ensure_window = [&](int tile) {
    const int first = k_begin + tile * S::kTileKeys;
    const int last = min(k_end, first + S::kTileKeys) - 1;
    const int p_first = first >> a.block_shift, p_last = last >> a.block_shift;
    if (p_first >= win0 && p_last < win0 + kTableTile) return;
    __syncthreads();  // every thread is done reading the previous window
    win0 = p_first;
    const int pages = min(kTableTile, ((k_end - 1) >> a.block_shift) - p_first + 1);
    for (int i = tid; i < pages; i += S::kThreads) sTable[i] = __ldg(table + p_first + i);
    __syncthreads();
  };

  // Issues tile `tile`'s K / V rows and positions into stage `st` (cp.async; committed by the
  // caller). A row past the split or seq_len, or on a released page, is zero-filled and its
  // position set to INT_MAX, which no query sees.
  const auto issue = [&](int tile, int st) {
    bf16* const sK = sKV + st * 2 * S::kKvElems;
    bf16* const sV = sK + S::kKvElems;
    const int first = k_begin + tile * S::kTileKeys;
    const int c = tid % S::kChunks, r0 = tid / S::kChunks;
#pragma unroll
    for (int i = 0; i < S::kPasses; ++i) {
      const int r = r0 + i * S::kRowsPerPass, j = first + r;
      const int blk = j < k_end ? sTable[(j >> a.block_shift) - win0] : -1;
      const bool ok = blk >= 0 && blk < a.num_blocks;
      const bf16* src =
          ok ? kv_head + blk * a.blk_stride + (j & bt_mask) * a.kv_row + c * 8 : a.kv;
      CpAsync16(sK + r * RS + c * 8, src, ok);
      CpAsync16(sV + r * RS + c * 8, ok ? src + a.v_off : a.kv, ok);
    }
    if (tid < S::kTileKeys) {
      const int j = first + tid;
      const int blk = j < k_end ? sTable[(j >> a.block_shift) - win0] : -1;
      int32_t* dst = sPos + st * S::kTileKeys + tid;
      if (blk >= 0 && blk < a.num_blocks) {
        CpAsync4(dst, a.pos + blk * a.pos_blk + (j & bt_mask));
      } else {
        *dst = INT_MAX;
      }
    }
  };

  // The ring's first kStages - 1 tiles (one commit group each, empty past the last tile).
#pragma unroll
  for (int s = 0; s < S::kStages - 1; ++s) {
    if (s < n_tiles) {
      ensure_window(s);
      issue(s, s);
    }
    flash::CpAsyncCommit();
  }
  __syncthreads();  // sQ written

  // This lane's ldmatrix rows / cols: A operand (and V .trans) rows (lane & 15), cols
  // (lane >> 4) * 8; K operand rows (lane & 7) + (lane >> 4) * 8, cols ((lane >> 3) & 1) * 8.
  const int a_row = lane & 15, a_col = (lane >> 4) * 8;
  const int k_row = (lane & 7) + ((lane >> 4) << 3), k_col = ((lane >> 3) & 1) * 8;
  const int g = lane >> 2, t4 = lane & 3;
  uint32_t qf[S::kQInRegs ? D / 16 : 1][4];
  if constexpr (S::kQInRegs) {
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) LdMatrixX4(qf[ks], sQ + a_row * RS + ks * 16 + a_col);
  }

  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] = 0.0f;
  }
  float m[2] = {kNegInf, kNegInf};  // rows g and g + 8: raw score max (not yet scaled)
  float l[2] = {0.0f, 0.0f};        // per-lane partial sums until the epilogue
  // Visible iff p <= qp and (window == 0 or p > qp - window); 64-bit so qp - window cannot wrap.
  const long long after = a.window > 0 ? static_cast<long long>(qp) - a.window : -(1LL << 40);

  for (int tile = 0; tile < n_tiles; ++tile) {
    flash::CpAsyncWait<S::kStages - 2>();  // tile `tile` has landed (this thread's part)
    __syncthreads();                         // ... every thread's; stage tile - 1 is free
    const int next = tile + S::kStages - 1;
    if (next < n_tiles) {
      ensure_window(next);
      issue(next, next % S::kStages);
    }
    flash::CpAsyncCommit();

    const int st = tile % S::kStages;
    const bf16* const sK = sKV + st * 2 * S::kKvElems + warp * 16 * RS;
    const bf16* const sV = sK + S::kKvElems;
    const int32_t* const pw = sPos + st * S::kTileKeys + warp * 16;

    // S [16 heads, 16 keys] = Q K^T: n-tile 0 = keys 0..7, n-tile 1 = keys 8..15 of the warp.
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      uint32_t qa[4];
      if constexpr (S::kQInRegs) {
#pragma unroll
        for (int e = 0; e < 4; ++e) qa[e] = qf[ks][e];
      } else {
        LdMatrixX4(qa, sQ + a_row * RS + ks * 16 + a_col);
      }
      uint32_t kb[4];
      LdMatrixX4(kb, sK + k_row * RS + ks * 16 + k_col);
      MmaBf16(s[0], qa, kb[0], kb[1]);
      MmaBf16(s[1], qa, kb[2], kb[3]);
    }
    // This lane holds keys c = 8 n + 2 t4 + e of rows g (s[n][e]) and g + 8 (s[n][2 + e]).
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int p = pw[8 * n + 2 * t4 + e];
        if (!(p <= qp && p > after)) {
          s[n][e] = kNegInf;
          s[n][2 + e] = kNegInf;
        }
      }
    }

    // Online softmax per row; a quad (4 lanes) shares a row.
    float alpha[2];
    bool max_changed = false;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = fmaxf(m[h], fmaxf(fmaxf(s[0][2 * h], s[0][2 * h + 1]),
                                   fmaxf(s[1][2 * h], s[1][2 * h + 1])));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      // No visible key yet (mx = -inf): subtract 0 instead, so exp2(-inf - 0) = 0, never NaN.
      const float mx_scaled = mx == kNegInf ? 0.0f : mx * a.scale_log2;
      const bool changed = mx != m[h];
      alpha[h] = changed ? Exp2(fmaf(m[h], a.scale_log2, -mx_scaled)) : 1.0f;
      max_changed |= changed;
      m[h] = mx;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < 2; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float p = Exp2(fmaf(s[n][2 * h + e], a.scale_log2, -mx_scaled));
          s[n][2 * h + e] = p;
          sum += p;
        }
      }
      l[h] = l[h] * alpha[h] + sum;
    }
    if (__any_sync(0xffffffffu, max_changed)) {
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) o[n][e] *= alpha[e >> 1];
      }
    }

    // O [16, D] += P [16, 16 keys] V [16 keys, D]
    uint32_t pa[4];
    pa[0] = PackBf16x2(s[0][0], s[0][1]);
    pa[1] = PackBf16x2(s[0][2], s[0][3]);
    pa[2] = PackBf16x2(s[1][0], s[1][1]);
    pa[3] = PackBf16x2(s[1][2], s[1][3]);
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t vb[4];
      LdMatrixX4Trans(vb, sV + a_row * RS + dp * 16 + a_col);
      MmaBf16(o[2 * dp], pa, vb[0], vb[1]);
      MmaBf16(o[2 * dp + 1], pa, vb[2], vb[3]);
    }
  }

  // Epilogue: the warps' states through shared memory (the stage buffers, now idle).
  flash::CpAsyncWait<0>();
  __syncthreads();
  float* const sO = reinterpret_cast<float*>(sKV);          // [4 warps][16 rows][kOStride]
  float* const sM = sO + S::kWarps * S::kRows * S::kOStride;  // [4][16], scaled to log2 units
  float* const sL = sM + S::kWarps * S::kRows;                // [4][16]
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    const int row = g + 8 * h;
    if (t4 == 0) {
      sM[warp * S::kRows + row] = m[h] == kNegInf ? kNegInf : m[h] * a.scale_log2;
      sL[warp * S::kRows + row] = l[h];
    }
    float* dst = sO + (warp * S::kRows + row) * S::kOStride + 2 * t4;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<float2*>(dst + 8 * n) = make_float2(o[n][2 * h], o[n][2 * h + 1]);
    }
  }
  __syncthreads();

  // One thread per (head, 8 dims): merge the 4 warps, normalise, write.
  constexpr int kVecs = D / 8;
  for (int idx = tid; idx < ng * kVecs; idx += S::kThreads) {
    const int r = idx / kVecs, d8 = idx % kVecs;
    float mm = kNegInf;
#pragma unroll
    for (int w = 0; w < S::kWarps; ++w) mm = fmaxf(mm, sM[w * S::kRows + r]);
    float out8[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    float sum = 0.0f;
    if (mm != kNegInf) {
#pragma unroll
      for (int w = 0; w < S::kWarps; ++w) {
        const float c = Exp2(sM[w * S::kRows + r] - mm);
        sum += sL[w * S::kRows + r] * c;
        const float* src = sO + (w * S::kRows + r) * S::kOStride + d8 * 8;
#pragma unroll
        for (int e = 0; e < 8; ++e) out8[e] += src[e] * c;
      }
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) out8[e] *= inv;
    const int h = h0 + r;
    if (a.splits == 1) {
      uint32_t w4[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) w4[i] = PackBf16x2(out8[2 * i], out8[2 * i + 1]);
      *reinterpret_cast<uint4*>(a.out + b * a.o_row + h * a.o_head + d8 * 8) =
          make_uint4(w4[0], w4[1], w4[2], w4[3]);
    } else {
      const int64_t slot = (static_cast<int64_t>(b) * a.hq + h) * a.splits + split;
      float4* dst = reinterpret_cast<float4*>(a.part_o + slot * D + d8 * 8);
      dst[0] = make_float4(out8[0], out8[1], out8[2], out8[3]);
      dst[1] = make_float4(out8[4], out8[5], out8[6], out8[7]);
      if (d8 == 0) a.part_lse[slot] = sum > 0.0f ? mm + __log2f(sum) : kNegInf;
    }
  }
}

}  // namespace uniprefill::ops::cuda::paged
