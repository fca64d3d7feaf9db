// MoeForward (cuda_moe.h): routing, grouping, a grouped bf16 GEMM kernel reading device offsets,
// and the weighted combine with the shared expert. No host synchronisation.
//
// Grouped GEMM kernel: C[r, n] = sum_k A[row(r), k] * B_g[n, k] for every row r of group g
// (rows offsets[g] .. offsets[g+1]), B_g = B + g * b_group_stride (row-major [N, K], i.e. the
// "col" operand of mma.m16n8k16), A rows optionally gathered through an index array. Tiles of
// 128 x 256 x 64, 8 warps of 64 x 64 (32 MMAs per 8 ldmatrix.x4), 3-stage cp.async pipeline into
// padded shared rows (72 bf16 = 144 bytes: ldmatrix is conflict-free), one block of 162 KiB per
// SM, f32 accumulators, f32 or bf16 output with bounds checks (any N; K a multiple of 8, tails
// zero-filled). (The first version, 128 x 128 x 32 tiles of 8 warps of 64 x 32, 4 stages, two
// blocks per SM, ran the Qwen3-Next layer at 215 TFLOP/s.)
// The m tiles of all groups form one list (tile_offsets, a prefix sum of ceil(rows_g / 128));
// the launch covers an upper bound of it (ceil(P / 128) + min(E, P)) and a block past the real
// end exits, so the host never learns the counts.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cub/block/block_scan.cuh>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_dense_ops.h"
#include "ops/cuda/cuda_moe.h"
#include "ops/cuda/flash_attention_mma.cuh"
#include "ops/cuda/grouped_gemm.h"
#include "ops/cuda/grouped_gemm_common.cuh"
#include "ops/cuda/sm90/grouped_gemm_wgmma.h"

namespace uniprefill::ops::cuda {
namespace {

using bf16 = __nv_bfloat16;
namespace fl = ::uniprefill::ops::cuda::flash;

constexpr int kBM = kGroupedGemmTileRows, kBN = 256, kBK = 64, kStages = 3;
constexpr int kRowPad = kBK + 8;  // shared row length in bf16 (144 bytes: ldmatrix conflict-free)
constexpr int kGemmThreads = 256;
constexpr int kWarpsM = 2, kWarpsN = 4;  // warp tile 64 x 64
constexpr int kMi = 4, kNi = 8;          // m16 and n8 tiles per warp
static_assert(kWarpsM * 16 * kMi == kBM && kWarpsN * 8 * kNi == kBN);
static_assert(kWarpsM * kWarpsN * 32 == kGemmThreads);
constexpr int kChunksPerRow = kBK / 8;                      // 16-byte chunks per tile row
constexpr int kRowsPerPass = kGemmThreads / kChunksPerRow;  // tile rows one pass of loads covers
constexpr int kAPasses = kBM / kRowsPerPass, kBPasses = kBN / kRowsPerPass;
static_assert(kGemmThreads % kChunksPerRow == 0 && kBM % kRowsPerPass == 0);
constexpr size_t kGemmSmem = sizeof(bf16) * kStages * (kBM + kBN) * kRowPad;  // 162 KiB
constexpr int kMaxTopK = 32;

using GemmArgs = GroupedGemmArgs;

template <typename OutT>
__global__ void __launch_bounds__(kGemmThreads, 1) GroupedGemmKernel(GemmArgs args, int n_tiles) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* smem_a = reinterpret_cast<bf16*>(smem_raw);  // [kStages][kBM][kRowPad]
  bf16* smem_b = smem_a + kStages * kBM * kRowPad;   // [kStages][kBN][kRowPad]

  const int64_t block = blockIdx.x;
  const int n_tile = static_cast<int>(block % n_tiles);
  const int m_tile = static_cast<int>(block / n_tiles);

  GroupTile tile;
  if (!FindGroupTile(args, m_tile, kBM, &tile)) return;
  const int group = tile.group, row_begin = tile.row_begin, rows = tile.rows;
  const int tile_in_group = tile.tile_in_group;
  const int m0 = tile_in_group * kBM;  // first local row of this tile
  const int n0 = n_tile * kBN;
  const bf16* b_base = args.b + group * args.b_group_stride;

