// DeltaRuleKernel::kChunkedTensorCoreSplit: kChunkedTensorCore's math in two kernels, as
// flash-linear-attention splits its chunked delta rule, so that the work which does not depend on
// the state leaves the sequential loop over chunks:
//   prep (one block per chunk and value head, all in parallel): G, gamma, dte, A = beta K K^T
//        (decayed, strictly lower), Aqk = Q K^T (decayed, lower), Tinv = (I + A)^-1 (the fused
//        kernel's f32 solve), and the two halves of the deltas, W = Tinv diag(beta gamma) K and
//        U = Tinv diag(beta) V, written to scratch (bf16; gamma, dte f32);
//   scan (one block per value-column tile and value head, chunks in order): Vnew = U - W S0,
//        O = diag(gamma) Q S0 + Aqk Vnew, S <- gamma_last S0 + K^T diag(dte) Vnew.
// Vnew = Tinv beta (v - gamma K S0) = U - W S0 is the fused kernel's RHS product split by
// linearity; the roundings move (U and W are rounded to bf16 instead of RHS), not their size. The
// fused kernel repeats the dots and the solve in each of its Dv / Dvt column tiles and keeps them
// on the chain of chunks; here the chain holds two products and the update only.
// bf16 activations whose rows cp.async can copy, Dv <= 128; the caller's scratch
// (SplitDeltaRuleScratchBytes: ~0.65 KB per row and value head at Dv 128, 2.7 GB for Qwen3-Next's
// 32 value heads at 128K rows).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "ops/cuda/linear_attention_delta_rule_split.h"
#include "ops/cuda/linear_attention_delta_rule_tc.cuh"

