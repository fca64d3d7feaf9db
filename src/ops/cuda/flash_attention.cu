// FlashAttention (cuda_attention.h): varlen causal / sliding-window attention, FlashAttention-2
// style on tensor cores (mma.sync m16n8k16 bf16 -> f32; see flash_attention_mma.cuh).
//
// One block = one (query tile of kBr rows, query head, sequence); blockIdx.y counts query tiles
// from the end so the longest causal rows start first. Each warp owns 16 * kMTiles query rows.
// The block finds, by warp-parallel binary search on the ascending k_pos, the key range visible to
// any of its queries and the range visible to all of them, and each row's own visible range
// (contiguous, since positions ascend), then walks the kBc-key tiles of the first range:
//   K, V tiles: global -> shared with 16-byte cp.async, double buffered (tile i+1 loads while tile
//               i computes; one __syncthreads per tile), rows padded by 8 bf16 so that ldmatrix
//               is conflict-free; keys past the sequence are zero-filled.
//   per kBs-key sub-tile:
//     S = Q K^T   ldmatrix A (Q, from registers or shared) and B (K), f32 accumulators.
//     mask        only sub-tiles not visible to every row (causal diagonal, window edge, sequence
//                 tail) compare each column with the row's range (masked score = -inf).
//     softmax     online, in the exp2 domain (scale * log2 e folded into one FFMA); rows that
//                 have seen no visible key keep max = -inf and are guarded so no inf - inf NaN
//                 appears; O is rescaled only when some row max of the warp moved.
//     O += P V    P re-packed from the S accumulators into bf16 A fragments in registers;
//                 V fragments by ldmatrix.trans.
// The epilogue divides by the row sums (0 for a row with no visible key: zeros out), stages the
// warp's rows in shared memory and writes 16-byte vectors, skipping rows past the sequence.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_attention.h"
#include "ops/cuda/flash_attention_mma.cuh"