  const int tid = threadIdx.x;
  // This thread's 16-byte chunks of the operand tiles: rows chunk_row + kRowsPerPass * i, column
  // chunk_col (the same in every pass).
  const int chunk_row = tid / kChunksPerRow, chunk_col = (tid % kChunksPerRow) * 8;
  const bf16* a_src[kAPasses];
  bool a_ok[kAPasses];
#pragma unroll
  for (int i = 0; i < kAPasses; ++i) {
    const int local = m0 + chunk_row + kRowsPerPass * i;
    a_ok[i] = local < rows;
    int64_t a_row = 0;
    if (a_ok[i]) {
      const int r = row_begin + local;
      a_row = args.a_rows ? args.a_rows[r] : r;
    }
    a_src[i] = args.a + a_row * args.lda + chunk_col;
  }
  const bf16* b_src = b_base + static_cast<int64_t>(n0 + chunk_row) * args.ldb + chunk_col;
  const int64_t b_pass_stride = static_cast<int64_t>(kRowsPerPass) * args.ldb;
  const int k_tiles = (args.k + kBK - 1) / kBK;
  auto load_tile = [&](int kt, int stage) {
    const int k0 = kt * kBK;
    const bool k_ok = k0 + chunk_col < args.k;
    bf16* sa = smem_a + stage * kBM * kRowPad + chunk_row * kRowPad + chunk_col;
    bf16* sb = smem_b + stage * kBN * kRowPad + chunk_row * kRowPad + chunk_col;
#pragma unroll
    for (int i = 0; i < kAPasses; ++i) {
      const bool va = a_ok[i] && k_ok;
      fl::CpAsync16(sa + i * kRowsPerPass * kRowPad, va ? a_src[i] + k0 : args.a, va);
    }
#pragma unroll
    for (int i = 0; i < kBPasses; ++i) {
      const bool vb = k_ok && n0 + chunk_row + kRowsPerPass * i < args.n;
      fl::CpAsync16(sb + i * kRowsPerPass * kRowPad, vb ? b_src + i * b_pass_stride + k0 : args.b,
                    vb);
    }
  };

  const int warp = tid >> 5, lane = tid & 31;
  const int warp_m = warp / kWarpsN, warp_n = warp % kWarpsN;
  float acc[kMi][kNi][4];
#pragma unroll
  for (int i = 0; i < kMi; ++i)
#pragma unroll
    for (int j = 0; j < kNi; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_tile(s, s);
    fl::CpAsyncCommit();
  }
  // ldmatrix row addresses (see flash_attention_mma.cuh for the fragment layouts).
  const int a_ld_row = warp_m * (16 * kMi) + (lane & 15);
  const int a_ld_col = (lane >> 4) * 8;
  const int b_ld_row = warp_n * (8 * kNi) + (lane & 7) + ((lane >> 4) << 3);
  const int b_ld_col = ((lane >> 3) & 1) * 8;

  for (int kt = 0; kt < k_tiles; ++kt) {
    fl::CpAsyncWait<kStages - 2>();
    __syncthreads();
    const int next = kt + kStages - 1;
    if (next < k_tiles) load_tile(next, next % kStages);
    fl::CpAsyncCommit();
    const bf16* sa = smem_a + (kt % kStages) * kBM * kRowPad;
    const bf16* sb = smem_b + (kt % kStages) * kBN * kRowPad;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      uint32_t af[kMi][4], bfr[kNi / 2][4];
#pragma unroll
      for (int i = 0; i < kMi; ++i) {
        fl::LdMatrixX4(af[i], sa + (a_ld_row + i * 16) * kRowPad + kk + a_ld_col);
      }
#pragma unroll
      for (int j = 0; j < kNi / 2; ++j) {
        fl::LdMatrixX4(bfr[j], sb + (b_ld_row + j * 16) * kRowPad + kk + b_ld_col);
      }
#pragma unroll
      for (int i = 0; i < kMi; ++i) {
#pragma unroll
        for (int j = 0; j < kNi; ++j) {
          fl::MmaBf16(acc[i][j], af[i], bfr[j / 2][(j & 1) * 2], bfr[j / 2][(j & 1) * 2 + 1]);
        }
      }
    }
  }
  fl::CpAsyncWait<0>();

  // Epilogue: straight from the accumulators (c0, c1: row g; c2, c3: row g + 8; cols 2t, 2t+1).
  OutT* c = static_cast<OutT*>(args.c);
  const int g = lane >> 2, t4 = lane & 3;
  // Columns are even, so pairs are aligned when rows are (an even ldc and an aligned base).
  const bool paired =
      (args.ldc % 2 == 0) && (reinterpret_cast<uintptr_t>(c) % (2 * sizeof(OutT)) == 0);
#pragma unroll
  for (int i = 0; i < kMi; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int local = m0 + warp_m * (16 * kMi) + i * 16 + g + h * 8;
      if (local >= rows) continue;
      OutT* crow = c + static_cast<int64_t>(row_begin + local) * args.ldc;
#pragma unroll
      for (int j = 0; j < kNi; ++j) {
        const int col = n0 + warp_n * (8 * kNi) + j * 8 + 2 * t4;
        if (col >= args.n) continue;
        StorePair<OutT>(crow + col, acc[i][j][2 * h], acc[i][j][2 * h + 1], col + 1 < args.n,
                        paired);
      }
    }
  }
}

