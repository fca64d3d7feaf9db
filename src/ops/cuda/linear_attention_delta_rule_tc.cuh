// The building blocks of the tensor-core delta-rule kernels (linear_attention_delta_rule_tc.cu,
// the fused kernel; linear_attention_delta_rule_split.cu, the two-kernel one): chunk constants,
// the shared-memory layout and pointers, the chunk loads, the gates, the dot products of the
// fused kernel and the f32 solve of (I + A)^-1. The math is in linear_attention_delta_rule_tc.cu's
// header. Not a public op interface.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/flash_attention_mma.cuh"
#include "ops/cuda/linear_attention_common.cuh"
#include "ops/cuda/linear_attention_delta_rule_common.cuh"

namespace uniprefill::ops::cuda::linear_detail::tc {
using flash::CpAsync16;
using flash::CpAsyncCommit;
using flash::CpAsyncWait;
using flash::LdMatrixX4;
using flash::LdMatrixX4Trans;
using flash::MmaBf16;
using flash::PackBf16x2;
using flash::SmemAddress;

constexpr int kC = 64;          // tokens per chunk
constexpr int kWarps = 8;       // warp w owns state rows [16w, 16w + 16)
constexpr int kThreads = kWarps * 32;
constexpr int kDkPad = 128;     // Dk, zero-padded
constexpr int kKStride = kDkPad + 8;  // bf16 row stride of K, Q tiles: ldmatrix rows hit
                                      // distinct banks (272 B = 68 words)
constexpr int kCStride = kC + 8;      // bf16 row stride of the 64-wide Tinv, Aqk tiles
constexpr int kFStride = kC + 1;      // f32 row stride of A and Tinv (column reads conflict-free)
constexpr int kXStride = 17;          // f32 row stride of the solve's 16 x 16 scratch blocks
constexpr int kBlk = 16;              // rows per diagonal block of the solve

// The 16-row tile of the chunk that warp w works on in the phases split by row tiles. Tile r costs
// r + 1 units (causal), and warps w and w + 4 share a scheduler: pairing tile w with tile 3 - w
// gives every scheduler the same work.
__device__ __forceinline__ int RowTile(int warp) { return warp < 4 ? warp : 7 - warp; }

// Shared memory, byte offsets (every bf16 tile 16-byte aligned for ldmatrix and cp.async).
template <int kDvt>
struct TcLayout {
  static constexpr int kVStride = kDvt + 8;                        // bf16 rows of V-wide tiles
  static constexpr size_t kKTile = size_t{kC} * kKStride * 2;      // bf16 [kC][kKStride]
  static constexpr size_t kVTile = size_t{kC} * kVStride * 2;      // bf16 [kC][kVStride]
  static constexpr size_t kCTile = size_t{kC} * kCStride * 2;      // bf16 [kC][kCStride]
  static constexpr size_t kFTile = size_t{kC} * kFStride * 4;      // f32 [kC][kFStride]
  static constexpr size_t kK = 0;                                  // 2 buffers: K
  static constexpr size_t kQ = kK + 2 * kKTile;                    // 2 buffers: Q
  static constexpr size_t kV = kQ + 2 * kKTile;                    // 2 buffers: V
  static constexpr size_t kS = kV + 2 * kVTile;                    // bf16 [kDkPad][kVStride]: S0
  static constexpr size_t kR = kS + size_t{kDkPad} * kVStride * 2;  // RHS
  static constexpr size_t kVn = kR + kVTile;                       // Vnew
  static constexpr size_t kVd = kVn + kVTile;                      // dte Vnew
  static constexpr size_t kT = kVd + kVTile;                       // bf16 Tinv
  static constexpr size_t kAq = kT + kCTile;                       // bf16 Aqk
  static constexpr size_t kA = kAq + kCTile;                       // f32 A
  static constexpr size_t kTf = kA + kFTile;                       // f32 Tinv
  static constexpr size_t kX = kTf + kFTile;                       // f32 [3][kBlk][kXStride]
  static constexpr size_t kGraw = kX + 3 * kBlk * kXStride * 4;    // f32 [2][kC]: g
  static constexpr size_t kBraw = kGraw + 2 * kC * 4;              // f32 [2][kC]: beta
  static constexpr size_t kBeta = kBraw + 2 * kC * 4;              // f32 [kC]
  static constexpr size_t kGam = kBeta + kC * 4;                   // f32 [kC]: exp(G_i)
  static constexpr size_t kDte = kGam + kC * 4;                    // f32 [kC]: exp(G_last - G_i)
  static constexpr size_t kG2 = kDte + kC * 4;                     // f32 [kC]: G log2(e)
  static constexpr size_t kBytes = kG2 + kC * 4;
  static_assert(kX % 16 == 0 && kVTile % 16 == 0 && kKTile % 16 == 0);
};

// Pointers into the shared memory (see TcLayout for dtypes and shapes). The double buffers are
// reached through K(p) etc. (an array indexed by a runtime p would live in local memory).
struct TcSmem {
  bf16 *k0, *q0, *v0;        // buffer 0 of [kC][kKStride], [kC][kKStride], [kC][kVStride]
  int v_elems;               // elements per V buffer
  float *graw0, *braw0;      // buffer 0 of [kC] each
  bf16 *s, *r, *vn, *vd;     // [kDkPad][kVStride], then [kC][kVStride] each
  bf16 *t, *aq;              // [kC][kCStride]
  float *a, *tf, *x;         // [kC][kFStride] x2, [3][kBlk][kXStride]
  float *beta, *gam, *dte;   // [kC]
  float* g2;                 // [kC]: G_i log2(e), for exp(G_i - G_m) = exp2(g2_i - g2_m)
  __device__ bf16* K(int p) const { return k0 + p * (kC * kKStride); }
  __device__ bf16* Q(int p) const { return q0 + p * (kC * kKStride); }
  __device__ bf16* V(int p) const { return v0 + p * v_elems; }
  __device__ float* Graw(int p) const { return graw0 + p * kC; }
  __device__ float* Braw(int p) const { return braw0 + p * kC; }
};

template <int kDvt>
__device__ __forceinline__ TcSmem MakeTcSmem(char* base) {
  using L = TcLayout<kDvt>;
  auto b16 = [base](size_t off) { return reinterpret_cast<bf16*>(base + off); };
  auto f32 = [base](size_t off) { return reinterpret_cast<float*>(base + off); };
  TcSmem s;
  s.k0 = b16(L::kK);
  s.q0 = b16(L::kQ);
  s.v0 = b16(L::kV);
  s.v_elems = kC * L::kVStride;
  s.graw0 = f32(L::kGraw);
  s.braw0 = f32(L::kBraw);
  s.s = b16(L::kS);
  s.r = b16(L::kR);
  s.vn = b16(L::kVn);
  s.vd = b16(L::kVd);
  s.t = b16(L::kT);
  s.aq = b16(L::kAq);
  s.a = f32(L::kA);
  s.tf = f32(L::kTf);
  s.x = f32(L::kX);
  s.beta = f32(L::kBeta);
  s.gam = f32(L::kGam);
  s.dte = f32(L::kDte);
  s.g2 = f32(L::kG2);
  return s;
}

// 4-byte cp.async with zero fill when !valid (gmem must still be a mapped address).
__device__ __forceinline__ void CpAsync4(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(SmemAddress(smem)),
               "l"(gmem), "r"(valid ? 4 : 0)
               : "memory");
}

