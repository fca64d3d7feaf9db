// DeltaRuleKernel::kChunkedTensorCore: the chunked (WY) gated delta rule of
// linear_attention_delta_rule.cu with every matrix product on the tensor cores (mma.sync
// m16n8k16, bf16 operands, f32 accumulators), in the style of flash-linear-attention's
// chunk_gated_delta_rule on Hopper, fused into one kernel so that nothing but the inputs, the
// outputs and the state touches global memory.
//
// Math per chunk of C = 64 tokens, S0 the state before it (f32 [Dk, Dvt] in registers), G the
// within-chunk inclusive cumsum of g (summed in double), gamma_i = exp(G_i),
// dte_i = exp(G_last - G_i):
//   A[i][m]   = beta_i exp(G_i - G_m) k_i . k_m  (m < i)     Tinv = (I + A)^-1       (f32 solve)
//   Aqk[i][m] = exp(G_i - G_m) q_i . k_m          (m <= i)
//   RHS_i = beta_i (v_i - gamma_i (K S0)_i)                  Vnew = Tinv RHS      (the deltas w)
//   O     = diag(gamma) Q S0 + Aqk Vnew
//   S_end = gamma_last S0 + K^T diag(dte) Vnew
// the same equations as the f32 kernel (see its header), with the solve turned into a product by
// inverting I + A explicitly: the four 16 x 16 diagonal blocks by forward substitution, the
// off-diagonal blocks block row by block row (T_IJ = -D_I sum_{J<=M<I} A_IM T_MJ), all f32.
// Tensor-core products (bf16 operands): K K^T, Q K^T, K S0, Q S0 (S0 rounded to bf16), Tinv RHS
// (both rounded), Aqk Vnew and K^T (dte Vnew) (Vnew rounded). The state itself never leaves f32:
// it lives in the mma accumulators of the update product across chunks. The bf16 roundings
// (relative 2^-9 each) are what bounds agreement with the f32 kernels (a few 1e-3).
//
// Block (Dvt value columns, value head, sequence), 8 warps. Warp w owns state rows
// [16w, 16w + 16) (Dk is zero-padded to 128) and all Dvt columns. Per chunk:
//   gates  warp 0: G, gamma, dte, beta; every warp writes its rows of S0 as bf16;
//   dots   warps 0-3 row tile w of K:  K K^T (lower tiles) and K S0 -> A (f32), RHS (bf16);
//          warps 4-7 row tile w-4 of Q: Q K^T (lower tiles) and Q S0 -> Aqk (bf16), gamma Q S0
//          (kept in registers as the output accumulator);
//   solve  Tinv (f32), written as bf16;
//   deltas warp w: rows of tile w % 4, column half w / 4 of Vnew = Tinv RHS -> Vnew, dte Vnew;
//   update every warp: S <- gamma_last S + K^T (dte Vnew) on its rows; warps 4-7 also
//          O += Aqk Vnew and store their output rows.
// The next chunk's K, Q, V tiles (cp.async, double-buffered) and g, beta load during all that.
// Tokens past the sequence's end are zero (k = q = v = g = beta = 0: their deltas are 0).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "ops/cuda/linear_attention_delta_rule_tc.cuh"