namespace uniprefill::ops::cuda {
namespace {

using bf16 = __nv_bfloat16;
using flash::CpAsync16;
using flash::CpAsyncCommit;
using flash::CpAsyncWait;
using flash::Exp2;
using flash::LdMatrixX4;
using flash::LdMatrixX4Trans;
using flash::MmaBf16;
using flash::PackBf16x2;

constexpr float kNegInf = -__builtin_huge_valf();
constexpr float kLog2e = 1.4426950408889634f;

// Tile shape of one head dim. Registers per thread (f32 accumulators): O 16 * kMTiles * D / 32,
// S 16 * kMTiles * kBs / 32, plus Q fragments 16 * kMTiles * D / 64 when kQInRegs.
template <int kHeadDim, int kWarpsArg, int kMTilesArg, int kBcArg, int kBsArg, bool kQInRegsArg,
          int kMinBlocksArg>
struct TileConfig {
  static constexpr int kD = kHeadDim;
  static constexpr int kWarps = kWarpsArg;
  static constexpr int kMTiles = kMTilesArg;  // 16-row MMA tiles per warp
  static constexpr int kBc = kBcArg;          // keys per shared tile (one barrier each)
  static constexpr int kBs = kBsArg;          // keys per S sub-tile (one softmax step each)
  static constexpr bool kQInRegs = kQInRegsArg;
  static constexpr int kMinBlocks = kMinBlocksArg;  // blocks per SM the registers must allow
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kWarpRows = 16 * kMTiles;
  static constexpr int kBr = kWarps * kWarpRows;  // query rows per block
  static constexpr int kRowStride = kD + 8;       // shared row stride (bf16): 16-byte pad
  static constexpr int kChunks = kD / 8;          // 16-byte chunks per row
  static constexpr int kSTiles = kBs / 8;         // n-tiles of S
  static constexpr int kOTiles = kD / 8;          // n-tiles of O
  static constexpr int kQElems = kBr * kRowStride;
  static constexpr int kKVElems = kBc * kRowStride;
  // sQ [kBr][kRowStride], sK [2][kBc][kRowStride], sV [2][kBc][kRowStride] (bf16), then
  // sRange [kBr] (int2: each row's visible key range).
  static constexpr size_t kSmemBytes = sizeof(bf16) * (kQElems + 4 * kKVElems) + sizeof(int2) * kBr;
  static_assert(kD % 16 == 0 && kBs % 16 == 0 && kBc % kBs == 0);
  static_assert((kBr * kChunks) % kThreads == 0 && (kBc * kChunks) % kThreads == 0);
};

// The shapes below use at most 255 registers without spilling (ptxas -v, nvcc 13.0, sm_90).
// D = 64: 4 warps x 32 rows, Q kept in registers (O 64 + S 64 + Q 32 registers); 55 KB shared.
using Config64 = TileConfig<64, 4, 2, 64, 64, true, 2>;
// D = 128: 4 warps x 32 rows (FlashAttention-2's sm_80/sm_90 block shape), Q re-read from shared
// (O 128 registers); S in 32-key sub-tiles (32 registers; 64 would spill); 2 blocks per SM
// (103 KB of shared memory each).
using Config128 = TileConfig<128, 4, 2, 64, 32, false, 2>;
// D = 256: 8 warps x 16 rows, Q re-read from shared (O 128 + S 32 registers); 199 KB shared.
using Config256 = TileConfig<256, 8, 1, 64, 64, false, 1>;

struct KernelArgs {
  const bf16* q;
  const bf16* k;
  const bf16* v;
  bf16* out;
  // Row and head strides, in elements.
  int64_t q_row, q_head, k_row, k_head, v_row, v_head, o_row, o_head;
  const int32_t* q_pos;  // [Tq]
  const int32_t* k_pos;  // [Tk]
  const int32_t* cu_q;   // [batch + 1]
  const int32_t* cu_k;   // [batch + 1]
  int group;             // Hq / Hkv
  int window;            // 0: full causal
  float scale_log2;      // scale * log2(e) (> 0)
};

// Number of entries of the ascending a[0, n) that are <= key (= index of the first one > key),
// found by the whole warp: each round probes 32 evenly spaced entries, so 32K keys take 3 rounds
// of one load per lane. Must be called by all 32 lanes with the same arguments.
__device__ __forceinline__ int WarpCountLessEqual(const int32_t* a, int n, long long key,
                                                  int lane) {
  int lo = 0, hi = n;  // invariant: a[< lo] <= key, a[>= hi] > key
  while (hi - lo > 32) {
    const int step = (hi - lo + 31) / 32;
    const int p = lo + lane * step;
    const bool le = p < hi && __ldg(a + p) <= key;
    const int c = __popc(__ballot_sync(0xffffffffu, le));  // the true probes form a prefix
    if (c == 0) return lo;
    const int last = lo + (c - 1) * step;  // a[last] <= key < a[last + step] (if in range)
    hi = min(hi, last + step);
    lo = last + 1;
  }
  const int p = lo + lane;
  const bool le = p < hi && __ldg(a + p) <= key;
  return lo + __popc(__ballot_sync(0xffffffffu, le));
}

// The same count when it is known to lie in [lo, hi] (a[< lo] <= key < a[>= hi]): one thread's
// binary search.
__device__ __forceinline__ int CountLessEqualIn(const int32_t* a, int lo, int hi, long long key) {
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (__ldg(a + mid) <= key) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Issues the cp.async copies of kRows rows starting at `src` (row stride `src_row`) into the
// shared tile dst [kRows][kRowStride]; rows >= rows_valid are zero-filled. Thread tid copies
// chunk tid % kChunks of rows tid / kChunks + i * kRowStep.
template <class C, int kRows>
__device__ __forceinline__ void LoadTile(bf16* dst, const bf16* src, int64_t src_row,
                                         int rows_valid, int tid) {
  constexpr int kRowStep = C::kThreads / C::kChunks;
  static_assert(C::kThreads % C::kChunks == 0 && kRows % kRowStep == 0);
  const int r0 = tid / C::kChunks, col = (tid % C::kChunks) * 8;
  // The step goes through an empty asm so that the compiler cannot hoist one 64-bit address per
  // chunk out of the key loop (it would keep ~32 registers for them, and spill).
  int64_t step = src_row * kRowStep;
  asm volatile("" : "+l"(step));
  const bf16* p = src + r0 * src_row + col;
  bf16* d = dst + r0 * C::kRowStride + col;
#pragma unroll
  for (int i = 0; i < kRows / kRowStep; ++i) {
    const bool valid = r0 + i * kRowStep < rows_valid;
    // An invalid row reads nothing, but points at a mapped address (src) all the same.
    CpAsync16(d + i * kRowStep * C::kRowStride, valid ? p : src, valid);
    p += step;
  }
}

// One key sub-tile of kBs keys: S = Q K^T, optional mask, online softmax update of (m, l, O),
// O += P V. sQw: this warp's Q rows in shared; qf: its Q fragments when C::kQInRegs; sK, sV: the
// sub-tile's first key row in shared; sRangeW: this warp's rows' visible key ranges;
// j0: the sub-tile's first key (index within the sequence).
template <class C, bool kMask>
__device__ __forceinline__ void ProcessTile(
    float (&o)[C::kMTiles][C::kOTiles][4], float (&m)[C::kMTiles][2], float (&l)[C::kMTiles][2],
    const uint32_t (&qf)[C::kQInRegs ? C::kMTiles : 1][C::kQInRegs ? C::kD / 16 : 1][4],
    const bf16* sQw, const bf16* sK, const bf16* sV, const int2* sRangeW, int lane, int j0,
    float scale_log2) {
  // The ldmatrix row/col of this lane: A operand (and V .trans) rows (lane & 15), cols
  // (lane >> 4) * 8; K operand rows (lane & 7) + (lane >> 4) * 8, cols ((lane >> 3) & 1) * 8.
  const int a_row = lane & 15, a_col = (lane >> 4) * 8;
  const int k_row = (lane & 7) + ((lane >> 4) << 3), k_col = ((lane >> 3) & 1) * 8;

  float s[C::kMTiles][C::kSTiles][4];
#pragma unroll
  for (int mt = 0; mt < C::kMTiles; ++mt) {
#pragma unroll
    for (int n = 0; n < C::kSTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[mt][n][e] = 0.0f;
    }
  }
  // S [kWarpRows, kBs] = Q [kWarpRows, D] K^T
#pragma unroll
  for (int ks = 0; ks < C::kD / 16; ++ks) {
    uint32_t a[C::kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < C::kMTiles; ++mt) {
      if constexpr (C::kQInRegs) {
#pragma unroll
        for (int e = 0; e < 4; ++e) a[mt][e] = qf[mt][ks][e];
      } else {
        LdMatrixX4(a[mt], sQw + (mt * 16 + a_row) * C::kRowStride + ks * 16 + a_col);
      }
    }
#pragma unroll
    for (int np = 0; np < C::kSTiles / 2; ++np) {
      uint32_t b[4];  // b[0], b[1]: n-tile 2 np; b[2], b[3]: n-tile 2 np + 1
      LdMatrixX4(b, sK + (np * 16 + k_row) * C::kRowStride + ks * 16 + k_col);
#pragma unroll
      for (int mt = 0; mt < C::kMTiles; ++mt) {
        MmaBf16(s[mt][2 * np], a[mt], b[0], b[1]);
        MmaBf16(s[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }

  const int g = lane >> 2, t = lane & 3;
  if constexpr (kMask) {
    // Row r sees exactly the keys [range.x, range.y) of the sequence (ascending positions make
    // the visible set contiguous); this lane's column c = 8 n + 2 t + e is key j0 + c.
#pragma unroll
    for (int mt = 0; mt < C::kMTiles; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int2 range = sRangeW[mt * 16 + g + 8 * h];
        const int c_lo = range.x - j0 - 2 * t, c_hi = range.y - j0 - 2 * t;  // minus this lane's 2t
#pragma unroll
        for (int n = 0; n < C::kSTiles; ++n) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int c = n * 8 + e;
            if (c < c_lo || c >= c_hi) s[mt][n][2 * h + e] = kNegInf;
          }
        }
      }
    }
  }

  float alpha[C::kMTiles][2];
  bool max_changed = false;
  // Online softmax. Each lane holds rows g and g + 8 of every m-tile (h = 0, 1); the 4 lanes of a
  // quad share a row, so row maxima are reduced over the quad (xor 1, 2). Row sums l stay
  // per-lane partials until the epilogue.
#pragma unroll
  for (int mt = 0; mt < C::kMTiles; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = m[mt][h];
#pragma unroll
      for (int n = 0; n < C::kSTiles; ++n) {
        mx = fmaxf(mx, fmaxf(s[mt][n][2 * h], s[mt][n][2 * h + 1]));
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      // No visible key yet (mx = -inf): subtract 0 instead, so exp2(-inf - 0) = 0, never NaN.
      const float mx_scaled = mx == kNegInf ? 0.0f : mx * scale_log2;
      // alpha = exp2((m_old - m_new) scale log2 e): exactly 1 for an unchanged max (also when
      // both are -inf: O = 0, l = 0); 0 when the old max was -inf.
      const bool changed = mx != m[mt][h];
      alpha[mt][h] = changed ? Exp2(fmaf(m[mt][h], scale_log2, -mx_scaled)) : 1.0f;
      max_changed |= changed;
      m[mt][h] = mx;
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < C::kSTiles; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float p = Exp2(fmaf(s[mt][n][2 * h + e], scale_log2, -mx_scaled));
          s[mt][n][2 * h + e] = p;
          sum += p;
        }
      }
      l[mt][h] = l[mt][h] * alpha[mt][h] + sum;
    }
  }
  // Rescale O only when some row max of the warp moved (after the first tiles it rarely does).
  if (__any_sync(0xffffffffu, max_changed)) {
#pragma unroll
    for (int mt = 0; mt < C::kMTiles; ++mt) {
#pragma unroll
      for (int n = 0; n < C::kOTiles; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) o[mt][n][e] *= alpha[mt][e >> 1];
      }
    }
  }