namespace uniprefill::ops::cuda::linear_detail {
namespace {

using namespace tc;  // NOLINT: the kernels are written in the building blocks' terms

// The prep kernel's outputs, indexed by token row (the rows of q, k, v).
struct SplitScratch {
  bf16* w = nullptr;      // [T, Hv, kDkPad]: Tinv diag(beta gamma) K (zero past Dk)
  bf16* u = nullptr;      // [T, Hv, Dv]: Tinv diag(beta) V
  bf16* aqk = nullptr;    // [T, Hv, kC]: row i of its chunk's Aqk (columns past i unused)
  float* gam = nullptr;   // [T, Hv]: exp(G_i)
  float* dte = nullptr;   // [T, Hv]: exp(G_last - G_i)
};

// ---- prep: one block per (chunk, value head, sequence) ----

// Shared memory of the prep kernel: one chunk's K, Q, V (V as wide as 128 columns), bf16 Tinv,
// f32 A and Tinv, the solve's scratch, the gates (TcSmem's fields; the scan's are unset).
struct PrepLayout {
  static constexpr int kVStride = TcLayout<128>::kVStride;
  static constexpr size_t kKTile = size_t{kC} * kKStride * 2;
  static constexpr size_t kK = 0, kQ = kK + kKTile, kV = kQ + kKTile;
  static constexpr size_t kT = kV + size_t{kC} * kVStride * 2;
  static constexpr size_t kA = kT + size_t{kC} * kCStride * 2;
  static constexpr size_t kTf = kA + size_t{kC} * kFStride * 4;
  static constexpr size_t kX = kTf + size_t{kC} * kFStride * 4;
  static constexpr size_t kGraw = kX + 3 * kBlk * kXStride * 4;
  static constexpr size_t kBraw = kGraw + kC * 4, kBeta = kBraw + kC * 4;
  static constexpr size_t kGam = kBeta + kC * 4, kDte = kGam + kC * 4, kG2 = kDte + kC * 4;
  static constexpr size_t kBytes = kG2 + kC * 4;
};

__device__ __forceinline__ TcSmem MakePrepSmem(char* base) {
  using L = PrepLayout;
  auto b16 = [base](size_t off) { return reinterpret_cast<bf16*>(base + off); };
  auto f32 = [base](size_t off) { return reinterpret_cast<float*>(base + off); };
  TcSmem s{};
  s.k0 = b16(L::kK);
  s.q0 = b16(L::kQ);
  s.v0 = b16(L::kV);
  s.v_elems = kC * L::kVStride;
  s.graw0 = f32(L::kGraw);
  s.braw0 = f32(L::kBraw);
  s.t = b16(L::kT);
  s.a = f32(L::kA);
  s.tf = f32(L::kTf);
  s.x = f32(L::kX);
  s.beta = f32(L::kBeta);
  s.gam = f32(L::kGam);
  s.dte = f32(L::kDte);
  s.g2 = f32(L::kG2);
  return s;
}

// Warp w < 4: row tile w of K K^T -> A (f32, beta_i exp(G_i - G_m), strictly lower); warp w >= 4:
// row tile 7 - w of Q K^T -> Aqk (exp(G_i - G_m), lower), straight to scratch for rows i < n.
__device__ __forceinline__ void PrepDots(const TcSmem& sm, const SplitScratch& o, int hv,
                                         int64_t row0, int n, int h) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const bool is_q = warp >= 4;
  const int rt = RowTile(warp);
  const bf16* X = is_q ? sm.Q(0) : sm.K(0);
  float dots[8][4] = {};
#pragma unroll
  for (int kk = 0; kk < kDkPad / 16; ++kk) {
    uint32_t af[4];
    LdMatrixX4(af, TileA(X, kKStride, 16 * rt, 16 * kk, lane));
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (u > rt) continue;  // warp-uniform: right of the diagonal stays unused
      uint32_t bf[4];
      LdMatrixX4(bf, TileBt(sm.K(0), kKStride, 16 * u, 16 * kk, lane));
      MmaBf16(dots[2 * u], af, bf[0], bf[1]);
      MmaBf16(dots[2 * u + 1], af, bf[2], bf[3]);
    }
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int i = 16 * rt + g + 8 * hh;
    const float g2i = sm.g2[i], bi = sm.beta[i];
    bf16* aq_row = o.aqk + ((row0 + i) * hv + h) * kC;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      if (nt >= 2 * (rt + 1)) continue;
      const int m = 8 * nt + 2 * t;
      const float d0 = m <= i ? exp2f(g2i - sm.g2[m]) * dots[nt][2 * hh] : 0.0f;
      const float d1 = m + 1 <= i ? exp2f(g2i - sm.g2[m + 1]) * dots[nt][2 * hh + 1] : 0.0f;
      if (is_q) {
        if (i < n) StorePair(aq_row + m, d0, d1);
      } else {  // strictly lower: the diagonal (m == i) is the identity's
        sm.a[i * kFStride + m] = m < i ? bi * d0 : 0.0f;
        sm.a[i * kFStride + m + 1] = m + 1 < i ? bi * d1 : 0.0f;
      }
    }
  }
}

// out rows i < n (row stride ld, columns < cols) = Tinv X, X a [kC][stride] bf16 tile of 128
// columns: warp w takes row tile RowTile(w) and column half w / 4.
__device__ __forceinline__ void PrepProduct(const TcSmem& sm, const bf16* X, int stride, bf16* out,
                                            int64_t ld, int cols, int n) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int rt = RowTile(warp), c0 = (warp >> 2) * 64;
  float acc[8][4] = {};
#pragma unroll
  for (int kt = 0; kt < 4; ++kt) {
    if (kt > rt) continue;  // Tinv is lower triangular
    uint32_t af[4];
    LdMatrixX4(af, TileA(sm.t, kCStride, 16 * rt, 16 * kt, lane));
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      uint32_t bf[4];
      LdMatrixX4Trans(bf, TileA(X, stride, 16 * kt, c0 + 16 * u, lane));
      MmaBf16(acc[2 * u], af, bf[0], bf[1]);
      MmaBf16(acc[2 * u + 1], af, bf[2], bf[3]);
    }
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int i = 16 * rt + g + 8 * hh;
    if (i >= n) continue;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int j = c0 + 8 * nt + 2 * t;  // cols is a multiple of 8: pairs are whole
      if (j < cols) StorePair(out + i * ld + j, acc[nt][2 * hh], acc[nt][2 * hh + 1]);
    }
  }
}