__device__ __forceinline__ void StorePair(bf16* p, float lo, float hi) {
  *reinterpret_cast<uint32_t*>(p) = PackBf16x2(lo, hi);
}

// ldmatrix addresses for lane l of a 16 x 16 tile at (row0, col0) of a row-major bf16 tile.
// Plain: the A operand (registers a0..a3); .trans on a [k][n] tile: B of two n-tiles (b0, b1 of
// cols col0.., then of col0 + 8..). Both use matrices (r, c), (r + 8, c), (r, c + 8),
// (r + 8, c + 8).
__device__ __forceinline__ const bf16* TileA(const bf16* m, int stride, int row0, int col0,
                                             int l) {
  return m + (row0 + (l & 7) + ((l >> 3) & 1) * 8) * stride + col0 + (l >> 4) * 8;
}
// B of two n-tiles from an [n][k] tile (n rows, k contiguous; plain ldmatrix), and the A operand
// of X^T from an [k][m] tile (ldmatrix.trans): matrices (r, c), (r, c + 8), (r + 8, c),
// (r + 8, c + 8).
__device__ __forceinline__ const bf16* TileBt(const bf16* m, int stride, int row0, int col0,
                                              int l) {
  return m + (row0 + (l & 7) + (l >> 4) * 8) * stride + col0 + ((l >> 3) & 1) * 8;
}