// wgmma: the sm_90a kernel (sm90/grouped_gemm_wgmma.h) instead of the mma.sync one.
template <typename OutT>
void LaunchGroupedGemm(const GemmArgs& args, int64_t m_tiles_bound, cudaStream_t stream,
                       bool wgmma) {
  if (wgmma) {
    LaunchGroupedGemmWgmma<OutT>(args, m_tiles_bound, stream);
    return;
  }
  assert(args.k % 8 == 0 && args.lda % 8 == 0 && args.ldb % 8 == 0);
  assert(reinterpret_cast<uintptr_t>(args.a) % 16 == 0);
  assert(reinterpret_cast<uintptr_t>(args.b) % 16 == 0);
  if (m_tiles_bound == 0 || args.n == 0) return;
  static bool configured = [] {
    UP_CUDA_CHECK(cudaFuncSetAttribute(GroupedGemmKernel<OutT>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(kGemmSmem)));
    return true;
  }();
  (void)configured;
  const int n_tiles = (args.n + kBN - 1) / kBN;
  const int64_t blocks = m_tiles_bound * n_tiles;
  assert(blocks <= INT32_MAX);
  GroupedGemmKernel<OutT>
      <<<static_cast<unsigned>(blocks), kGemmThreads, kGemmSmem, stream>>>(args, n_tiles);
  UP_CUDA_CHECK_LAUNCH();
}

// ---- routing ----

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

constexpr int kRouteWarps = 4;

// One warp per row: softmax over E (f32), top-k (ties: lower index), choices in ascending expert
// index with their (renormalised) weights; counts[e - first] += 1 per choice of a local expert
// (e in [first, first + n_local)): a shard's routing is the whole model's.
__global__ void RouteKernel(const float* __restrict__ logits, int64_t t_rows, int n_experts,
                            int first, int n_local, int top_k, bool norm,
                            int32_t* __restrict__ choice_expert,
                            float* __restrict__ choice_weight, int32_t* __restrict__ counts) {
  extern __shared__ float route_smem[];  // [kRouteWarps][E]
  __shared__ int sel_idx[kRouteWarps][kMaxTopK];
  __shared__ float sel_p[kRouteWarps][kMaxTopK];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRouteWarps + warp;
  if (t >= t_rows) return;
  float* p = route_smem + warp * n_experts;
  const float* l = logits + t * n_experts;
  float mx = -INFINITY;
  for (int e = lane; e < n_experts; e += 32) mx = fmaxf(mx, l[e]);
  mx = WarpMax(mx);
  float sum = 0.0f;
  for (int e = lane; e < n_experts; e += 32) {
    const float v = expf(l[e] - mx);
    p[e] = v;
    sum += v;
  }
  sum = WarpSum(sum);
  for (int e = lane; e < n_experts; e += 32) p[e] = p[e] / sum;
  __syncwarp();
  for (int j = 0; j < top_k; ++j) {
    float best = -1.0f;
    int best_i = n_experts;
    for (int e = lane; e < n_experts; e += 32) {
      const float v = p[e];
      if (v > best) {  // ascending e per lane: '>' keeps the lower index on ties
        best = v;
        best_i = e;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, best, o);
      const int oi = __shfl_xor_sync(0xffffffffu, best_i, o);
      if (ov > best || (ov == best && oi < best_i)) {
        best = ov;
        best_i = oi;
      }
    }
    if (lane == 0) {
      sel_idx[warp][j] = best_i;
      sel_p[warp][j] = best;
      p[best_i] = -2.0f;  // taken
    }
    __syncwarp();
  }
  if (lane == 0) {
    int* idx = sel_idx[warp];
    float* pv = sel_p[warp];
    for (int a = 1; a < top_k; ++a) {  // insertion sort by expert index
      const int ki = idx[a];
      const float kp = pv[a];
      int b = a - 1;
      while (b >= 0 && idx[b] > ki) {
        idx[b + 1] = idx[b];
        pv[b + 1] = pv[b];
        --b;
      }
      idx[b + 1] = ki;
      pv[b + 1] = kp;
    }
    float top_sum = 0.0f;
    for (int j = 0; j < top_k; ++j) top_sum += pv[j];
    for (int j = 0; j < top_k; ++j) {
      choice_expert[t * top_k + j] = idx[j];
      choice_weight[t * top_k + j] = norm ? pv[j] / top_sum : pv[j];
      const int local = idx[j] - first;
      if (local >= 0 && local < n_local) atomicAdd(&counts[local], 1);
    }
  }
}

