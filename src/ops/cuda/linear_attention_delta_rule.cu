// GatedDeltaRule of cuda_linear_attention.h: the gated delta rule, chunked (prefill) and recurrent
// (decode), f32 math on CUDA cores (FFMA) so that both equal the CPU recurrence to f32 rounding,
// and the dispatch (the tensor-core chunked kernel is linear_attention_delta_rule_tc.cu).
//
// Columns of S are independent in the recurrence (u[j], delta[j], the update of column j and o[j]
// only touch column j), so both kernels give each block a tile of value columns of one
// (sequence, value head): grid (Dv tiles, Hv, batch).
//
// Chunked (WY / UT form, as flash-linear-attention's chunk_gated_delta_rule), per chunk of
// C = 64 tokens with S0 the state before it, G the within-chunk inclusive cumsum of g (double),
// gamma_i = exp(G_i):
//   S_i = gamma_i S0 + sum_{m<=i} exp(G_i - G_m) k_m w_m^T, with w_m = beta_m (v_m - u_m) the
//   delta of token m (u_m = S^T k_m after token m's decay). The w solve the unit lower triangular
//   system (exactly the recurrence, reassociated)
//     (I + A) W = RHS,  A[i][m] = beta_i exp(G_i - G_m) (k_i . k_m) (m < i),
//                       RHS_i  = beta_i (v_i - gamma_i (K S0)_i),
//   then  O = diag(gamma) Q S0 + Aqk W,  Aqk[i][m] = exp(G_i - G_m) (q_i . k_m) (m <= i),
//         S_end = gamma_last S0 + K^T diag(exp(G_last - G_m)) W.
// Tokens past the sequence's end pad the last chunk with k = q = v = g = beta = 0 (their w are 0).
// The solve: the four 16x16 diagonal blocks of I + A are inverted by forward substitution (a
// thread per column), then W is found block row by block row (W_I = D_I (RHS_I - A_{I,<I} W_{<I})).
// Per chunk the block computes, with 4x4-ish register tiles over shared memory:
//   phase 1  K K^T and Q K^T (one 64x64 square: lower half q.k, upper half k.k), K S0 and Q S0;
//   phase 2  the triangular solve (8 barriers);
//   phase 3  O (written out) and S_end (in shared memory).
// FMAs per chunk and block, Dk = 128, C = 64, column tile Dvt: 64*64*128 (dots, shared by the
// column tiles) + Dvt * (2*64*128 + ~64*40 + 64*64 + 128*64). Shared memory ~132 KB (Dvt 32) or
// ~159 KB (Dvt 64) at Dk = 128: one block of 256 threads per SM.
//
// Recurrent: a block of 8 warps per (32 value columns, head, sequence); lane = column, each warp
// holds rows warp + 8 r of those columns of S in registers for the whole call. Per token: q, k to
// shared memory, partial S^T k and S^T q per warp, a cross-warp sum, then
//   delta = beta (v - a S^T k), o = a S^T q + (k . q) delta, S <- a S + k delta^T  (a = exp(g)),
// as the CPU kernel; token buffers are double-buffered by parity so a token costs two barriers.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_linear_attention.h"
#include "ops/cuda/linear_attention_common.cuh"
#include "ops/cuda/linear_attention_delta_rule_common.cuh"
#include "ops/cuda/linear_attention_delta_rule_split.h"