__global__ void __launch_bounds__(kThreads) SplitPrepKernel(DeltaArgs<bf16> a, SplitScratch o) {
  extern __shared__ __align__(16) char smem_raw[];
  const TcSmem sm = MakePrepSmem(smem_raw);
  const SeqInfo seq = GetSeq(a.seqs, blockIdx.z);
  const int chunk = blockIdx.x, h = blockIdx.y, kh = h / a.group, tid = threadIdx.x;
  if (chunk * kC >= seq.len) return;  // block-uniform
  const int64_t row0 = seq.bos + static_cast<int64_t>(chunk) * kC;
  const int n = min(kC, seq.len - chunk * kC);
  IssueChunkLoad<bf16, 128, true>(a, sm, 0, row0, n, h, kh, 0);
  for (int e = tid; e < kC * kC; e += kThreads) {  // bf16 Tinv's strictly upper blocks: zero
    const int r = e / kC, c = e % kC;
    if (c / kBlk > r / kBlk) sm.t[r * kCStride + c] = __float2bfloat16_rn(0.0f);
  }
  CpAsyncWait<0>();
  __syncthreads();
  if (tid < 32) ChunkGates(sm, 0);
  __syncthreads();
  PrepDots(sm, o, a.hv, row0, n, h);
  __syncthreads();
  InvertUnitLower(sm);  // ends with a barrier
  // In place: K rows scaled by beta_i gamma_i, V rows by beta_i (rounded to bf16).
  constexpr int kVS = PrepLayout::kVStride;
  for (int e = tid; e < kC * kDkPad / 2; e += kThreads) {
    const int i = e / (kDkPad / 2), d = 2 * (e % (kDkPad / 2));
    const float bk = sm.beta[i] * sm.gam[i], bv = sm.beta[i];
    bf16* kp = sm.K(0) + i * kKStride + d;
    bf16* vp = sm.V(0) + i * kVS + d;
    StorePair(kp, bk * __bfloat162float(kp[0]), bk * __bfloat162float(kp[1]));
    StorePair(vp, bv * __bfloat162float(vp[0]), bv * __bfloat162float(vp[1]));
  }
  __syncthreads();
  PrepProduct(sm, sm.K(0), kKStride, o.w + (row0 * a.hv + h) * kDkPad,
              static_cast<int64_t>(a.hv) * kDkPad, kDkPad, n);
  PrepProduct(sm, sm.V(0), kVS, o.u + (row0 * a.hv + h) * a.dv,
              static_cast<int64_t>(a.hv) * a.dv, a.dv, n);
  if (tid < n) {
    o.gam[(row0 + tid) * a.hv + h] = sm.gam[tid];
    o.dte[(row0 + tid) * a.hv + h] = sm.dte[tid];
  }
}

// ---- scan: one block per (value-column tile, value head, sequence), chunks in order ----

// Shared memory of the scan kernel, double-buffered per chunk: K, Q, W [kC][kKStride], U
// [kC][kVStride], Aqk [kC][kCStride], gamma and dte [kC]; then S0 (bf16 [kDkPad][kVStride]),
// Vnew and dte Vnew ([kC][kVStride]).
template <int kDvt>
struct ScanLayout {
  static constexpr int kVStride = TcLayout<kDvt>::kVStride;
  static constexpr size_t kKTile = size_t{kC} * kKStride * 2;
  static constexpr size_t kVTile = size_t{kC} * kVStride * 2;
  static constexpr size_t kCTile = size_t{kC} * kCStride * 2;
  static constexpr size_t kK = 0, kQ = kK + 2 * kKTile, kW = kQ + 2 * kKTile;
  static constexpr size_t kU = kW + 2 * kKTile, kAq = kU + 2 * kVTile;
  static constexpr size_t kS = kAq + 2 * kCTile;
  static constexpr size_t kVn = kS + size_t{kDkPad} * kVStride * 2, kVd = kVn + kVTile;
  static constexpr size_t kGam = kVd + kVTile, kDte = kGam + 2 * kC * 4;
  static constexpr size_t kBytes = kDte + 2 * kC * 4;
};