constexpr int kScanThreads = 256;

// offsets[e] = sum of counts[< e] (E + 1 entries), tile_offsets likewise over ceil(count / kBM);
// fill[e] = 0.
__global__ void __launch_bounds__(kScanThreads)
    ScanKernel(const int32_t* __restrict__ counts, int n_experts, int32_t* __restrict__ offsets,
               int32_t* __restrict__ tile_offsets, int32_t* __restrict__ fill) {
  using Scan = cub::BlockScan<int2, kScanThreads>;
  __shared__ typename Scan::TempStorage temp;
  __shared__ int2 carry;
  if (threadIdx.x == 0) carry = make_int2(0, 0);
  __syncthreads();
  for (int base = 0; base < n_experts; base += kScanThreads) {
    const int e = base + threadIdx.x;
    const int cnt = e < n_experts ? counts[e] : 0;
    int2 v = make_int2(cnt, (cnt + kBM - 1) / kBM), excl, total;
    Scan(temp).ExclusiveScan(
        v, excl, make_int2(0, 0), [](int2 a, int2 b) { return make_int2(a.x + b.x, a.y + b.y); },
        total);
    const int2 c0 = carry;
    if (e < n_experts) {
      offsets[e] = c0.x + excl.x;
      tile_offsets[e] = c0.y + excl.y;
      fill[e] = 0;
    }
    __syncthreads();
    if (threadIdx.x == 0) carry = make_int2(c0.x + total.x, c0.y + total.y);
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    offsets[n_experts] = carry.x;
    tile_offsets[n_experts] = carry.y;
  }
}

// Every (row, choice) of a local expert gets a slot in its expert's range: slot_row[slot] = row,
// choice_slot[row * k + j] = slot; a choice of another rank's expert gets slot -1 (no GEMM row).
__global__ void ScatterKernel(const int32_t* __restrict__ choice_expert, int64_t n_choices,
                              int top_k, int first, int n_local,
                              const int32_t* __restrict__ offsets, int32_t* __restrict__ fill,
                              int32_t* __restrict__ slot_row, int32_t* __restrict__ choice_slot) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_choices) return;
  const int e = choice_expert[i] - first;
  if (e < 0 || e >= n_local) {
    choice_slot[i] = -1;
    return;
  }
  const int slot = offsets[e] + atomicAdd(&fill[e], 1);
  slot_row[slot] = static_cast<int32_t>(i / top_k);
  choice_slot[i] = slot;
}

constexpr int kCombineThreads = 256;

