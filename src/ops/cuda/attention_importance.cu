// UniPrefill attention importance on the GPU: the twin of ops::AttentionImportance.
//
// importance[i] += sum over queries j and query heads h of softmax_i(scale * q[j,h] . k[i,kv(h)])
// over the keys visible to j (k_pos[i] <= q_pos[j]). The n x N probability matrix is never stored;
// it is computed twice with bf16 tensor-core MMAs (mma.sync m16n8k16, f32 accumulation) and f32
// softmax arithmetic in the log2 domain:
//   1. RowStatsKernel: per (query row, key split) the running max m and sum l of exp2(s - m)
//      (flash-attention style over 64-key tiles), written as partials f32x2 [splits, n * Hq].
//   2. MergeStatsKernel: lse[j * Hq + h] = log2 of the full softmax denominator (+inf for a query
//      that sees no key, so it contributes nothing, as on the CPU).
//   3. KeyMassKernel: each CTA owns 128 keys and streams every (query, head) row past them,
//      summing exp2(s - lse) per key; it alone writes its keys (no atomics, so the result is the
//      same on every run).
// The rows of kv head g are (j, h) for the heads h of its GQA group, row r = j * group + (h % group),
// so one K tile serves the whole group. Scratch (partials and lse, n * Hq * (splits * 8 + 4) bytes,
// ~1 MiB at n = 128, Hq = 32, 33 splits) comes from the stream-ordered pool (cudaMallocAsync): the
// op's signature carries no workspace; the pool caches it, so no cudaMalloc per call.
//
// Resources (sm_90, 256 threads = 8 warps per CTA; each warp owns 16 rows of the MMA's A operand):
// dynamic shared memory 2 tiles of 64 x (D + 8) bf16 (+16 bytes a row keeps ldmatrix conflict-free)
// = 35 KB at D = 128, 68 KB at D = 256. Work: 2 passes x 2 * n * Hq * N * D flops (275 GFLOP at
// n = 128, Hq = 32, D = 128, N = 128K) plus 2 * n * Hq * N exp2 (MUFU). Measured on an H200 at that
// shape: 1.42 ms at N = 128K (194 TFLOP/s), 10.7 ms at N = 1M; SIMT f32 would take ~8 ms at 128K.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_uniprefill.h"

namespace uniprefill::ops::cuda {
namespace {

constexpr int kTile = 64;                  // keys (pass 1) or query rows (pass 2) per smem tile
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerCta = kWarps * 16;   // pass 1: query rows per CTA; pass 2: keys per CTA
constexpr float kLog2e = 1.4426950408889634f;

template <int kD>
struct Tile {
  static constexpr int kStride = kD + 8;   // smem row stride in elements (16 bytes of padding)
  static constexpr int kChunks = kD / 8;   // 16-byte chunks per row
  static constexpr int kElems = kTile * kStride;
  // Two bf16 tiles (double buffer) and two 64-entry int/float side arrays per buffer.
  static constexpr size_t kSmemBytes = 2 * kElems * sizeof(uint16_t) + 2 * 2 * kTile * 4;
};

// Everything the kernels need about q, k and the shapes. Strides in elements.
struct Problem {
  const uint16_t* q;  // bf16 [n, Hq, D]
  const uint16_t* k;  // bf16 [N, Hkv, D]
  int64_t q_row, q_head, k_row, k_head;
  const int32_t* q_pos;  // [n]
  const int32_t* k_pos;  // [N], ascending
  int n, n_keys, hq, group, d;
  int rows;          // rows per kv head: n * group
  float scale_log2;  // scale * log2(e)
};

__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(SmemAddr(smem)), "l"(gmem)
               : "memory");
}
__device__ __forceinline__ void CpAsync4(void* smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(SmemAddr(smem)), "l"(gmem)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most one committed group (the newest) is still in flight.
__device__ __forceinline__ void CpAsyncWaitAllButOne() {
  asm volatile("cp.async.wait_group 1;\n" ::: "memory");
}
__device__ __forceinline__ void LdMatrixX4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3,
                                           const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(SmemAddr(smem))
               : "memory");
}
// c += a (16x16, row) * b (16x8, col); bf16 inputs, f32 accumulation.
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// 2^x (MUFU; relative error ~2^-22; 2^-inf = 0; results below 2^-126 flush to 0).
__device__ __forceinline__ float FastExp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ uint32_t LoadPair(const uint16_t* p) {
  return __ldg(reinterpret_cast<const unsigned int*>(p));
}