  // O [kWarpRows, D] += P [kWarpRows, kBs] V [kBs, D]
#pragma unroll
  for (int kk = 0; kk < C::kBs / 16; ++kk) {
    uint32_t a[C::kMTiles][4];  // P as the A operand: keys 16 kk .. 16 kk + 15
#pragma unroll
    for (int mt = 0; mt < C::kMTiles; ++mt) {
      a[mt][0] = PackBf16x2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
      a[mt][1] = PackBf16x2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
      a[mt][2] = PackBf16x2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
      a[mt][3] = PackBf16x2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
    }
#pragma unroll
    for (int dp = 0; dp < C::kD / 16; ++dp) {
      uint32_t b[4];  // b[0], b[1]: d n-tile 2 dp; b[2], b[3]: d n-tile 2 dp + 1
      LdMatrixX4Trans(b, sV + (kk * 16 + a_row) * C::kRowStride + dp * 16 + a_col);
#pragma unroll
      for (int mt = 0; mt < C::kMTiles; ++mt) {
        MmaBf16(o[mt][2 * dp], a[mt], b[0], b[1]);
        MmaBf16(o[mt][2 * dp + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

template <class C>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
    FlashAttentionKernel(const KernelArgs args) {
  extern __shared__ uint4 smem_vec[];  // 16-byte aligned
  bf16* const sQ = reinterpret_cast<bf16*>(smem_vec);
  bf16* const sK = sQ + C::kQElems;       // 2 buffers
  bf16* const sV = sK + 2 * C::kKVElems;  // 2 buffers
  int2* const sRange = reinterpret_cast<int2*>(sV + 2 * C::kKVElems);

  const int head = blockIdx.x;
  const int q_tile = gridDim.y - 1 - blockIdx.y;
  const int seq = blockIdx.z;
  const int q_begin = args.cu_q[seq];
  const int q_len = args.cu_q[seq + 1] - q_begin;
  const int i0 = q_tile * C::kBr;  // first query row of the tile, within the sequence
  if (i0 >= q_len) return;         // uniform over the block, before any barrier
  const int k_begin = args.cu_k[seq];
  const int k_len = args.cu_k[seq + 1] - k_begin;
  const int q_rows = min(C::kBr, q_len - i0);
  const int kv_head = head / args.group;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int32_t* qpos = args.q_pos + q_begin + i0;  // this tile's query positions
  const int32_t* kpos = args.k_pos + k_begin;       // this sequence's key positions

  // Key ranges (indices within the sequence): [key_begin, key_end) is visible to some query of
  // the tile, [full_begin, full_end) to all of them. Every warp computes them (no barrier).
  const long long q_min = __ldg(qpos), q_max = __ldg(qpos + q_rows - 1);
  const int key_end = WarpCountLessEqual(kpos, k_len, q_max, lane);
  const int full_end = WarpCountLessEqual(kpos, k_len, q_min, lane);
  int key_begin = 0, full_begin = 0;
  if (args.window > 0) {
    key_begin = WarpCountLessEqual(kpos, k_len, q_min - args.window, lane);
    full_begin = WarpCountLessEqual(kpos, k_len, q_max - args.window, lane);
  }
  const int tile_begin = key_begin / C::kBc;
  const int n_tiles = key_end > key_begin ? (key_end + C::kBc - 1) / C::kBc - tile_begin : 0;

  const bf16* q_src = args.q + (q_begin + i0) * args.q_row + head * args.q_head;
  const bf16* k_src = args.k + k_begin * args.k_row + kv_head * args.k_head;
  const bf16* v_src = args.v + k_begin * args.v_row + kv_head * args.v_head;
  auto load_kv = [&](int buf, int j0) {
    const int valid = max(0, min(C::kBc, k_len - j0));
    LoadTile<C, C::kBc>(sK + buf * C::kKVElems, k_src + j0 * args.k_row, args.k_row, valid, tid);
    LoadTile<C, C::kBc>(sV + buf * C::kKVElems, v_src + j0 * args.v_row, args.v_row, valid, tid);
  };

  // Prologue: Q (group 1), then key tile 0 (group 2; an empty group when there is none).
  LoadTile<C, C::kBr>(sQ, q_src, args.q_row, q_rows, tid);
  CpAsyncCommit();
  if (n_tiles > 0) load_kv(0, tile_begin * C::kBc);
  CpAsyncCommit();

  // Each row's own visible key range [x, y) for the masked tiles: thread r searches for row r
  // within the bounds above (~log2(kBr) steps for dense positions; the loads overlap the copies
  // in flight); rows past the sequence see nothing. The key loop's first barrier publishes them.
  for (int r = tid; r < C::kBr; r += C::kThreads) {
    int2 range = make_int2(0, 0);
    if (r < q_rows) {
      const long long qp = __ldg(qpos + r);
      range.y = CountLessEqualIn(kpos, full_end, key_end, qp);
      if (args.window > 0) {
        range.x = CountLessEqualIn(kpos, key_begin, full_begin, qp - args.window);
      }
    }
    sRange[r] = range;
  }

  const bf16* const sQw = sQ + warp * C::kWarpRows * C::kRowStride;  // this warp's rows
  uint32_t qf[C::kQInRegs ? C::kMTiles : 1][C::kQInRegs ? C::kD / 16 : 1][4];
  if constexpr (C::kQInRegs) {
    CpAsyncWait<1>();  // Q landed (tile 0 may still be in flight)
    __syncthreads();
#pragma unroll
    for (int mt = 0; mt < C::kMTiles; ++mt) {
#pragma unroll
      for (int ks = 0; ks < C::kD / 16; ++ks) {
        LdMatrixX4(qf[mt][ks],
                   sQw + (mt * 16 + (lane & 15)) * C::kRowStride + ks * 16 + (lane >> 4) * 8);
      }
    }
  }

  float o[C::kMTiles][C::kOTiles][4];
  float m[C::kMTiles][2], l[C::kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < C::kMTiles; ++mt) {
#pragma unroll
    for (int n = 0; n < C::kOTiles; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][n][e] = 0.0f;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      m[mt][h] = kNegInf;
      l[mt][h] = 0.0f;
    }
  }

  const int2* const sRangeW = sRange + warp * C::kWarpRows;
  for (int it = 0; it < n_tiles; ++it) {
    // Tile `it` has landed for this thread; the barrier makes every thread's copies visible and
    // ends every warp's reads of tile it - 1, whose buffer the next load overwrites.
    CpAsyncWait<0>();
    __syncthreads();
    if (it + 1 < n_tiles) load_kv((it + 1) & 1, (tile_begin + it + 1) * C::kBc);
    CpAsyncCommit();
    // Not unrolled: two inlined copies of both ProcessTile variants would spill (D = 128).
#pragma unroll 1
    for (int sub = 0; sub < C::kBc / C::kBs; ++sub) {
      const int j0 = (tile_begin + it) * C::kBc + sub * C::kBs;
      if (j0 >= key_end || j0 + C::kBs <= key_begin) continue;  // visible to no row
      const bf16* sKs = sK + (it & 1) * C::kKVElems + sub * C::kBs * C::kRowStride;
      const bf16* sVs = sV + (it & 1) * C::kKVElems + sub * C::kBs * C::kRowStride;
      if (j0 >= full_begin && j0 + C::kBs <= full_end) {  // visible to every row: no mask
        ProcessTile<C, false>(o, m, l, qf, sQw, sKs, sVs, sRangeW, lane, j0, args.scale_log2);
      } else {
        ProcessTile<C, true>(o, m, l, qf, sQw, sKs, sVs, sRangeW, lane, j0, args.scale_log2);
      }
    }
  }

  // Epilogue. Wait for every copy (with no key tile, Q copies may still be landing in rows of
  // other warps) before this warp's Q rows are reused to stage its output.
  CpAsyncWait<0>();
  __syncthreads();
  bf16* const sOw = sQ + warp * C::kWarpRows * C::kRowStride;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mt = 0; mt < C::kMTiles; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float sum = l[mt][h];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // no visible key: zeros
      bf16* row = sOw + (mt * 16 + g + 8 * h) * C::kRowStride + 2 * t;
#pragma unroll
      for (int n = 0; n < C::kOTiles; ++n) {
        *reinterpret_cast<uint32_t*>(row + n * 8) =
            PackBf16x2(o[mt][n][2 * h] * inv, o[mt][n][2 * h + 1] * inv);
      }
    }
  }
  __syncwarp();
  // This warp's rows in the sequence (<= 0: none).
  const int q_rows_w = q_rows - warp * C::kWarpRows;
  bf16* const out =
      args.out + (q_begin + i0 + warp * C::kWarpRows) * args.o_row + head * args.o_head;
#pragma unroll
  for (int i = 0; i < C::kWarpRows * C::kChunks / 32; ++i) {
    const int c = lane + i * 32;
    const int r = c / C::kChunks, col = (c % C::kChunks) * 8;
    if (r < q_rows_w) {
      *reinterpret_cast<uint4*>(out + r * args.o_row + col) =
          *reinterpret_cast<const uint4*>(sOw + r * C::kRowStride + col);
    }
  }
}

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "FlashAttention: %s\n", what);
  std::abort();
}

// Checks a bf16 [T, H, D] device view: dtype, device, rank, contiguous last dim, and the 16-byte
// alignment of its data and strides that cp.async and the vector stores need.
void CheckView(const TensorView& t, const char* name) {
  char msg[256];
  if (t.dtype != DType::kBF16 || t.device != Device::kCuda || t.ndim != 3 || t.stride[2] != 1) {
    std::snprintf(msg, sizeof(msg),
                  "%s must be a bf16 [T, H, D] CUDA view with a contiguous last dim (got %s, "
                  "device %d, last stride %lld)",
                  name, t.ShapeString().c_str(), static_cast<int>(t.device),
                  static_cast<long long>(t.stride[2]));
    Fail(msg);
  }
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0 || t.stride[0] % 8 != 0 ||
      t.stride[1] % 8 != 0) {
    std::snprintf(msg, sizeof(msg),
                  "%s needs 16-byte aligned data and row/head strides that are multiples of 8 "
                  "elements (got %p, strides %lld, %lld)",
                  name, t.data, static_cast<long long>(t.stride[0]),
                  static_cast<long long>(t.stride[1]));
    Fail(msg);
  }
}

template <class C>
void Launch(const KernelArgs& args, int hq, const VarlenBatch& batch, cudaStream_t stream) {
  const int q_tiles = (batch.max_seqlen_q + C::kBr - 1) / C::kBr;
  if (q_tiles > 65535 || batch.batch > 65535) Fail("max_seqlen_q / kBr or batch exceeds 65535");
  UP_CUDA_CHECK(cudaFuncSetAttribute(FlashAttentionKernel<C>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(C::kSmemBytes)));
  const dim3 grid(hq, q_tiles, batch.batch);
  FlashAttentionKernel<C><<<grid, C::kThreads, C::kSmemBytes, stream>>>(args);
  UP_CUDA_CHECK_LAUNCH();
}

}  // namespace