template <int kDvt>
struct ScanSmem {
  TcSmem tc;  // k0, q0 (double), s, vn, vd; aq and gam point at the current chunk's buffer
  bf16 *w0, *u0, *aq0;
  float *gam0, *dte0;
  __device__ bf16* W(int p) const { return w0 + p * (kC * kKStride); }
  __device__ bf16* U(int p) const { return u0 + p * (kC * TcLayout<kDvt>::kVStride); }
  __device__ bf16* Aq(int p) const { return aq0 + p * (kC * kCStride); }
  __device__ float* Gam(int p) const { return gam0 + p * kC; }
  __device__ float* Dte(int p) const { return dte0 + p * kC; }
};

template <int kDvt>
__device__ __forceinline__ ScanSmem<kDvt> MakeScanSmem(char* base) {
  using L = ScanLayout<kDvt>;
  ScanSmem<kDvt> s{};
  s.tc.k0 = reinterpret_cast<bf16*>(base + L::kK);
  s.tc.q0 = reinterpret_cast<bf16*>(base + L::kQ);
  s.tc.s = reinterpret_cast<bf16*>(base + L::kS);
  s.tc.vn = reinterpret_cast<bf16*>(base + L::kVn);
  s.tc.vd = reinterpret_cast<bf16*>(base + L::kVd);
  s.w0 = reinterpret_cast<bf16*>(base + L::kW);
  s.u0 = reinterpret_cast<bf16*>(base + L::kU);
  s.aq0 = reinterpret_cast<bf16*>(base + L::kAq);
  s.gam0 = reinterpret_cast<float*>(base + L::kGam);
  s.dte0 = reinterpret_cast<float*>(base + L::kDte);
  return s;
}

// Issues the loads of chunk rows [row0, row0 + n) into buffer p (zero past n): K, Q of key head
// kh, W, Aqk of value head h, U columns [j0, j0 + kDvt), gamma and dte. Slot kC - 1 of gamma holds
// the last real row's (the update's gamma_last) when n < kC; that row's other uses are padding.
template <int kDvt>
__device__ __forceinline__ void IssueScanLoad(const DeltaArgs<bf16>& a, const SplitScratch& o,
                                              const ScanSmem<kDvt>& sm, int p, int64_t row0,
                                              int n, int h, int kh, int j0) {
  constexpr int kVS = TcLayout<kDvt>::kVStride;
  constexpr int kKSegs = kC * kDkPad / 8, kVSegs = kC * kDvt / 8, kASegs = kC * kC / 8;
  static_assert(kKSegs % kThreads == 0 && kVSegs % kThreads == 0 && kASegs % kThreads == 0);
  const int tid = threadIdx.x;
#pragma unroll
  for (int e = 0; e < 3 * kKSegs / kThreads; ++e) {
    const int idx = tid + e * kThreads, which = idx / kKSegs, seg = idx % kKSegs;
    const int i = seg / (kDkPad / 8), d0 = seg % (kDkPad / 8) * 8;
    const bool ok = i < n && (which == 2 || d0 < a.dk);
    const bf16* src = which == 0   ? a.k + (row0 + i) * a.k_t + kh * a.k_h + d0
                      : which == 1 ? a.q + (row0 + i) * a.q_t + kh * a.q_h + d0
                                   : o.w + ((row0 + i) * a.hv + h) * kDkPad + d0;
    bf16* dst = (which == 0 ? sm.tc.K(p) : which == 1 ? sm.tc.Q(p) : sm.W(p)) + i * kKStride + d0;
    CpAsync16(dst, ok ? static_cast<const void*>(src) : a.k, ok);
  }
#pragma unroll
  for (int e = 0; e < kVSegs / kThreads; ++e) {
    const int seg = tid + e * kThreads, i = seg / (kDvt / 8), c0 = seg % (kDvt / 8) * 8;
    const bool ok = i < n && j0 + c0 < a.dv;
    const bf16* src = o.u + ((row0 + i) * a.hv + h) * a.dv + j0 + c0;
    CpAsync16(sm.U(p) + i * kVS + c0, ok ? static_cast<const void*>(src) : o.u, ok);
  }
#pragma unroll
  for (int e = 0; e < kASegs / kThreads; ++e) {
    const int seg = tid + e * kThreads, i = seg / (kC / 8), c0 = seg % (kC / 8) * 8;
    const bool ok = i < n;
    const bf16* src = o.aqk + ((row0 + i) * a.hv + h) * kC + c0;
    CpAsync16(sm.Aq(p) + i * kCStride + c0, ok ? static_cast<const void*>(src) : o.aqk, ok);
  }
  if (tid < 2 * kC) {
    const int i = tid % kC;
    if (tid < kC) {
      const int row = i < n ? i : (i == kC - 1 ? n - 1 : -1);
      CpAsync4(sm.Gam(p) + i, row >= 0 ? o.gam + (row0 + row) * a.hv + h : o.gam, row >= 0);
    } else {
      CpAsync4(sm.Dte(p) + i, i < n ? o.dte + (row0 + i) * a.hv + h : o.dte, i < n);
    }
  }
  CpAsyncCommit();
}