namespace uniprefill::ops::cuda {
namespace {

using linear_detail::bf16;
using linear_detail::DeltaArgs;
using linear_detail::GetSeq;
using linear_detail::LoadF;
using linear_detail::Require;
using linear_detail::SeqInfo;
using linear_detail::StoreF;

constexpr int kChunk = 64;            // tokens per chunk
constexpr int kThreads = 256;         // chunked kernel: threads per block (16 x 16 tile grid)
constexpr int kBlk = 16;              // rows per diagonal block of the triangular solve
constexpr int kNBlk = kChunk / kBlk;  // diagonal blocks per chunk
constexpr int kRecWarps = 8;          // recurrent kernel: warps per block (rows of S split)
constexpr int kMaxDk = 128;

// ---- Chunked kernel -----------------------------------------------------------------------------

// Shared memory of the chunked kernel, offsets in floats. Row strides are padded by one float so
// that the column-wise accesses of each phase fall in distinct banks.
template <int kDk, int kDvt>
struct ChunkLayout {
  static constexpr int kKStride = kDk + 1;                       // K, Q rows
  static constexpr int kVStride = kDvt + 1;                      // S, W, X rows
  static constexpr int kCStride = kChunk + 1;                    // Akk, Aqk rows
  static constexpr int kBStride = kBlk + 1;                      // Dinv rows
  static constexpr int kK = 0;                                   // f32 [kChunk][kKStride]
  static constexpr int kQ = kK + kChunk * kKStride;              // f32 [kChunk][kKStride]
  static constexpr int kS = kQ + kChunk * kKStride;              // f32 [kDk][kVStride]
  static constexpr int kW = kS + kDk * kVStride;                 // f32 [kChunk][kVStride]
  static constexpr int kX = kW + kChunk * kVStride;              // f32 [kBlk][kVStride]
  static constexpr int kAkk = kX + kBlk * kVStride;              // f32 [kChunk][kCStride]
  static constexpr int kAqk = kAkk + kChunk * kCStride;          // f32 [kChunk][kCStride]
  static constexpr int kDinv = kAqk + kChunk * kCStride;         // f32 [kNBlk][kBlk][kBStride]
  static constexpr int kBeta = kDinv + kNBlk * kBlk * kBStride;  // f32 [kChunk]
  static constexpr int kGam = kBeta + kChunk;                    // f32 [kChunk]
  static constexpr int kDte = kGam + kChunk;                     // f32 [kChunk]
  static constexpr int kG = (kDte + kChunk + 1) / 2 * 2;         // f64 [kChunk] (8-byte aligned)
  static constexpr size_t kBytes = sizeof(float) * kG + sizeof(double) * kChunk;
};

// Pointers into the chunked kernel's shared memory.
struct ChunkSmem {
  float* k;     // [kChunk][kKStride]: k rows of the chunk (zero past n and past dk)
  float* q;     // [kChunk][kKStride]: q rows
  float* s;     // [kDk][kVStride]: this block's columns of S
  float* w;     // [kChunk][kVStride]: v, then the right-hand side, then W
  float* x;     // [kBlk][kVStride]: one block row of the solve
  float* akk;   // [kChunk][kCStride]: A[i][m] for m < i (the rest unused)
  float* aqk;   // [kChunk][kCStride]: Aqk[i][m], zero for m > i
  float* dinv;  // [kNBlk][kBlk][kBStride]: (I + A_II)^-1
  float* beta;  // [kChunk]
  float* gam;   // [kChunk]: exp(G_i)
  float* dte;   // [kChunk]: exp(G_last - G_i)
  double* G;    // [kChunk]: inclusive cumsum of g within the chunk
};

template <int kDk, int kDvt>
__device__ __forceinline__ ChunkSmem MakeChunkSmem(float* base) {
  using L = ChunkLayout<kDk, kDvt>;
  return ChunkSmem{base + L::kK,   base + L::kQ,    base + L::kS,
                   base + L::kW,   base + L::kX,    base + L::kAkk,
                   base + L::kAqk, base + L::kDinv, base + L::kBeta,
                   base + L::kGam, base + L::kDte,  reinterpret_cast<double*>(base + L::kG)};
}

// Loads chunk rows [row0, row0 + n) of value head h (key head kh) and value columns
// [j0, j0 + kDvt), zero-padded, and computes the gates (warp 0).
template <typename T, int kDk, int kDvt>
__device__ __forceinline__ void LoadChunk(const DeltaArgs<T>& a, const ChunkSmem& sm, int64_t row0,
                                          int n, int h, int kh, int j0) {
  using L = ChunkLayout<kDk, kDvt>;
  const int tid = threadIdx.x;
  constexpr int kKPer = kChunk * kDk / kThreads;
#pragma unroll
  for (int e = 0; e < kKPer; ++e) {
    const int idx = tid + e * kThreads;
    const int i = idx / kDk, d = idx % kDk;
    float kv = 0.0f, qv = 0.0f;
    if (i < n && d < a.dk) {
      const int64_t r = row0 + i;
      kv = LoadF(a.k + r * a.k_t + kh * a.k_h + d);
      qv = LoadF(a.q + r * a.q_t + kh * a.q_h + d);
    }
    sm.k[i * L::kKStride + d] = kv;
    sm.q[i * L::kKStride + d] = qv;
  }
  constexpr int kVPer = kChunk * kDvt / kThreads;
#pragma unroll
  for (int e = 0; e < kVPer; ++e) {
    const int idx = tid + e * kThreads;
    const int i = idx / kDvt, j = idx % kDvt;
    float vv = 0.0f;
    if (i < n && j0 + j < a.dv) vv = LoadF(a.v + (row0 + i) * a.v_t + h * a.v_h + j0 + j);
    sm.w[i * L::kVStride + j] = vv;
  }
  if (tid < 32) {
    // Lane l owns rows 2l and 2l + 1; the cumsum is a warp scan in double.
    const int i0 = 2 * tid, i1 = i0 + 1;
    const int64_t r0 = row0 + i0, r1 = r0 + 1;
    const double g0 = i0 < n ? static_cast<double>(a.g[r0 * a.g_t + h]) : 0.0;
    const double g1 = i1 < n ? static_cast<double>(a.g[r1 * a.g_t + h]) : 0.0;
    sm.beta[i0] = i0 < n ? a.beta[r0 * a.beta_t + h] : 0.0f;
    sm.beta[i1] = i1 < n ? a.beta[r1 * a.beta_t + h] : 0.0f;
    double incl = g0 + g1;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const double y = __shfl_up_sync(0xffffffffu, incl, o);
      if (tid >= o) incl += y;
    }
    const double last = __shfl_sync(0xffffffffu, incl, 31);
    const double G0 = incl - g1, G1 = incl;
    sm.G[i0] = G0;
    sm.G[i1] = G1;
    // The differences are exact in double; expf of them is as accurate as the CPU's products.
    sm.gam[i0] = expf(static_cast<float>(G0));
    sm.gam[i1] = expf(static_cast<float>(G1));
    sm.dte[i0] = expf(static_cast<float>(last - G0));
    sm.dte[i1] = expf(static_cast<float>(last - G1));
  }
}

// Phase 1. Thread (ti, tj) owns rows ti + 16 a and columns tj + 16 b of each output.
//   aqk[r][c] (r >= c) = exp(G_r - G_c) q_r . k_c, aqk[r][c] (r < c) = 0,
//   akk[c][r] (r < c)  = beta_c exp(G_c - G_r) k_c . k_r   (one square of dots: q_r or k_r, k_c),
//   w[i][j] <- beta_i (v_i[j] - gamma_i (K S0)[i][j]),  oacc[a][b] = gamma_i (Q S0)[i][j].
template <int kDk, int kDvt>
__device__ __forceinline__ void ChunkDots(const ChunkSmem& sm, float (&oacc)[4][kDvt / 16]) {
  using L = ChunkLayout<kDk, kDvt>;
  constexpr int kKS = L::kKStride, kVS = L::kVStride, kCS = L::kCStride;
  constexpr int kJ = kDvt / 16;
  const int ti = threadIdx.x >> 4, tj = threadIdx.x & 15;
  // Row blocks a > b lie below the diagonal (q . k), a < b above (k . k); on a == b it depends on
  // ti >= tj, the same for all of this thread's diagonal elements.
  const bool diag_q = ti >= tj;
  float dots[4][4] = {}, ks[4][kJ] = {}, qs[4][kJ] = {};
#pragma unroll 2
  for (int d = 0; d < kDk; ++d) {
    float lq[4], lk[4], rk[4], sv[kJ];
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      lq[a] = sm.q[(ti + 16 * a) * kKS + d];
      lk[a] = sm.k[(ti + 16 * a) * kKS + d];
      rk[a] = sm.k[(tj + 16 * a) * kKS + d];
    }
#pragma unroll
    for (int b = 0; b < kJ; ++b) sv[b] = sm.s[d * kVS + tj + 16 * b];
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const float ld = diag_q ? lq[a] : lk[a];
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const float l = a > b ? lq[a] : (a < b ? lk[a] : ld);
        dots[a][b] = fmaf(l, rk[b], dots[a][b]);
      }
#pragma unroll
      for (int b = 0; b < kJ; ++b) {
        ks[a][b] = fmaf(lk[a], sv[b], ks[a][b]);
        qs[a][b] = fmaf(lq[a], sv[b], qs[a][b]);
      }
    }
  }
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    const int r = ti + 16 * a;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int c = tj + 16 * b;
      if (r >= c) {
        sm.aqk[r * kCS + c] = expf(static_cast<float>(sm.G[r] - sm.G[c])) * dots[a][b];
      } else {
        sm.aqk[r * kCS + c] = 0.0f;
        sm.akk[c * kCS + r] = sm.beta[c] * expf(static_cast<float>(sm.G[c] - sm.G[r])) * dots[a][b];
      }
    }