void FlashAttention(DeviceContext& ctx, TensorView out, TensorView q, TensorView k, TensorView v,
                    const int32_t* q_pos, const int32_t* k_pos, const VarlenBatch& batch,
                    const AttentionParams& params) {
  CheckView(out, "out");
  CheckView(q, "q");
  CheckView(k, "k");
  CheckView(v, "v");
  const int64_t hq = q.dim(1), hkv = k.dim(1), d = q.dim(2);
  char msg[256];
  if (k.dim(2) != d || v.dim(2) != d || out.dim(2) != d || v.dim(1) != hkv || out.dim(1) != hq ||
      v.dim(0) != k.dim(0) || out.dim(0) != q.dim(0) || hkv <= 0 || hq % hkv != 0) {
    std::snprintf(msg, sizeof(msg),
                  "shapes do not agree: q %s, k %s, v %s, out %s (want q, out [Tq, Hq, D], k, v "
                  "[Tk, Hkv, D], Hq a multiple of Hkv)",
                  q.ShapeString().c_str(), k.ShapeString().c_str(), v.ShapeString().c_str(),
                  out.ShapeString().c_str());
    Fail(msg);
  }
  if (!(params.scale > 0.0f) || params.window < 0) {
    std::snprintf(msg, sizeof(msg), "needs scale > 0 and window >= 0 (got %g, %d)", params.scale,
                  params.window);
    Fail(msg);
  }
  if (batch.batch <= 0 || batch.max_seqlen_q <= 0 || hq == 0) return;

  KernelArgs args;
  args.q = q.as<const bf16>();
  args.k = k.as<const bf16>();
  args.v = v.as<const bf16>();
  args.out = out.as<bf16>();
  args.q_row = q.stride[0];
  args.q_head = q.stride[1];
  args.k_row = k.stride[0];
  args.k_head = k.stride[1];
  args.v_row = v.stride[0];
  args.v_head = v.stride[1];
  args.o_row = out.stride[0];
  args.o_head = out.stride[1];
  args.q_pos = q_pos;
  args.k_pos = k_pos;
  args.cu_q = batch.cu_seqlens_q;
  args.cu_k = batch.cu_seqlens_k;
  args.group = static_cast<int>(hq / hkv);
  args.window = params.window;
  args.scale_log2 = params.scale * kLog2e;

  cudaStream_t stream = ctx.cuda().stream();
  switch (d) {
    case 64:
      Launch<Config64>(args, static_cast<int>(hq), batch, stream);
      break;
    case 128:
      Launch<Config128>(args, static_cast<int>(hq), batch, stream);
      break;
    case 256:
      Launch<Config256>(args, static_cast<int>(hq), batch, stream);
      break;
    default:
      std::snprintf(msg, sizeof(msg), "head dim %lld is not supported (64, 128 or 256)",
                    static_cast<long long>(d));
      Fail(msg);
  }
}

}  // namespace uniprefill::ops::cuda