// Warps 0-3 (row tile w of W): Vnew = U - W S0 -> Vnew, dte Vnew (bf16); warps 4-7 (row tile
// 7 - w of Q): oacc = gamma Q S0.
template <int kDvt>
__device__ __forceinline__ void ScanDeltas(const ScanSmem<kDvt>& sm, int p,
                                           float (&oacc)[kDvt / 8][4]) {
  constexpr int kVS = TcLayout<kDvt>::kVStride;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const bool is_q = warp >= 4;
  const int rt = RowTile(warp);
  const bf16* X = is_q ? sm.tc.Q(p) : sm.W(p);
  float prod[kDvt / 8][4] = {};
#pragma unroll
  for (int kk = 0; kk < kDkPad / 16; ++kk) {
    uint32_t af[4];
    LdMatrixX4(af, TileA(X, kKStride, 16 * rt, 16 * kk, lane));
#pragma unroll
    for (int u = 0; u < kDvt / 16; ++u) {
      uint32_t bf[4];
      LdMatrixX4Trans(bf, TileA(sm.tc.s, kVS, 16 * kk, 16 * u, lane));
      MmaBf16(prod[2 * u], af, bf[0], bf[1]);
      MmaBf16(prod[2 * u + 1], af, bf[2], bf[3]);
    }
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int i = 16 * rt + g + 8 * hh;
    const float gi = sm.Gam(p)[i], dte = sm.Dte(p)[i];
#pragma unroll
    for (int jt = 0; jt < kDvt / 8; ++jt) {
      const int j = 8 * jt + 2 * t;
      const float p0 = prod[jt][2 * hh], p1 = prod[jt][2 * hh + 1];
      if (is_q) {
        oacc[jt][2 * hh] = gi * p0;
        oacc[jt][2 * hh + 1] = gi * p1;
      } else {
        const float w0 = __bfloat162float(sm.U(p)[i * kVS + j]) - p0;
        const float w1 = __bfloat162float(sm.U(p)[i * kVS + j + 1]) - p1;
        StorePair(sm.tc.vn + i * kVS + j, w0, w1);
        StorePair(sm.tc.vd + i * kVS + j, dte * w0, dte * w1);
      }
    }
  }
}