// One block per row: out[t] = sum_j w_j y[slot_j] (ascending expert; choices without a slot,
// another rank's experts, add nothing) + sigmoid(x . gate) * ys[t].
// kVec: 8 columns per thread and 16-byte loads and stores (y, ys and out rows 16-byte aligned,
// hidden a multiple of 8); each column's sum runs in the same order either way. Measured on the
// H200 at 128K rows x 2048 (top 10): scalar 2-byte loads took 3.7 ms, about half of HBM's pace.
template <bool kVec>
__global__ void CombineKernel(bf16* __restrict__ out, int64_t ld_out, const bf16* __restrict__ x,
                              int64_t ld_x, const bf16* __restrict__ shared_gate,
                              const bf16* __restrict__ y, const bf16* __restrict__ ys, int hidden,
                              int top_k, const int32_t* __restrict__ choice_slot,
                              const float* __restrict__ choice_weight) {
  const int64_t t = blockIdx.x;
  __shared__ float partial[kCombineThreads / 32];
  __shared__ int slots[kMaxTopK];
  __shared__ float weights[kMaxTopK];
  const bf16* xr = x + t * ld_x;
  float dot = 0.0f;
  for (int d = threadIdx.x; d < hidden; d += kCombineThreads) {
    dot += __bfloat162float(xr[d]) * __bfloat162float(shared_gate[d]);
  }
  dot = WarpSum(dot);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = dot;
  if (threadIdx.x < top_k) {
    slots[threadIdx.x] = choice_slot[t * top_k + threadIdx.x];
    weights[threadIdx.x] = choice_weight[t * top_k + threadIdx.x];
  }
  __syncthreads();
  float g = 0.0f;
#pragma unroll
  for (int w = 0; w < kCombineThreads / 32; ++w) g += partial[w];
  const float s = 1.0f / (1.0f + expf(-g));
  const bf16* ysr = ys + t * hidden;
  bf16* o = out + t * ld_out;
  if constexpr (kVec) {
    for (int d = 8 * threadIdx.x; d < hidden; d += 8 * kCombineThreads) {
      float acc[8] = {};
#pragma unroll 4
      for (int j = 0; j < top_k; ++j) {
        if (slots[j] < 0) continue;
        const uint4 raw = *reinterpret_cast<const uint4*>(y + int64_t{slots[j]} * hidden + d);
        const __nv_bfloat162* v = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float2 f = __bfloat1622float2(v[e]);
          acc[2 * e] += weights[j] * f.x;
          acc[2 * e + 1] += weights[j] * f.y;
        }
      }
      const uint4 raw = *reinterpret_cast<const uint4*>(ysr + d);
      const __nv_bfloat162* v = reinterpret_cast<const __nv_bfloat162*>(&raw);
      uint4 packed;
      __nv_bfloat162* p = reinterpret_cast<__nv_bfloat162*>(&packed);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 f = __bfloat1622float2(v[e]);
        p[e] = __floats2bfloat162_rn(acc[2 * e] + s * f.x, acc[2 * e + 1] + s * f.y);
      }
      *reinterpret_cast<uint4*>(o + d) = packed;
    }
  } else {
    for (int d = threadIdx.x; d < hidden; d += kCombineThreads) {
      float acc = 0.0f;
      for (int j = 0; j < top_k; ++j) {
        if (slots[j] < 0) continue;
        acc += weights[j] * __bfloat162float(y[static_cast<int64_t>(slots[j]) * hidden + d]);
      }
      acc += s * __bfloat162float(ysr[d]);
      o[d] = __float2bfloat16_rn(acc);
    }
  }
}

// ---- scratch layout ----

// e: the experts held here (E_local: the GEMMs' groups); e_all: the router's (E: routing).
struct Dims {
  int64_t t = 0, h = 0, e = 0, e_all = 0, first = 0, inter = 0, shared_inter = 0;
  int k = 0;
};

Dims DimsOf(int64_t rows, const MoeDeviceWeights& w) {
  Dims d;
  d.t = rows;
  d.e = w.local_experts();
  d.e_all = w.n_experts();
  d.first = w.first_expert;
  d.h = w.router.dim(1);
  d.inter = w.expert_gate_up.dim(1) / 2;
  d.shared_inter = w.shared_gate_up.dim(0) / 2;
  d.k = w.top_k;
  return d;
}

struct Layout {
  size_t logits = 0, choice_expert = 0, choice_weight = 0, counts = 0, offsets = 0,
         tile_offsets = 0, fill = 0, slot_row = 0, choice_slot = 0, gu = 0, y = 0, shared_gu = 0,
         shared_y = 0, group_ptrs = 0, total = 0;
};

Layout LayoutOf(const Dims& d) {
  Layout l;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t here = at;
    at += (bytes + 255) / 256 * 256;
    return here;
  };
  const size_t p = static_cast<size_t>(d.t) * d.k;
  l.logits = take(4 * d.t * d.e_all);
  l.choice_expert = take(4 * p);
  l.choice_weight = take(4 * p);
  l.counts = take(4 * d.e);
  l.offsets = take(4 * (d.e + 1));
  l.tile_offsets = take(4 * (d.e + 1));
  l.fill = take(4 * d.e);
  l.slot_row = take(4 * p);
  l.choice_slot = take(4 * p);
  l.gu = take(2 * p * 2 * d.inter);
  l.y = take(2 * p * d.h);
  l.shared_gu = take(2 * d.t * 2 * d.shared_inter);
  l.shared_y = take(2 * d.t * d.h);
  l.group_ptrs = take(2 * GroupedGemmScratchBytes(d.e));  // two calls' pointer arrays
  l.total = at;
  return l;
}

TensorView Rows2D(void* data, int64_t rows, int64_t cols, int64_t stride) {
  TensorView v = TensorView::Contiguous(data, DType::kBF16, {rows, cols}, Device::kCuda);
  v.stride[0] = stride;
  return v;
}

}  // namespace