#pragma unroll
    for (int b = 0; b < kJ; ++b) {
      const int j = tj + 16 * b;
      const float gam = sm.gam[r];
      sm.w[r * kVS + j] = sm.beta[r] * (sm.w[r * kVS + j] - gam * ks[a][b]);
      oacc[a][b] = gam * qs[a][b];
    }
  }
}

// D_I = (I + A_II)^-1 for the four diagonal blocks, thread t < 64 computing column t % 16 of block
// t / 16 by forward substitution: x_i = [i == c] - sum_{m<i} A_II[i][m] x_m (zero above c).
template <int kDk, int kDvt>
__device__ __forceinline__ void InvertDiagonalBlocks(const ChunkSmem& sm, int t) {
  using L = ChunkLayout<kDk, kDvt>;
  const int blk = t / kBlk, c = t % kBlk;
  const float* A = sm.akk + blk * kBlk * L::kCStride + blk * kBlk;
  float x[kBlk];
#pragma unroll
  for (int i = 0; i < kBlk; ++i) {
    float s = i == c ? 1.0f : 0.0f;
#pragma unroll
    for (int m = 0; m < i; ++m) s = fmaf(-A[i * L::kCStride + m], x[m], s);
    x[i] = s;
  }
  float* D = sm.dinv + blk * kBlk * L::kBStride;
#pragma unroll
  for (int i = 0; i < kBlk; ++i) D[i * L::kBStride + c] = x[i];
}