// Issues the loads of chunk rows [row0, row0 + n) into buffer p: K, Q (Dk zero-padded to 128),
// V columns [j0, j0 + kDvt), g and beta, all zero past n. kAsync: 16-byte cp.async (bf16 views
// with 16-byte aligned rows and Dk, Dv multiples of 8); else element loads rounded to bf16.
template <typename T, int kDvt, bool kAsync>
__device__ __forceinline__ void IssueChunkLoad(const DeltaArgs<T>& a, const TcSmem& sm, int p,
                                               int64_t row0, int n, int h, int kh, int j0) {
  using L = TcLayout<kDvt>;
  const int tid = threadIdx.x;
  constexpr int kKSegs = kC * kDkPad / 8, kVSegs = kC * kDvt / 8;
  static_assert(kKSegs % kThreads == 0 && kVSegs % kThreads == 0);
#pragma unroll
  for (int e = 0; e < 2 * kKSegs / kThreads; ++e) {
    const int idx = tid + e * kThreads, which = idx / kKSegs, seg = idx % kKSegs;
    const int i = seg / (kDkPad / 8), d0 = seg % (kDkPad / 8) * 8;
    const T* src = which == 0 ? a.k + (row0 + i) * a.k_t + kh * a.k_h + d0
                              : a.q + (row0 + i) * a.q_t + kh * a.q_h + d0;
    bf16* dst = (which == 0 ? sm.K(p) : sm.Q(p)) + i * kKStride + d0;
    if constexpr (kAsync) {
      const bool ok = i < n && d0 < a.dk;
      CpAsync16(dst, ok ? static_cast<const void*>(src) : a.k, ok);
    } else {
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        dst[c] = __float2bfloat16_rn(i < n && d0 + c < a.dk ? LoadF(src + c) : 0.0f);
      }
    }
  }
#pragma unroll
  for (int e = 0; e < kVSegs / kThreads; ++e) {
    const int seg = tid + e * kThreads, i = seg / (kDvt / 8), c0 = seg % (kDvt / 8) * 8;
    const T* src = a.v + (row0 + i) * a.v_t + h * a.v_h + j0 + c0;
    bf16* dst = sm.V(p) + i * L::kVStride + c0;
    if constexpr (kAsync) {
      const bool ok = i < n && j0 + c0 < a.dv;
      CpAsync16(dst, ok ? static_cast<const void*>(src) : a.v, ok);
    } else {
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        dst[c] = __float2bfloat16_rn(i < n && j0 + c0 + c < a.dv ? LoadF(src + c) : 0.0f);
      }
    }
  }
  if (tid < 2 * kC) {
    const int i = tid % kC;
    const bool ok = i < n;
    if (tid < kC) {
      CpAsync4(sm.Graw(p) + i, ok ? a.g + (row0 + i) * a.g_t + h : a.g, ok);
    } else {
      CpAsync4(sm.Braw(p) + i, ok ? a.beta + (row0 + i) * a.beta_t + h : a.beta, ok);
    }
  }
  CpAsyncCommit();
}