// The A fragments (m16n8k16, row-major) of 16 rows x kD: this thread's rows are lane / 4 (row_lo)
// and lane / 4 + 8 (row_hi), null for a padding row; columns >= d are zero.
template <int kD>
__device__ __forceinline__ void LoadRowFragments(uint32_t (&a)[kD / 16][4], const uint16_t* row_lo,
                                                 const uint16_t* row_hi, int d, int lane) {
  const int c = 2 * (lane & 3);
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    const int c0 = kk * 16 + c, c1 = c0 + 8;  // d % 8 == 0: a pair is all in or all out
    a[kk][0] = row_lo != nullptr && c0 < d ? LoadPair(row_lo + c0) : 0u;
    a[kk][1] = row_hi != nullptr && c0 < d ? LoadPair(row_hi + c0) : 0u;
    a[kk][2] = row_lo != nullptr && c1 < d ? LoadPair(row_lo + c1) : 0u;
    a[kk][3] = row_hi != nullptr && c1 < d ? LoadPair(row_hi + c1) : 0u;
  }
}

// acc[nt] = (this warp's 16 A rows) . (tile rows nt * 8 .. nt * 8 + 7)^T over kD, for a smem tile
// bf16 [64, kStride]. Accumulator layout: acc[nt][0..1] = A row lane / 4, tile rows
// nt * 8 + 2 * (lane % 4) + {0, 1}; acc[nt][2..3] the same for A row lane / 4 + 8.
template <int kD>
__device__ __forceinline__ void WarpTileProduct(float (&acc)[8][4], const uint32_t (&a)[kD / 16][4],
                                                const uint16_t* tile, int lane) {
  constexpr int kStride = Tile<kD>::kStride;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
  }
  // ldmatrix.x4: lanes 8m .. 8m + 7 address matrix m = rows nt * 8 + (lane % 8), columns
  // kk * 16 + 8m: matrices 0, 1 are the B fragment of k-step kk, matrices 2, 3 of k-step kk + 1.
  const uint16_t* base = tile + (lane & 7) * kStride + (lane >> 3) * 8;
#pragma unroll
  for (int kk = 0; kk < kD / 16; kk += 2) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      uint32_t b0, b1, b2, b3;
      LdMatrixX4(b0, b1, b2, b3, base + nt * 8 * kStride + kk * 16);
      Mma(acc[nt], a[kk], b0, b1);
      Mma(acc[nt], a[kk + 1], b2, b3);
    }
  }
}

// Starts the asynchronous copy of 64 rows x kD into a smem tile; row_ptr(r) is the global row
// (null: a padding row, zero-filled); columns >= d are zero-filled.
template <int kD, class RowPtr>
__device__ __forceinline__ void StageTile(uint16_t* tile, const RowPtr& row_ptr, int d) {
  constexpr int kChunks = Tile<kD>::kChunks;
  for (int c = threadIdx.x; c < kTile * kChunks; c += kThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    uint16_t* dst = tile + r * Tile<kD>::kStride + col;
    const uint16_t* src = row_ptr(r);
    if (src != nullptr && col < d) {
      CpAsync16(dst, src + col);
    } else {
      *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
    }
  }
}

// Row r of kv head g's rows: query j = r / group, head h = g * group + r % group.
__device__ __forceinline__ const uint16_t* QueryRow(const Problem& p, int kv_head, int r,
                                                    int* j_out, int* jh_out) {
  const int j = r / p.group;
  const int h = kv_head * p.group + (r - j * p.group);
  *j_out = j;
  *jh_out = j * p.hq + h;
  return p.q + j * p.q_row + h * p.q_head;
}