size_t MoeScratchBytes(int64_t max_rows, const MoeDeviceWeights& w) {
  return LayoutOf(DimsOf(max_rows, w)).total;
}

// Steps 4-7 on our grouped kernel (MoeGemm::kOurs).
static void OurExperts(DeviceContext& ctx, TensorView x, const MoeDeviceWeights& w,
                       const Dims& d, const int32_t* offsets, const int32_t* tile_offsets,
                       const int32_t* slot_row, bf16* gu, bf16* y, bf16* shared_gu,
                       bf16* shared_y, bool wgmma) {
  const int64_t T = d.t, H = d.h, E = d.e, I = d.inter, Is = d.shared_inter, P = T * d.k;
  cudaStream_t stream = ctx.cuda().stream();
  // 4-6. Experts: gate/up (gathering x rows), SiLU * up, down. The wgmma kernel applies SiLU * up
  // in its epilogue (gated_half), so the gate/up rows never reach memory: gu holds [P, I] then.
  const int64_t m_tiles_bound = (P + kBM - 1) / kBM + std::min<int64_t>(E, P);
  {
    GemmArgs a;
    a.a = static_cast<const bf16*>(x.data);
    a.lda = x.stride[0];
    a.a_rows = slot_row;
    a.b = static_cast<const bf16*>(w.expert_gate_up.data);
    a.ldb = H;
    a.b_group_stride = 2 * I * H;
    a.c = gu;
    a.ldc = wgmma ? I : 2 * I;
    a.n = static_cast<int>(wgmma ? I : 2 * I);
    a.gated_half = wgmma ? static_cast<int>(I) : 0;
    a.k = static_cast<int>(H);
    a.offsets = offsets;
    a.tile_offsets = tile_offsets;
    a.groups = static_cast<int>(E);
    LaunchGroupedGemm<bf16>(a, m_tiles_bound, stream, wgmma);
  }
  if (!wgmma) {
    TensorView gate = Rows2D(gu, P, I, 2 * I), up = Rows2D(gu + I, P, I, 2 * I);
    ops::cuda::GatedActivation(ctx, gate, gate, up, Activation::kSilu);
  }
  {
    GemmArgs a;
    a.a = gu;
    a.lda = wgmma ? I : 2 * I;
    a.b = static_cast<const bf16*>(w.expert_down.data);
    a.ldb = I;
    a.b_group_stride = H * I;
    a.c = y;
    a.ldc = H;
    a.n = static_cast<int>(H);
    a.k = static_cast<int>(I);
    a.offsets = offsets;
    a.tile_offsets = tile_offsets;
    a.groups = static_cast<int>(E);
    LaunchGroupedGemm<bf16>(a, m_tiles_bound, stream, wgmma);
  }

  // 7. Shared expert (the same kernel, one group: a row's result never depends on the batch,
  // which cuBLASLt's per-shape algorithm choice would not promise).
  {
    GemmArgs a;
    a.a = static_cast<const bf16*>(x.data);
    a.lda = x.stride[0];
    a.b = static_cast<const bf16*>(w.shared_gate_up.data);
    a.ldb = w.shared_gate_up.stride[0];
    a.c = shared_gu;
    a.ldc = wgmma ? Is : 2 * Is;
    a.n = static_cast<int>(wgmma ? Is : 2 * Is);
    a.gated_half = wgmma ? static_cast<int>(Is) : 0;
    a.k = static_cast<int>(H);
    a.m = static_cast<int>(T);
    LaunchGroupedGemm<bf16>(a, (T + kBM - 1) / kBM, stream, wgmma);
  }
  if (!wgmma) {
    TensorView sgate = Rows2D(shared_gu, T, Is, 2 * Is);
    TensorView sup = Rows2D(shared_gu + Is, T, Is, 2 * Is);
    ops::cuda::GatedActivation(ctx, sgate, sgate, sup, Activation::kSilu);
  }
  {
    GemmArgs a;
    a.a = shared_gu;
    a.lda = wgmma ? Is : 2 * Is;
    a.b = static_cast<const bf16*>(w.shared_down.data);
    a.ldb = w.shared_down.stride[0];
    a.c = shared_y;
    a.ldc = H;
    a.n = static_cast<int>(H);
    a.k = static_cast<int>(Is);
    a.m = static_cast<int>(T);
    LaunchGroupedGemm<bf16>(a, (T + kBM - 1) / kBM, stream, wgmma);
  }
}