// Warp 0: the gates of buffer p (G as a warp scan in double; lane l owns rows 2l, 2l + 1).
__device__ __forceinline__ void ChunkGates(const TcSmem& sm, int p) {
  const int lane = threadIdx.x;
  const int i0 = 2 * lane, i1 = i0 + 1;
  const double g0 = sm.Graw(p)[i0], g1 = sm.Graw(p)[i1];
  sm.beta[i0] = sm.Braw(p)[i0];
  sm.beta[i1] = sm.Braw(p)[i1];
  double incl = g0 + g1;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const double y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  const double last = __shfl_sync(0xffffffffu, incl, 31);
  const double G0 = incl - g1, G1 = incl;
  // G in f32 is within 2^-24 |G| (|G| < ~200 in a chunk): exp(G_i - G_m) to ~1e-5 relative,
  // far below the bf16 rounding of the products it scales. One MUFU per element, no f64 convert.
  constexpr double kLog2e = 1.4426950408889634;
  sm.g2[i0] = static_cast<float>(G0 * kLog2e);
  sm.g2[i1] = static_cast<float>(G1 * kLog2e);
  sm.gam[i0] = expf(static_cast<float>(G0));
  sm.gam[i1] = expf(static_cast<float>(G1));
  sm.dte[i0] = expf(static_cast<float>(last - G0));
  sm.dte[i1] = expf(static_cast<float>(last - G1));
}

// Warp w writes its state rows [16w, 16w + 16) as bf16 (the B operand of K S0 and Q S0).
template <int kDvt>
__device__ __forceinline__ void StoreStateBf16(const TcSmem& sm, const float (&S)[kDvt / 8][4]) {
  constexpr int kVS = TcLayout<kDvt>::kVStride;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int jt = 0; jt < kDvt / 8; ++jt) {
    const int d = 16 * warp + g, j = 8 * jt + 2 * t;
    StorePair(sm.s + d * kVS + j, S[jt][0], S[jt][1]);
    StorePair(sm.s + (d + 8) * kVS + j, S[jt][2], S[jt][3]);
  }
}

// Dots phase: warp w < 4 takes row tile w of K, warp w >= 4 row tile 7 - w of Q (operand X);
// dots = X K^T over the tiles at or left of the diagonal, prod = X S0. Then
//   K warps: A[i][m] = beta_i exp(G_i - G_m) dots (m < i), RHS = beta_i (v_i - gamma_i prod);
//   Q warps: Aqk[i][m] = exp(G_i - G_m) dots (m <= i, else 0), oacc = gamma_i prod.
template <int kDvt>
__device__ __forceinline__ void ChunkDots(const TcSmem& sm, int p, float (&oacc)[kDvt / 8][4]) {
  constexpr int kVS = TcLayout<kDvt>::kVStride;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const bool is_q = warp >= 4;
  const int rt = RowTile(warp);
  const bf16* X = is_q ? sm.Q(p) : sm.K(p);
  float dots[8][4] = {}, prod[kDvt / 8][4] = {};
#pragma unroll
  for (int kk = 0; kk < kDkPad / 16; ++kk) {
    uint32_t af[4];
    LdMatrixX4(af, TileA(X, kKStride, 16 * rt, 16 * kk, lane));
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (u > rt) continue;  // warp-uniform: tiles right of the diagonal are masked anyway
      uint32_t bf[4];
      LdMatrixX4(bf, TileBt(sm.K(p), kKStride, 16 * u, 16 * kk, lane));
      MmaBf16(dots[2 * u], af, bf[0], bf[1]);
      MmaBf16(dots[2 * u + 1], af, bf[2], bf[3]);
    }
#pragma unroll
    for (int u = 0; u < kDvt / 16; ++u) {
      uint32_t bf[4];
      LdMatrixX4Trans(bf, TileA(sm.s, kVS, 16 * kk, 16 * u, lane));
      MmaBf16(prod[2 * u], af, bf[0], bf[1]);
      MmaBf16(prod[2 * u + 1], af, bf[2], bf[3]);
    }
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int i = 16 * rt + g + 8 * hh;
    const float g2i = sm.g2[i];
    const float bi = sm.beta[i], gi = sm.gam[i];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      if (nt >= 2 * (rt + 1)) continue;
      const int m = 8 * nt + 2 * t;
      const float d0 = m <= i ? exp2f(g2i - sm.g2[m]) * dots[nt][2 * hh] : 0.0f;
      const float d1 = m + 1 <= i ? exp2f(g2i - sm.g2[m + 1]) * dots[nt][2 * hh + 1] : 0.0f;
      if (is_q) {
        StorePair(sm.aq + i * kCStride + m, d0, d1);
      } else {  // strictly lower: the diagonal (m == i) is the identity's
        sm.a[i * kFStride + m] = m < i ? bi * d0 : 0.0f;
        sm.a[i * kFStride + m + 1] = m + 1 < i ? bi * d1 : 0.0f;
      }
    }