// Phase 2: w (the right-hand side) <- W = (I + A)^-1 RHS, block row by block row. Thread owns
// column tid % kDvt and rows tid / kDvt + kRowStep e of each 16-row block. Ends with a barrier.
template <int kDk, int kDvt>
__device__ __forceinline__ void ChunkSolve(const ChunkSmem& sm, int n) {
  using L = ChunkLayout<kDk, kDvt>;
  constexpr int kVS = L::kVStride, kCS = L::kCStride, kBS = L::kBStride;
  constexpr int kRowStep = kThreads / kDvt;
  constexpr int kRows = kBlk / kRowStep;
  static_assert(kThreads % kDvt == 0 && kBlk % kRowStep == 0);
  const int tid = threadIdx.x, sj = tid % kDvt, sr = tid / kDvt;
  const int n_blk = (n + kBlk - 1) / kBlk;  // blocks past n have W = 0 and are never read
  for (int I = 0; I < n_blk; ++I) {
    if (I == 0 && tid < kChunk) InvertDiagonalBlocks<kDk, kDvt>(sm, tid);
      // X = RHS_I - A_{I,<I} W_{<I}
#pragma unroll
    for (int e = 0; e < kRows; ++e) {
      const int r = sr + kRowStep * e, i = kBlk * I + r;
      float x = sm.w[i * kVS + sj];
      for (int m = 0; m < kBlk * I; ++m) x = fmaf(-sm.akk[i * kCS + m], sm.w[m * kVS + sj], x);
      sm.x[r * kVS + sj] = x;
    }
    __syncthreads();
    // W_I = D_I X
    const float* D = sm.dinv + I * kBlk * kBS;
#pragma unroll
    for (int e = 0; e < kRows; ++e) {
      const int r = sr + kRowStep * e;
      float w = 0.0f;
#pragma unroll
      for (int m = 0; m < kBlk; ++m) w = fmaf(D[r * kBS + m], sm.x[m * kVS + sj], w);
      sm.w[(kBlk * I + r) * kVS + sj] = w;
    }
    __syncthreads();
  }
}