namespace uniprefill::ops::cuda::linear_detail {
namespace {

using namespace tc;  // NOLINT: the kernel is written in the building blocks' terms

// Vnew = Tinv RHS: warp w takes row tile RowTile(w) and column half w / 4; writes Vnew and
// dte Vnew.
template <int kDvt>
__device__ __forceinline__ void ChunkDeltas(const TcSmem& sm) {
  constexpr int kVS = TcLayout<kDvt>::kVStride, kHalf = kDvt / 2;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int rt = RowTile(warp), c0 = (warp >> 2) * kHalf;
  float acc[kHalf / 8][4] = {};
#pragma unroll
  for (int kt = 0; kt < 4; ++kt) {
    if (kt > rt) continue;  // Tinv is lower triangular
    uint32_t af[4];
    LdMatrixX4(af, TileA(sm.t, kCStride, 16 * rt, 16 * kt, lane));
#pragma unroll
    for (int u = 0; u < kHalf / 16; ++u) {
      uint32_t bf[4];
      LdMatrixX4Trans(bf, TileA(sm.r, kVS, 16 * kt, c0 + 16 * u, lane));
      MmaBf16(acc[2 * u], af, bf[0], bf[1]);
      MmaBf16(acc[2 * u + 1], af, bf[2], bf[3]);
    }
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int i = 16 * rt + g + 8 * hh;
    const float dte = sm.dte[i];
#pragma unroll
    for (int nt = 0; nt < kHalf / 8; ++nt) {
      const int j = c0 + 8 * nt + 2 * t;
      const float w0 = acc[nt][2 * hh], w1 = acc[nt][2 * hh + 1];
      StorePair(sm.vn + i * kVS + j, w0, w1);
      StorePair(sm.vd + i * kVS + j, dte * w0, dte * w1);
    }
  }
}

// Block (column tile, value head, sequence).
template <typename T, int kDvt, bool kAsync>
__global__ void __launch_bounds__(kThreads, 1) TcDeltaRuleKernel(DeltaArgs<T> a) {
  static_assert(kDvt % 32 == 0 && kThreads == kBlk * kBlk);
  extern __shared__ __align__(16) char smem_raw[];
  const TcSmem sm = MakeTcSmem<kDvt>(smem_raw);
  const int tid = threadIdx.x, warp = tid >> 5;
  const int j0 = blockIdx.x * kDvt, h = blockIdx.y, kh = h / a.group;
  const SeqInfo seq = GetSeq(a.seqs, blockIdx.z);
  if (seq.len <= 0) return;  // block-uniform
  float* sg = a.state + (seq.slot * a.hv + h) * static_cast<int64_t>(a.dk) * a.dv;

  IssueChunkLoad<T, kDvt, kAsync>(a, sm, 0, seq.bos, min(kC, seq.len), h, kh, j0);
  // The strictly upper blocks of bf16 Tinv are zero for good (the solve never writes them).
  for (int e = tid; e < kC * kC; e += kThreads) {
    const int r = e / kC, c = e % kC;
    if (c / kBlk > r / kBlk) sm.t[r * kCStride + c] = __float2bfloat16_rn(0.0f);
  }
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
      IssueChunkLoad<T, kDvt, kAsync>(a, sm, p ^ 1, row0 + kC, next_n, h, kh, j0);
    }
    if (warp == 0) ChunkGates(sm, p);
    StoreStateBf16<kDvt>(sm, S);
    __syncthreads();
    float oacc[kDvt / 8][4];
    ChunkDots<kDvt>(sm, p, oacc);
    __syncthreads();
    InvertUnitLower(sm);
    ChunkDeltas<kDvt>(sm);
    __syncthreads();
    ChunkUpdate<T, kDvt>(a, sm, p, S, oacc, row0, n, h, j0);
    CpAsyncWait<0>();
    __syncthreads();
  }
  StoreStateTile<kDvt>(a, sg, j0, S);
}

template <typename T, int kDvt, bool kAsync>
void LaunchTc(const DeltaArgs<T>& a, cudaStream_t stream) {
  constexpr size_t smem = TcLayout<kDvt>::kBytes;
  UP_CUDA_CHECK(cudaFuncSetAttribute(TcDeltaRuleKernel<T, kDvt, kAsync>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const dim3 grid(static_cast<unsigned>((a.dv + kDvt - 1) / kDvt), static_cast<unsigned>(a.hv),
                  static_cast<unsigned>(a.seqs.batch));
  TcDeltaRuleKernel<T, kDvt, kAsync><<<grid, kThreads, smem, stream>>>(a);
  UP_CUDA_CHECK_LAUNCH();
}

template <typename T, int kDvt>
void LaunchTcTile(const DeltaArgs<T>& a, cudaStream_t stream) {
  if (CanCopyAsync(a)) {
    LaunchTc<T, kDvt, true>(a, stream);
  } else {
    LaunchTc<T, kDvt, false>(a, stream);
  }
}

}  // namespace

template <typename T>
void LaunchChunkedTensorCore(const DeltaArgs<T>& a, int sm_count, cudaStream_t stream) {
  // The per-chunk work that does not depend on the columns (K K^T, Q K^T, the solve) repeats in
  // every column tile: wide tiles when they still fill every SM, else narrow ones for more blocks.
  const int64_t wide_blocks = static_cast<int64_t>(a.seqs.batch) * a.hv * ((a.dv + 63) / 64);
  if (a.dv > 32 && wide_blocks >= sm_count) {
    LaunchTcTile<T, 64>(a, stream);
  } else {
    LaunchTcTile<T, 32>(a, stream);
  }
}

template void LaunchChunkedTensorCore<bf16>(const DeltaArgs<bf16>&, int, cudaStream_t);
template void LaunchChunkedTensorCore<float>(const DeltaArgs<float>&, int, cudaStream_t);

}  // namespace uniprefill::ops::cuda::linear_detail