#pragma unroll
    for (int jt = 0; jt < kDvt / 8; ++jt) {
      const int j = 8 * jt + 2 * t;
      const float p0 = prod[jt][2 * hh], p1 = prod[jt][2 * hh + 1];
      if (is_q) {
        oacc[jt][2 * hh] = gi * p0;
        oacc[jt][2 * hh + 1] = gi * p1;
      } else {
        const float v0 = __bfloat162float(sm.V(p)[i * kVS + j]);
        const float v1 = __bfloat162float(sm.V(p)[i * kVS + j + 1]);
        StorePair(sm.r + i * kVS + j, bi * (v0 - gi * p0), bi * (v1 - gi * p1));
      }
    }
  }
}

// Tinv = (I + A)^-1 in f32 (unit lower triangular), also written as bf16 (its strictly upper
// blocks stay zero from the kernel's start). Diagonal blocks by forward substitution (thread t <
// 64: column t % 16 of block t / 16), then block rows 1..3. Ends with a barrier.
__device__ __forceinline__ void InvertUnitLower(const TcSmem& sm) {
  const int tid = threadIdx.x;
  if (tid < kC) {
    const int blk = tid / kBlk, c = tid % kBlk;
    const float* A = sm.a + blk * kBlk * kFStride + blk * kBlk;
    float x[kBlk];
#pragma unroll
    for (int i = 0; i < kBlk; ++i) {
      float s = i == c ? 1.0f : 0.0f;
#pragma unroll
      for (int m = 0; m < i; ++m) s = fmaf(-A[i * kFStride + m], x[m], s);
      x[i] = s;
    }
#pragma unroll
    for (int i = 0; i < kBlk; ++i) {
      const int r = blk * kBlk + i, col = blk * kBlk + c;
      sm.tf[r * kFStride + col] = x[i];
      sm.t[r * kCStride + col] = __float2bfloat16_rn(x[i]);
    }
  }
  __syncthreads();
#pragma unroll
  for (int I = 1; I < kC / kBlk; ++I) {
    // X_IJ = sum_{J <= M < I} A_IM T_MJ, for J < I (thread: element tid of every block J).
    const int r = tid / kBlk, c = tid % kBlk;
#pragma unroll
    for (int J = 0; J < I; ++J) {
      const float* arow = sm.a + (kBlk * I + r) * kFStride;
      float x[4] = {};  // four independent FMA chains
#pragma unroll
      for (int m = kBlk * J; m < kBlk * I; ++m) {
        x[m & 3] = fmaf(arow[m], sm.tf[m * kFStride + kBlk * J + c], x[m & 3]);
      }
      sm.x[(J * kBlk + r) * kXStride + c] = (x[0] + x[1]) + (x[2] + x[3]);
    }
    __syncthreads();
    // T_IJ = -D_I X_IJ (D_I's zeros above the diagonal included: straight-line code).
    const float* drow = sm.tf + (kBlk * I + r) * kFStride + kBlk * I;
#pragma unroll
    for (int J = 0; J < I; ++J) {
      float y[4] = {};
#pragma unroll
      for (int m = 0; m < kBlk; ++m) {
        y[m & 3] = fmaf(-drow[m], sm.x[(J * kBlk + m) * kXStride + c], y[m & 3]);
      }
      const float t_ij = (y[0] + y[1]) + (y[2] + y[3]);
      const int row = kBlk * I + r, col = kBlk * J + c;
      sm.tf[row * kFStride + col] = t_ij;
      sm.t[row * kCStride + col] = __float2bfloat16_rn(t_ij);
    }
    __syncthreads();
  }
}
// S <- gamma_last S + K^T (dte Vnew) on warp w's rows; warps 4-7 finish O += Aqk Vnew and store
// their output rows (row i < n, column j0 + j < Dv).
template <typename T, int kDvt>
__device__ __forceinline__ void ChunkUpdate(const DeltaArgs<T>& a, const TcSmem& sm, int p,
                                            float (&S)[kDvt / 8][4], float (&oacc)[kDvt / 8][4],
                                            int64_t row0, int n, int h, int j0) {
  constexpr int kVS = TcLayout<kDvt>::kVStride;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const float gl = sm.gam[kC - 1];  // padded rows have g = 0: this is exp(G_{n-1})
#pragma unroll
  for (int jt = 0; jt < kDvt / 8; ++jt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) S[jt][e] *= gl;
  }
  const int n_kt = (n + 15) / 16;  // token tiles past n have Vnew = 0