// Pass 1. grid (splits, ceil(rows / 128), Hkv); CTA (s, t, g) covers rows [128 t, 128 t + 128) of
// kv head g against key tiles [s * tiles_per_split, ...). partial f32x2 [splits, n * Hq] = (m, l)
// in the log2 domain: m the max of s * log2(e) over visible keys (-inf if none), l the sum of
// exp2(s * log2(e) - m).
template <int kD>
__global__ void __launch_bounds__(kThreads) RowStatsKernel(Problem p, int tiles_per_split,
                                                           float2* partial) {
  extern __shared__ __align__(16) unsigned char smem[];
  uint16_t* tiles = reinterpret_cast<uint16_t*>(smem);
  int* kpos_s = reinterpret_cast<int*>(tiles + 2 * Tile<kD>::kElems);  // int [2][kTile]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int split = blockIdx.x, kv_head = blockIdx.z;
  const int row0 = blockIdx.y * kRowsPerCta + warp * 16 + (lane >> 2);  // and row0 + 8

  int qp[2], jh[2];
  const uint16_t* qrow[2];
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    const int r = row0 + 8 * s;
    int j = 0;
    jh[s] = -1;
    qrow[s] = nullptr;
    qp[s] = INT_MIN;  // a padding row sees no key
    if (r < p.rows) {
      qrow[s] = QueryRow(p, kv_head, r, &j, &jh[s]);
      qp[s] = p.q_pos[j];
    }
  }
  uint32_t a[kD / 16][4];
  LoadRowFragments<kD>(a, qrow[0], qrow[1], p.d, lane);

  const int n_tiles = (p.n_keys + kTile - 1) / kTile;
  const int t_begin = split * tiles_per_split;
  const int t_end = min(n_tiles, t_begin + tiles_per_split);
  auto stage = [&](int t, int buf) {
    const int key0 = t * kTile;
    StageTile<kD>(
        tiles + buf * Tile<kD>::kElems,
        [&](int r) -> const uint16_t* {
          const int i = key0 + r;
          return i < p.n_keys ? p.k + i * p.k_row + kv_head * p.k_head : nullptr;
        },
        p.d);
    if (threadIdx.x < kTile) {
      const int i = key0 + threadIdx.x;
      int* dst = kpos_s + buf * kTile + threadIdx.x;
      if (i < p.n_keys) {
        CpAsync4(dst, p.k_pos + i);
      } else {
        *dst = INT_MAX;  // a padding key is visible to no query
      }
    }
  };

  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  if (t_begin < t_end) stage(t_begin, 0);
  CpAsyncCommit();
  for (int t = t_begin; t < t_end; ++t) {
    const int buf = (t - t_begin) & 1;
    if (t + 1 < t_end) stage(t + 1, buf ^ 1);
    CpAsyncCommit();  // possibly empty, so "all but the newest" is always tile t's group
    CpAsyncWaitAllButOne();
    __syncthreads();

    float acc[8][4];
    WarpTileProduct<kD>(acc, a, tiles + buf * Tile<kD>::kElems, lane);
    const int* kp = kpos_s + buf * kTile + 2 * (lane & 3);
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int2 kv = *reinterpret_cast<const int2*>(kp + nt * 8);
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        float& x0 = acc[nt][2 * s];
        float& x1 = acc[nt][2 * s + 1];
        x0 = kv.x <= qp[s] ? x0 * p.scale_log2 : -INFINITY;
        x1 = kv.y <= qp[s] ? x1 * p.scale_log2 : -INFINITY;
        tile_max[s] = fmaxf(tile_max[s], fmaxf(x0, x1));
      }
    }
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const float m_new = fmaxf(m[s], tile_max[s]);
      const float base = m_new == -INFINITY ? 0.0f : m_new;  // nothing visible yet: all terms 0
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        sum += FastExp2(acc[nt][2 * s] - base) + FastExp2(acc[nt][2 * s + 1] - base);
      }
      l[s] = l[s] * FastExp2(m[s] - base) + sum;
      m[s] = m_new;
    }
    __syncthreads();  // the next iteration's copy overwrites this buffer
  }

  // The four lanes of a quad hold the same rows (different keys): merge their (m, l).