// Phase 3: out rows = oacc + Aqk W (thread tile as phase 1), and S <- gamma_last S + K^T (dte W)
// (thread owns rows ti + 16 a, columns tj + 16 b of S). Reads only what phase 2 finished; each
// thread rewrites only its own elements of S.
template <typename T, int kDk, int kDvt>
__device__ __forceinline__ void ChunkOutputAndState(const DeltaArgs<T>& a, const ChunkSmem& sm,
                                                    float (&oacc)[4][kDvt / 16], int64_t row0,
                                                    int n, int h, int j0) {
  using L = ChunkLayout<kDk, kDvt>;
  constexpr int kKS = L::kKStride, kVS = L::kVStride, kCS = L::kCStride;
  constexpr int kJ = kDvt / 16, kD = kDk / 16;
  const int ti = threadIdx.x >> 4, tj = threadIdx.x & 15;
  const float gl = sm.gam[kChunk - 1];  // padded rows have g = 0: this is exp(G_{n-1})
  float sacc[kD][kJ];
#pragma unroll
  for (int d = 0; d < kD; ++d) {
#pragma unroll
    for (int b = 0; b < kJ; ++b) sacc[d][b] = gl * sm.s[(ti + 16 * d) * kVS + tj + 16 * b];
  }
#pragma unroll 2
  for (int m = 0; m < n; ++m) {
    float wv[kJ], la[4], kv[kD];
#pragma unroll
    for (int b = 0; b < kJ; ++b) wv[b] = sm.w[m * kVS + tj + 16 * b];
#pragma unroll
    for (int r = 0; r < 4; ++r) la[r] = sm.aqk[(ti + 16 * r) * kCS + m];
#pragma unroll
    for (int d = 0; d < kD; ++d) kv[d] = sm.k[m * kKS + ti + 16 * d];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
#pragma unroll
      for (int b = 0; b < kJ; ++b) oacc[r][b] = fmaf(la[r], wv[b], oacc[r][b]);
    }
    const float dte = sm.dte[m];
#pragma unroll
    for (int b = 0; b < kJ; ++b) wv[b] *= dte;
#pragma unroll
    for (int d = 0; d < kD; ++d) {
#pragma unroll
      for (int b = 0; b < kJ; ++b) sacc[d][b] = fmaf(kv[d], wv[b], sacc[d][b]);
    }
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int i = ti + 16 * r;
#pragma unroll
    for (int b = 0; b < kJ; ++b) {
      const int j = j0 + tj + 16 * b;
      if (i < n && j < a.dv) StoreF(a.out + (row0 + i) * a.out_t + h * a.out_h + j, oacc[r][b]);
    }
  }
#pragma unroll
  for (int d = 0; d < kD; ++d) {
#pragma unroll
    for (int b = 0; b < kJ; ++b) sm.s[(ti + 16 * d) * kVS + tj + 16 * b] = sacc[d][b];
  }
}

// Block (column tile, value head, sequence). kDk: Dk rounded up (K, Q and S zero-padded).
template <typename T, int kDk, int kDvt>
__global__ void __launch_bounds__(kThreads, 1) ChunkedDeltaRuleKernel(DeltaArgs<T> a) {
  using L = ChunkLayout<kDk, kDvt>;
  static_assert(kDk % 16 == 0 && kDvt % 16 == 0 && kChunk * kDk % kThreads == 0 &&
                kChunk * kDvt % kThreads == 0);
  extern __shared__ __align__(16) float smem[];
  const ChunkSmem sm = MakeChunkSmem<kDk, kDvt>(smem);
  const int tid = threadIdx.x, ti = tid >> 4, tj = tid & 15;
  const int j0 = blockIdx.x * kDvt, h = blockIdx.y, kh = h / a.group;
  const SeqInfo s = GetSeq(a.seqs, blockIdx.z);
  if (s.len <= 0) return;  // block-uniform
  float* sg = a.state + (s.slot * a.hv + h) * static_cast<int64_t>(a.dk) * a.dv;

  for (int e = tid; e < kDk * kDvt; e += kThreads) {
    const int d = e / kDvt, j = e % kDvt;
    sm.s[d * L::kVStride + j] =
        d < a.dk && j0 + j < a.dv ? sg[static_cast<int64_t>(d) * a.dv + j0 + j] : 0.0f;
  }
  const int n_chunks = (s.len + kChunk - 1) / kChunk;
  for (int chunk = 0; chunk < n_chunks; ++chunk) {
    const int64_t row0 = s.bos + static_cast<int64_t>(chunk) * kChunk;
    const int n = min(kChunk, s.len - chunk * kChunk);
    LoadChunk<T, kDk, kDvt>(a, sm, row0, n, h, kh, j0);
    __syncthreads();
    float oacc[4][kDvt / 16];
    ChunkDots<kDk, kDvt>(sm, oacc);
    __syncthreads();
    ChunkSolve<kDk, kDvt>(sm, n);
    ChunkOutputAndState<T, kDk, kDvt>(a, sm, oacc, row0, n, h, j0);
    __syncthreads();
  }
  // Each thread stores the elements of S it rewrote last.
#pragma unroll
  for (int d = 0; d < kDk / 16; ++d) {
#pragma unroll
    for (int b = 0; b < kDvt / 16; ++b) {
      const int dd = ti + 16 * d, j = j0 + tj + 16 * b;
      if (dd < a.dk && j < a.dv) {
        sg[static_cast<int64_t>(dd) * a.dv + j] = sm.s[dd * L::kVStride + tj + 16 * b];
      }
    }
  }
}