// Steps 4-7 on the libraries (MoeGemm::kLibrary): the experts' row ranges learnt by one host
// sync, x gathered into them (into y, which the down GEMM overwrites afterwards), cuBLAS's grouped
// GEMMs, and cuBLASLt for the shared expert.
static void LibraryExperts(DeviceContext& ctx, TensorView x, const MoeDeviceWeights& w,
                           const Dims& d, const int32_t* offsets, const int32_t* slot_row,
                           bf16* gu, bf16* y, bf16* shared_gu, bf16* shared_y,
                           void* group_ptrs) {
  const int64_t T = d.t, H = d.h, E = d.e, I = d.inter, Is = d.shared_inter, P = T * d.k;
  cudaStream_t stream = ctx.cuda().stream();
  std::vector<int32_t> off(E + 1);
  UP_CUDA_CHECK(cudaMemcpyAsync(off.data(), offsets, 4 * (E + 1), cudaMemcpyDeviceToHost, stream));
  UP_CUDA_CHECK(cudaStreamSynchronize(stream));
  // Only the slots of this device's experts hold rows (all P unless an expert-parallel shard).
  TensorView xg = Rows2D(y, off[E], H, H);
  ops::cuda::GatherRows(ctx, xg, x, slot_row);
  std::vector<GroupedGemmGroup> groups(E);
  auto check = [](const Status& st) {
    if (!st.ok()) {
      std::fprintf(stderr, "MoE: %s\n", st.message().c_str());
      std::abort();
    }
  };
  const bf16* w_gu = static_cast<const bf16*>(w.expert_gate_up.data);
  const bf16* w_down = static_cast<const bf16*>(w.expert_down.data);
  for (int64_t e = 0; e < E; ++e) {
    groups[e] = {y + off[e] * H, w_gu + e * 2 * I * H, gu + off[e] * 2 * I, off[e + 1] - off[e]};
  }
  check(GroupedGemmBf16(ctx, groups, {static_cast<int>(2 * I), static_cast<int>(H), H, H, 2 * I},
                        group_ptrs));
  TensorView gate = Rows2D(gu, P, I, 2 * I), up = Rows2D(gu + I, P, I, 2 * I);
  ops::cuda::GatedActivation(ctx, gate, gate, up, Activation::kSilu);
  for (int64_t e = 0; e < E; ++e) {
    groups[e] = {gu + off[e] * 2 * I, w_down + e * H * I, y + off[e] * H, off[e + 1] - off[e]};
  }
  // The pointer arrays of the first call may still be in use: the second takes the next region.
  check(GroupedGemmBf16(ctx, groups, {static_cast<int>(H), static_cast<int>(I), 2 * I, I, H},
                        static_cast<char*>(group_ptrs) + GroupedGemmScratchBytes(E)));
  ops::cuda::Gemm(ctx, Rows2D(shared_gu, T, 2 * Is, 2 * Is), x, w.shared_gate_up);
  TensorView sgate = Rows2D(shared_gu, T, Is, 2 * Is), sup = Rows2D(shared_gu + Is, T, Is, 2 * Is);
  ops::cuda::GatedActivation(ctx, sgate, sgate, sup, Activation::kSilu);
  ops::cuda::Gemm(ctx, Rows2D(shared_y, T, H, H), sgate, w.shared_down);
}