#pragma unroll
  for (int s = 0; s < 2; ++s) {
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
      const float mo = __shfl_xor_sync(0xffffffffu, m[s], off);
      const float lo = __shfl_xor_sync(0xffffffffu, l[s], off);
      const float mm = fmaxf(m[s], mo);
      const float base = mm == -INFINITY ? 0.0f : mm;
      l[s] = l[s] * FastExp2(m[s] - base) + lo * FastExp2(mo - base);
      m[s] = mm;
    }
    if ((lane & 3) == 0 && jh[s] >= 0) {
      partial[static_cast<int64_t>(split) * (p.n * p.hq) + jh[s]] = make_float2(m[s], l[s]);
    }
  }
}

// Pass 1b. lse[jh] = m + log2(l) over all splits (log2 domain); +inf when the query sees no key.
__global__ void MergeStatsKernel(float* lse, const float2* partial, int splits, int pairs) {
  const int jh = blockIdx.x * blockDim.x + threadIdx.x;
  if (jh >= pairs) return;
  float m = -INFINITY;
  for (int s = 0; s < splits; ++s) m = fmaxf(m, partial[static_cast<int64_t>(s) * pairs + jh].x);
  if (m == -INFINITY) {
    lse[jh] = INFINITY;
    return;
  }
  float l = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float2 ml = partial[static_cast<int64_t>(s) * pairs + jh];
    l += ml.y * FastExp2(ml.x - m);  // an empty split has (-inf, 0): adds 0
  }
  lse[jh] = m + log2f(l);
}

// Pass 2. grid ceil(N / 128); CTA c owns keys [128 c, 128 c + 128) (warp w: 16 of them, the A
// operand) and streams 64-row tiles of every kv head's query rows (the B operand) past them.
// importance[i] += sum over rows of exp2(s * log2(e) - lse[row]) for the visible ones.
template <int kD>
__global__ void __launch_bounds__(kThreads) KeyMassKernel(Problem p, const float* lse, int n_kv,
                                                          float* importance) {
  extern __shared__ __align__(16) unsigned char smem[];
  uint16_t* tiles = reinterpret_cast<uint16_t*>(smem);
  float* lse_s = reinterpret_cast<float*>(tiles + 2 * Tile<kD>::kElems);  // f32 [2][kTile]
  int* qpos_s = reinterpret_cast<int*>(lse_s + 2 * kTile);                // i32 [2][kTile]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int key0 = static_cast<int>(blockIdx.x) * kRowsPerCta + warp * 16 + (lane >> 2);
  const int key[2] = {key0, key0 + 8};
  int kp[2];
#pragma unroll
  for (int s = 0; s < 2; ++s) kp[s] = key[s] < p.n_keys ? p.k_pos[key[s]] : INT_MAX;

  const int row_tiles = (p.rows + kTile - 1) / kTile;
  const int stages = n_kv * row_tiles;  // stage s: kv head s / row_tiles, row tile s % row_tiles
  auto stage = [&](int s, int buf) {
    const int kv_head = s / row_tiles;
    const int r0 = (s - kv_head * row_tiles) * kTile;
    StageTile<kD>(
        tiles + buf * Tile<kD>::kElems,
        [&](int r) -> const uint16_t* {
          int j, jh;
          return r0 + r < p.rows ? QueryRow(p, kv_head, r0 + r, &j, &jh) : nullptr;
        },
        p.d);
    if (threadIdx.x < kTile) {
      float* lse_dst = lse_s + buf * kTile + threadIdx.x;
      int* qpos_dst = qpos_s + buf * kTile + threadIdx.x;
      if (r0 + static_cast<int>(threadIdx.x) < p.rows) {
        int j, jh;
        QueryRow(p, kv_head, r0 + threadIdx.x, &j, &jh);
        CpAsync4(lse_dst, lse + jh);
        CpAsync4(qpos_dst, p.q_pos + j);
      } else {
        *lse_dst = INFINITY;  // padding row: exp2(s - inf) = 0
        *qpos_dst = INT_MIN;  // and sees no key
      }
    }
  };

  uint32_t a[kD / 16][4];
  float sum[2] = {0.0f, 0.0f};
  stage(0, 0);
  CpAsyncCommit();
  for (int s = 0; s < stages; ++s) {
    const int buf = s & 1;
    if (s + 1 < stages) stage(s + 1, buf ^ 1);
    CpAsyncCommit();
    CpAsyncWaitAllButOne();
    __syncthreads();
    if (s % row_tiles == 0) {  // a new kv head: this warp's 16 keys as A fragments
      const int kv_head = s / row_tiles;
      const uint16_t* krow[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        krow[e] = key[e] < p.n_keys ? p.k + key[e] * p.k_row + kv_head * p.k_head : nullptr;
      }
      LoadRowFragments<kD>(a, krow[0], krow[1], p.d, lane);
    }

    float acc[8][4];
    WarpTileProduct<kD>(acc, a, tiles + buf * Tile<kD>::kElems, lane);
    const float* ls = lse_s + buf * kTile + 2 * (lane & 3);
    const int* qs = qpos_s + buf * kTile + 2 * (lane & 3);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const float2 lv = *reinterpret_cast<const float2*>(ls + nt * 8);
      const int2 qv = *reinterpret_cast<const int2*>(qs + nt * 8);
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float p0 = FastExp2(fmaf(acc[nt][2 * e], p.scale_log2, -lv.x));
        const float p1 = FastExp2(fmaf(acc[nt][2 * e + 1], p.scale_log2, -lv.y));
        sum[e] += (kp[e] <= qv.x ? p0 : 0.0f) + (kp[e] <= qv.y ? p1 : 0.0f);
      }
    }
    __syncthreads();  // the next iteration's copy overwrites this buffer
  }