// ---- Recurrent kernel ---------------------------------------------------------------------------

// Block (32 value columns, value head, sequence); lane = column j, warp w holds S rows w + 8 r.
template <typename T, int kDk>
__global__ void __launch_bounds__(kRecWarps * 32) RecurrentDeltaRuleKernel(DeltaArgs<T> a) {
  constexpr int kRows = kDk / kRecWarps;
  __shared__ float qk[2][2][kDk];              // [token parity][q, k][d]
  __shared__ float part[2][2][kRecWarps][32];  // [token parity][S^T k, S^T q][warp][lane]
  __shared__ float kq[2];                      // [token parity]: k . q
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int j = blockIdx.x * 32 + lane, h = blockIdx.y, kh = h / a.group;
  const SeqInfo s = GetSeq(a.seqs, blockIdx.z);
  if (s.len <= 0) return;  // block-uniform
  const bool col = j < a.dv;
  float* sg = a.state + (s.slot * a.hv + h) * static_cast<int64_t>(a.dk) * a.dv + j;
  float S[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int d = warp + kRecWarps * r;
    S[r] = col && d < a.dk ? sg[static_cast<int64_t>(d) * a.dv] : 0.0f;
  }
  for (int t = 0; t < s.len; ++t) {
    const int p = t & 1;
    const int64_t row = s.bos + t;
    for (int e = threadIdx.x; e < 2 * kDk; e += kRecWarps * 32) {
      const int which = e / kDk, d = e % kDk;  // 0: q, 1: k
      float x = 0.0f;
      if (d < a.dk) {
        x = which == 0 ? LoadF(a.q + row * a.q_t + kh * a.q_h + d)
                       : LoadF(a.k + row * a.k_t + kh * a.k_h + d);
      }
      qk[p][which][d] = x;
    }
    const float vj = col ? LoadF(a.v + row * a.v_t + h * a.v_h + j) : 0.0f;
    const float decay = expf(a.g[row * a.g_t + h]);
    const float b = a.beta[row * a.beta_t + h];
    __syncthreads();
    float u = 0.0f, r_q = 0.0f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int d = warp + kRecWarps * r;
      u = fmaf(S[r], qk[p][1][d], u);
      r_q = fmaf(S[r], qk[p][0][d], r_q);
    }
    part[p][0][warp][lane] = u;
    part[p][1][warp][lane] = r_q;
    if (warp == 0) {
      float dot = 0.0f;
      for (int d = lane; d < kDk; d += 32) dot = fmaf(qk[p][0][d], qk[p][1][d], dot);
      dot = linear_detail::WarpSum(dot);
      if (lane == 0) kq[p] = dot;
    }
    __syncthreads();
    float us = 0.0f, rs = 0.0f;
#pragma unroll
    for (int w = 0; w < kRecWarps; ++w) {
      us += part[p][0][w][lane];
      rs += part[p][1][w][lane];
    }
    const float delta = b * (vj - decay * us);
    if (warp == 0 && col) {
      StoreF(a.out + row * a.out_t + h * a.out_h + j, fmaf(kq[p], delta, decay * rs));
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int d = warp + kRecWarps * r;
      S[r] = fmaf(qk[p][1][d], delta, decay * S[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int d = warp + kRecWarps * r;
    if (col && d < a.dk) sg[static_cast<int64_t>(d) * a.dv] = S[r];
  }
}

// ---- Launchers ----------------------------------------------------------------------------------

template <typename T, int kDk, int kDvt>
void LaunchChunked(const DeltaArgs<T>& a, cudaStream_t stream) {
  constexpr size_t smem = ChunkLayout<kDk, kDvt>::kBytes;
  UP_CUDA_CHECK(cudaFuncSetAttribute(ChunkedDeltaRuleKernel<T, kDk, kDvt>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid(static_cast<unsigned>((a.dv + kDvt - 1) / kDvt), static_cast<unsigned>(a.hv),
                  static_cast<unsigned>(a.seqs.batch));
  ChunkedDeltaRuleKernel<T, kDk, kDvt><<<grid, kThreads, smem, stream>>>(a);
  UP_CUDA_CHECK_LAUNCH();
}

template <typename T, int kDk>
void LaunchDeltaRule(const DeltaArgs<T>& a, bool chunked, int sm_count, cudaStream_t stream) {
  if (!chunked) {
    const dim3 grid(static_cast<unsigned>((a.dv + 31) / 32), static_cast<unsigned>(a.hv),
                    static_cast<unsigned>(a.seqs.batch));
    RecurrentDeltaRuleKernel<T, kDk><<<grid, kRecWarps * 32, 0, stream>>>(a);
    UP_CUDA_CHECK_LAUNCH();
    return;
  }
  // Wide column tiles recompute the shared K K^T / Q K^T work less often; narrow ones give more
  // blocks. Wide when they still fill every SM.
  const int64_t wide_blocks = static_cast<int64_t>(a.seqs.batch) * a.hv * ((a.dv + 63) / 64);
  if (a.dv > 32 && wide_blocks >= sm_count) {
    LaunchChunked<T, kDk, 64>(a, stream);
  } else {
    LaunchChunked<T, kDk, 32>(a, stream);
  }
}

template <typename T>
void DispatchDeltaRule(const DeltaArgs<T>& a, bool chunked, int sm_count, cudaStream_t stream) {
  if (a.dk <= 32) {
    LaunchDeltaRule<T, 32>(a, chunked, sm_count, stream);
  } else if (a.dk <= 64) {
    LaunchDeltaRule<T, 64>(a, chunked, sm_count, stream);
  } else {
    LaunchDeltaRule<T, 128>(a, chunked, sm_count, stream);
  }
}

template <typename T>
DeltaArgs<T> MakeDeltaArgs(TensorView out, TensorView q, TensorView k, TensorView v, TensorView g,
                           TensorView beta, float* state, const LinearAttentionBatch& seqs) {
  DeltaArgs<T> a;
  a.out = out.as<T>();
  a.q = q.as<T>();
  a.k = k.as<T>();
  a.v = v.as<T>();
  a.g = g.as<float>();
  a.beta = beta.as<float>();
  a.state = state;
  a.out_t = out.stride[0];
  a.out_h = out.stride[1];
  a.q_t = q.stride[0];
  a.q_h = q.stride[1];
  a.k_t = k.stride[0];
  a.k_h = k.stride[1];
  a.v_t = v.stride[0];
  a.v_h = v.stride[1];
  a.g_t = g.stride[0];
  a.beta_t = beta.stride[0];
  a.group = static_cast<int>(v.dim(1) / q.dim(1));
  a.hv = static_cast<int>(v.dim(1));
  a.dk = static_cast<int>(q.dim(2));
  a.dv = static_cast<int>(v.dim(2));
  a.seqs = seqs;
  return a;
}

// kAuto: token by token for short calls (decode); else the tensor-core chunked kernel for bf16
// activations (bf16 operands lose nothing they carry), the f32 chunked kernel for f32 ones (whose
// callers asked for f32 precision).
DeltaRuleKernel AutoKernel(DType dtype, int max_seqlen) {
  if (max_seqlen <= kDeltaRuleRecurrentMaxSeqlen) return DeltaRuleKernel::kRecurrent;
  // One chunk or less: nothing to gain from the tensor cores, so the f32 kernel keeps its
  // rounding (a short ill-conditioned prompt of the tiny Qwen3-Next sits near its model bound).
  if (max_seqlen <= kDeltaRuleF32MaxSeqlen || dtype != DType::kBF16) {
    return DeltaRuleKernel::kChunked;
  }
  return DeltaRuleKernel::kChunkedTensorCore;
}

}  // namespace

void GatedDeltaRule(DeviceContext& ctx, TensorView out, TensorView q, TensorView k, TensorView v,
                    TensorView g, TensorView beta, float* state, const LinearAttentionBatch& seqs,
                    DeltaRuleKernel kernel, void* scratch, size_t scratch_bytes) {
  constexpr const char* kOp = "GatedDeltaRule";
  using linear_detail::IsActivation;
  Require(IsActivation(q) && IsActivation(k) && IsActivation(v) && IsActivation(out) &&
              q.ndim == 3 && k.ndim == 3 && v.ndim == 3 && out.ndim == 3,
          kOp, "q, k, v and out must be bf16/f32 3-D device views with a contiguous last dim");
  Require(k.dtype == q.dtype && v.dtype == q.dtype && out.dtype == q.dtype, kOp,
          "q, k, v and out must have one dtype");
  const int64_t T = q.dim(0), Hk = q.dim(1), Dk = q.dim(2), Hv = v.dim(1), Dv = v.dim(2);
  Require(k.dim(0) == T && k.dim(1) == Hk && k.dim(2) == Dk && v.dim(0) == T, kOp,
          "k must be [T, Hk, Dk] like q and v [T, Hv, Dv]");
  Require(out.dim(0) == T && out.dim(1) == Hv && out.dim(2) == Dv, kOp, "out must be [T, Hv, Dv]");
  for (const TensorView* gate : {&g, &beta}) {
    Require(gate->device == Device::kCuda && gate->dtype == DType::kF32 && gate->ndim == 2 &&
                gate->dim(0) == T && gate->dim(1) == Hv && gate->stride[1] == 1,
            kOp, "g and beta must be f32 [T, Hv] device views");
  }
  Require(Hk > 0 && Hv % Hk == 0 && Hv <= 65535, kOp, "Hv must be a multiple of Hk (<= 65535)");
  Require(Dk >= 1 && Dk <= kMaxDk && Dv >= 1, kOp, "Dk must be in [1, 128] and Dv >= 1");
  Require(out.data != q.data && out.data != k.data && out.data != v.data, kOp,
          "out must not alias q, k or v");
  Require(seqs.batch >= 0 && seqs.batch <= 65535 && seqs.max_seqlen >= 0, kOp,
          "batch must be in [0, 65535] and max_seqlen >= 0");
  Require(seqs.cu_seqlens != nullptr || static_cast<int64_t>(seqs.batch) * seqs.max_seqlen == T,
          kOp, "without cu_seqlens, the views must have batch * max_seqlen rows");
  if (seqs.batch == 0 || seqs.max_seqlen == 0) return;
  if (kernel == DeltaRuleKernel::kAuto) {
    kernel = AutoKernel(q.dtype, seqs.max_seqlen);
    if (kernel == DeltaRuleKernel::kChunkedTensorCore) {
      kernel = DeltaRuleKernel::kChunkedTensorCoreSplit;  // where its requirements hold (below)
    }
  }
  const bool chunked = kernel == DeltaRuleKernel::kChunked;
  CudaContext& cuda = ctx.cuda();
  if (kernel == DeltaRuleKernel::kChunkedTensorCoreSplit) {
    const bool fits = scratch != nullptr && scratch_bytes >= GatedDeltaRuleScratchBytes(T, Hv, Dv);
    if (fits && q.dtype == DType::kBF16 && Dv <= 128) {
      const auto a = MakeDeltaArgs<bf16>(out, q, k, v, g, beta, state, seqs);
      if (linear_detail::CanCopyAsync(a)) {
        linear_detail::LaunchChunkedTensorCoreSplit(a, T, scratch, cuda.sm_count(), cuda.stream());
        return;
      }
    }
    kernel = DeltaRuleKernel::kChunkedTensorCore;
  }
  if (kernel == DeltaRuleKernel::kChunkedTensorCore) {
    if (q.dtype == DType::kBF16) {
      linear_detail::LaunchChunkedTensorCore(
          MakeDeltaArgs<bf16>(out, q, k, v, g, beta, state, seqs), cuda.sm_count(), cuda.stream());
    } else {
      linear_detail::LaunchChunkedTensorCore(
          MakeDeltaArgs<float>(out, q, k, v, g, beta, state, seqs), cuda.sm_count(),
          cuda.stream());
    }
  } else if (q.dtype == DType::kBF16) {
    DispatchDeltaRule(MakeDeltaArgs<bf16>(out, q, k, v, g, beta, state, seqs), chunked,
                      cuda.sm_count(), cuda.stream());
  } else {
    DispatchDeltaRule(MakeDeltaArgs<float>(out, q, k, v, g, beta, state, seqs), chunked,
                      cuda.sm_count(), cuda.stream());
  }
}

size_t GatedDeltaRuleScratchBytes(int64_t rows, int64_t hv, int64_t dv) {
  return linear_detail::SplitDeltaRuleScratchBytes(rows, static_cast<int>(hv),
                                                   static_cast<int>(dv));
}

}  // namespace uniprefill::ops::cuda