#pragma unroll
  for (int kt = 0; kt < 4; ++kt) {
    if (kt >= n_kt) continue;
    uint32_t af[4];  // A = K^T: rows d of this warp, columns tokens 16 kt..
    LdMatrixX4Trans(af, TileBt(sm.K(p), kKStride, 16 * kt, 16 * warp, lane));
#pragma unroll
    for (int u = 0; u < kDvt / 16; ++u) {
      uint32_t bf[4];
      LdMatrixX4Trans(bf, TileA(sm.vd, kVS, 16 * kt, 16 * u, lane));
      MmaBf16(S[2 * u], af, bf[0], bf[1]);
      MmaBf16(S[2 * u + 1], af, bf[2], bf[3]);
    }
  }
  if (warp < 4) return;  // warp-uniform
  const int rt = RowTile(warp);  // the tile whose gamma Q S0 this warp holds
#pragma unroll
  for (int kt = 0; kt < 4; ++kt) {
    if (kt > rt) continue;  // Aqk is lower triangular
    uint32_t af[4];
    LdMatrixX4(af, TileA(sm.aq, kCStride, 16 * rt, 16 * kt, lane));
#pragma unroll
    for (int u = 0; u < kDvt / 16; ++u) {
      uint32_t bf[4];
      LdMatrixX4Trans(bf, TileA(sm.vn, kVS, 16 * kt, 16 * u, lane));
      MmaBf16(oacc[2 * u], af, bf[0], bf[1]);
      MmaBf16(oacc[2 * u + 1], af, bf[2], bf[3]);
    }
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int i = 16 * rt + g + 8 * hh;
    if (i >= n) continue;
    T* orow = a.out + (row0 + i) * a.out_t + h * a.out_h;
#pragma unroll
    for (int jt = 0; jt < kDvt / 8; ++jt) {
      const int j = j0 + 8 * jt + 2 * t;
      if (j < a.dv) StoreF(orow + j, oacc[jt][2 * hh]);
      if (j + 1 < a.dv) StoreF(orow + j + 1, oacc[jt][2 * hh + 1]);
    }
  }
}

// The state tile of a block as mma accumulators: f32 [Dk, Dvt] (columns j0..), warp w rows
// 16w + g (+8), columns 8 jt + 2t (+1); zero outside [Dk, Dv).
template <int kDvt, typename T>
__device__ __forceinline__ void LoadStateTile(const DeltaArgs<T>& a, const float* sg, int j0,
                                              float (&S)[kDvt / 8][4]) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int jt = 0; jt < kDvt / 8; ++jt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int d = 16 * warp + g + 8 * (e >> 1), j = j0 + 8 * jt + 2 * t + (e & 1);
      S[jt][e] = d < a.dk && j < a.dv ? sg[static_cast<int64_t>(d) * a.dv + j] : 0.0f;
    }
  }
}
template <int kDvt, typename T>
__device__ __forceinline__ void StoreStateTile(const DeltaArgs<T>& a, float* sg, int j0,
                                               const float (&S)[kDvt / 8][4]) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int jt = 0; jt < kDvt / 8; ++jt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int d = 16 * warp + g + 8 * (e >> 1), j = j0 + 8 * jt + 2 * t + (e & 1);
      if (d < a.dk && j < a.dv) sg[static_cast<int64_t>(d) * a.dv + j] = S[jt][e];
    }
  }
}

}  // namespace uniprefill::ops::cuda::linear_detail::tc