#pragma unroll
  for (int e = 0; e < 2; ++e) {
    sum[e] += __shfl_xor_sync(0xffffffffu, sum[e], 1);
    sum[e] += __shfl_xor_sync(0xffffffffu, sum[e], 2);
    if ((lane & 3) == 0 && key[e] < p.n_keys) importance[key[e]] += sum[e];
  }
}

// A violated precondition is a bug in the calling model code: say which and stop.
void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "cuda::AttentionImportance: %s\n", what);
    std::abort();
  }
}

template <int kD>
void Launch(CudaContext& cuda, float* importance, const Problem& p, int n_kv) {
  cudaStream_t stream = cuda.stream();
  constexpr size_t smem = Tile<kD>::kSmemBytes;
  UP_CUDA_CHECK(cudaFuncSetAttribute(RowStatsKernel<kD>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  UP_CUDA_CHECK(cudaFuncSetAttribute(KeyMassKernel<kD>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, smem));

  // Pass 1 grid: split the keys so that about four waves of CTAs fill the GPU.
  const int row_tiles = (p.rows + kRowsPerCta - 1) / kRowsPerCta;
  const int n_tiles = (p.n_keys + kTile - 1) / kTile;
  int per_sm = 0;
  UP_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, RowStatsKernel<kD>,
                                                              kThreads, smem));
  const int64_t base_ctas = static_cast<int64_t>(row_tiles) * n_kv;
  const int64_t target = 4 * static_cast<int64_t>(std::max(per_sm, 1)) * cuda.sm_count();
  int splits = static_cast<int>(
      std::clamp<int64_t>((target + base_ctas - 1) / base_ctas, 1, n_tiles));
  const int tiles_per_split = (n_tiles + splits - 1) / splits;
  splits = (n_tiles + tiles_per_split - 1) / tiles_per_split;  // every split has >= 1 tile

  const int pairs = p.n * p.hq;
  const size_t partial_bytes = sizeof(float2) * static_cast<size_t>(splits) * pairs;
  void* scratch = nullptr;
  UP_CUDA_CHECK(cudaMallocAsync(&scratch, partial_bytes + sizeof(float) * pairs, stream));
  float2* partial = static_cast<float2*>(scratch);
  float* lse = reinterpret_cast<float*>(static_cast<char*>(scratch) + partial_bytes);

  RowStatsKernel<kD><<<dim3(splits, row_tiles, n_kv), kThreads, smem, stream>>>(
      p, tiles_per_split, partial);
  UP_CUDA_CHECK_LAUNCH();
  MergeStatsKernel<<<(pairs + 255) / 256, 256, 0, stream>>>(lse, partial, splits, pairs);
  UP_CUDA_CHECK_LAUNCH();
  KeyMassKernel<kD><<<(p.n_keys + kRowsPerCta - 1) / kRowsPerCta, kThreads, smem, stream>>>(
      p, lse, n_kv, importance);
  UP_CUDA_CHECK_LAUNCH();
  UP_CUDA_CHECK(cudaFreeAsync(scratch, stream));
}

}  // namespace