void MoeForward(DeviceContext& ctx, TensorView out, TensorView x, const MoeDeviceWeights& w,
                void* scratch, size_t scratch_bytes, MoeGemm gemm) {
  const Dims d = DimsOf(x.dim(0), w);
  // E: the router's experts (routing); E_local: those held here (grouping and GEMMs).
  const int64_t T = d.t, H = d.h, E = d.e_all, E_local = d.e;
  [[maybe_unused]] const int64_t I = d.inter, Is = d.shared_inter;  // the asserts' (NDEBUG: none)
  const int k = d.k;
  assert(x.dtype == DType::kBF16 && out.dtype == DType::kBF16 && x.dim(1) == H);
  assert(out.dim(0) == T && out.dim(1) == H && out.data != x.data);
  assert(x.stride[1] == 1 && out.stride[1] == 1);
  assert(d.first >= 0 && d.first + E_local <= E && w.expert_gate_up.dim(2) == H);
  assert(w.expert_down.dim(0) == E_local && w.expert_down.dim(1) == H &&
         w.expert_down.dim(2) == I);
  assert(w.shared_down.dim(0) == H && w.shared_down.dim(1) == Is && w.shared_gate.dim(1) == H);
  assert(k >= 1 && k <= E && k <= kMaxTopK);
  assert(H % 8 == 0 && I % 8 == 0 && Is % 8 == 0);
  if (T == 0) return;
  const Layout l = LayoutOf(d);
  assert(scratch_bytes >= l.total);
  (void)scratch_bytes;
  char* s = static_cast<char*>(scratch);
  float* logits = reinterpret_cast<float*>(s + l.logits);
  int32_t* choice_expert = reinterpret_cast<int32_t*>(s + l.choice_expert);
  float* choice_weight = reinterpret_cast<float*>(s + l.choice_weight);
  int32_t* counts = reinterpret_cast<int32_t*>(s + l.counts);
  int32_t* offsets = reinterpret_cast<int32_t*>(s + l.offsets);
  int32_t* tile_offsets = reinterpret_cast<int32_t*>(s + l.tile_offsets);
  int32_t* fill = reinterpret_cast<int32_t*>(s + l.fill);
  int32_t* slot_row = reinterpret_cast<int32_t*>(s + l.slot_row);
  int32_t* choice_slot = reinterpret_cast<int32_t*>(s + l.choice_slot);
  bf16* gu = reinterpret_cast<bf16*>(s + l.gu);
  bf16* y = reinterpret_cast<bf16*>(s + l.y);
  bf16* shared_gu = reinterpret_cast<bf16*>(s + l.shared_gu);
  bf16* shared_y = reinterpret_cast<bf16*>(s + l.shared_y);
  cudaStream_t stream = ctx.cuda().stream();
  const int64_t P = T * k;
  const cudaDeviceProp& props = ctx.cuda().properties();
  const bool wgmma =
      gemm != MoeGemm::kOursMmaSync && WgmmaGroupedGemmAvailable(props.major, props.minor);

  // 1. Router logits, f32.
  {
    GemmArgs a;
    a.a = static_cast<const bf16*>(x.data);
    a.lda = x.stride[0];
    a.b = static_cast<const bf16*>(w.router.data);
    a.ldb = w.router.stride[0];
    a.c = logits;
    a.ldc = E;
    a.n = static_cast<int>(E);
    a.k = static_cast<int>(H);
    a.m = static_cast<int>(T);
    LaunchGroupedGemm<float>(a, (T + kBM - 1) / kBM, stream, wgmma);
  }
  // 2. Routing and counts; 3. offsets and slots.
  const int first = static_cast<int>(d.first), n_local = static_cast<int>(E_local);
  if (E_local > 0) UP_CUDA_CHECK(cudaMemsetAsync(counts, 0, 4 * E_local, stream));
  {
    const int64_t blocks = (T + kRouteWarps - 1) / kRouteWarps;
    const size_t smem = sizeof(float) * kRouteWarps * E;
    RouteKernel<<<static_cast<unsigned>(blocks), kRouteWarps * 32, smem, stream>>>(
        logits, T, static_cast<int>(E), first, n_local, k, w.norm_topk_prob, choice_expert,
        choice_weight, counts);
    UP_CUDA_CHECK_LAUNCH();
  }
  ScanKernel<<<1, kScanThreads, 0, stream>>>(counts, n_local, offsets, tile_offsets, fill);
  UP_CUDA_CHECK_LAUNCH();
  ScatterKernel<<<static_cast<unsigned>((P + 255) / 256), 256, 0, stream>>>(
      choice_expert, P, k, first, n_local, offsets, fill, slot_row, choice_slot);
  UP_CUDA_CHECK_LAUNCH();

  if (gemm == MoeGemm::kLibrary) {
    LibraryExperts(ctx, x, w, d, offsets, slot_row, gu, y, shared_gu, shared_y,
                   s + l.group_ptrs);
  } else {
    OurExperts(ctx, x, w, d, offsets, tile_offsets, slot_row, gu, y, shared_gu, shared_y,
               wgmma);
  }

  // 8. Combine.
  assert(T <= INT32_MAX);
  // y and shared_y rows are H (a multiple of 8) apart in 256-byte aligned scratch.
  const bool vec = out.stride[0] % 8 == 0 && reinterpret_cast<uintptr_t>(out.data) % 16 == 0;
  (vec ? CombineKernel<true> : CombineKernel<false>)<<<static_cast<unsigned>(T), kCombineThreads,
                                                       0, stream>>>(
      static_cast<bf16*>(out.data), out.stride[0], static_cast<const bf16*>(x.data), x.stride[0],
      static_cast<const bf16*>(w.shared_gate.data), y, shared_y, static_cast<int>(H), k,
      choice_slot, choice_weight);
  UP_CUDA_CHECK_LAUNCH();
}

}  // namespace uniprefill::ops::cuda