template <int kDvt>
__global__ void __launch_bounds__(kThreads, 1)
    SplitScanKernel(DeltaArgs<bf16> a, SplitScratch o) {
  extern __shared__ __align__(16) char smem_raw[];
  const ScanSmem<kDvt> sm = MakeScanSmem<kDvt>(smem_raw);
  const int j0 = blockIdx.x * kDvt, h = blockIdx.y, kh = h / a.group;
  const SeqInfo seq = GetSeq(a.seqs, blockIdx.z);
  if (seq.len <= 0) return;  // block-uniform
  float* sg = a.state + (seq.slot * a.hv + h) * static_cast<int64_t>(a.dk) * a.dv;
  IssueScanLoad<kDvt>(a, o, sm, 0, seq.bos, min(kC, seq.len), h, kh, j0);
  float S[kDvt / 8][4];
  LoadStateTile<kDvt>(a, sg, j0, S);
  CpAsyncWait<0>();
  __syncthreads();

  const int n_chunks = (seq.len + kC - 1) / kC;
  for (int chunk = 0; chunk < n_chunks; ++chunk) {
    const int p = chunk & 1;
    const int64_t row0 = seq.bos + static_cast<int64_t>(chunk) * kC;
    const int n = min(kC, seq.len - chunk * kC);
    if (chunk + 1 < n_chunks) {
      const int next_n = min(kC, seq.len - (chunk + 1) * kC);
      IssueScanLoad<kDvt>(a, o, sm, p ^ 1, row0 + kC, next_n, h, kh, j0);
    }
    StoreStateBf16<kDvt>(sm.tc, S);
    __syncthreads();
    float oacc[kDvt / 8][4];
    ScanDeltas<kDvt>(sm, p, oacc);
    __syncthreads();
    TcSmem cur = sm.tc;
    cur.aq = sm.Aq(p);
    cur.gam = sm.Gam(p);
    ChunkUpdate<bf16, kDvt>(a, cur, p, S, oacc, row0, n, h, j0);
    CpAsyncWait<0>();
    __syncthreads();
  }
  StoreStateTile<kDvt>(a, sg, j0, S);
}

template <int kDvt>
void LaunchScan(const DeltaArgs<bf16>& a, const SplitScratch& o, cudaStream_t stream) {
  constexpr size_t smem = ScanLayout<kDvt>::kBytes;
  UP_CUDA_CHECK(cudaFuncSetAttribute(SplitScanKernel<kDvt>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid(static_cast<unsigned>((a.dv + kDvt - 1) / kDvt), static_cast<unsigned>(a.hv),
                  static_cast<unsigned>(a.seqs.batch));
  SplitScanKernel<kDvt><<<grid, kThreads, smem, stream>>>(a, o);
  UP_CUDA_CHECK_LAUNCH();
}

}  // namespace

size_t SplitDeltaRuleScratchBytes(int64_t rows, int hv, int dv) {
  const int64_t per_row_head = 2 * (kDkPad + dv + kC) + 2 * 4;
  return static_cast<size_t>(rows * hv * per_row_head) + 5 * 256;
}

void LaunchChunkedTensorCoreSplit(const DeltaArgs<bf16>& a, int64_t rows, void* scratch,
                                  int sm_count, cudaStream_t stream) {
  auto carve = [base = static_cast<char*>(scratch), offset = size_t{0}](size_t n) mutable {
    char* p = base + offset;
    offset += (n + 255) / 256 * 256;
    return p;
  };
  const int64_t rh = rows * a.hv;
  SplitScratch o;
  o.w = reinterpret_cast<bf16*>(carve(rh * kDkPad * 2));
  o.u = reinterpret_cast<bf16*>(carve(rh * a.dv * 2));
  o.aqk = reinterpret_cast<bf16*>(carve(rh * kC * 2));
  o.gam = reinterpret_cast<float*>(carve(rh * 4));
  o.dte = reinterpret_cast<float*>(carve(rh * 4));

  constexpr size_t prep_smem = PrepLayout::kBytes;
  UP_CUDA_CHECK(cudaFuncSetAttribute(SplitPrepKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     prep_smem));
  const dim3 prep_grid(static_cast<unsigned>((a.seqs.max_seqlen + kC - 1) / kC),
                       static_cast<unsigned>(a.hv), static_cast<unsigned>(a.seqs.batch));
  SplitPrepKernel<<<prep_grid, kThreads, prep_smem, stream>>>(a, o);
  UP_CUDA_CHECK_LAUNCH();
  // As the fused kernel: wide column tiles when they still fill every SM.
  const int64_t wide_blocks = static_cast<int64_t>(a.seqs.batch) * a.hv * ((a.dv + 63) / 64);
  if (a.dv > 32 && wide_blocks >= sm_count) {
    LaunchScan<64>(a, o, stream);
  } else {
    LaunchScan<32>(a, o, stream);
  }
}

}  // namespace uniprefill::ops::cuda::linear_detail