void AttentionImportance(DeviceContext& ctx, float* importance, TensorView q, TensorView k,
                         const int32_t* q_pos, const int32_t* k_pos, float scale) {
  const int64_t n = q.dim(0), hq = q.dim(1), d = q.dim(2);
  const int64_t n_keys = k.dim(0), hkv = k.dim(1);
  Require(q.ndim == 3 && k.ndim == 3, "q and k must be 3-D [rows, heads, head_dim]");
  Require(q.dtype == DType::kBF16 && k.dtype == DType::kBF16, "q and k must be bf16");
  Require(k.dim(2) == d && hkv >= 1 && hq % hkv == 0, "q/k head shapes do not match (GQA)");
  Require(d >= 8 && d <= 256 && d % 8 == 0, "head_dim must be a multiple of 8 in [8, 256]");
  Require(q.stride[2] == 1 && k.stride[2] == 1, "the head dimension must be contiguous");
  Require(q.stride[0] % 8 == 0 && q.stride[1] % 8 == 0 && k.stride[0] % 8 == 0 &&
              k.stride[1] % 8 == 0,
          "row and head strides must be multiples of 8 elements (16-byte loads)");
  Require(reinterpret_cast<uintptr_t>(q.data) % 16 == 0 &&
              reinterpret_cast<uintptr_t>(k.data) % 16 == 0,
          "q and k must be 16-byte aligned");
  Require(n_keys < (int64_t{1} << 31) - kRowsPerCta && n * hq < (int64_t{1} << 30) &&
              n * (hq / hkv) <= int64_t{65535} * kRowsPerCta && hkv <= 65535,
          "too many keys, query rows or heads for the launch grid");
  if (n == 0 || n_keys == 0) return;

  Problem p;
  p.q = static_cast<const uint16_t*>(q.data);
  p.k = static_cast<const uint16_t*>(k.data);
  p.q_row = q.stride[0];
  p.q_head = q.stride[1];
  p.k_row = k.stride[0];
  p.k_head = k.stride[1];
  p.q_pos = q_pos;
  p.k_pos = k_pos;
  p.n = static_cast<int>(n);
  p.n_keys = static_cast<int>(n_keys);
  p.hq = static_cast<int>(hq);
  p.group = static_cast<int>(hq / hkv);
  p.d = static_cast<int>(d);
  p.rows = static_cast<int>(n * (hq / hkv));
  p.scale_log2 = scale * kLog2e;
  CudaContext& cuda = ctx.cuda();
  if (d <= 64) {
    Launch<64>(cuda, importance, p, static_cast<int>(hkv));
  } else if (d <= 128) {
    Launch<128>(cuda, importance, p, static_cast<int>(hkv));
  } else {
    Launch<256>(cuda, importance, p, static_cast<int>(hkv));
  }
}

}  // namespace uniprefill::ops::cuda
