// CausalConv1dSilu and L2NormalizeHeads of cuda_linear_attention.h: the memory-bound parts of the
// Gated DeltaNet mixer.
//
// CausalConv1dSilu: one thread per (sequence, channel, tile of kConvRows rows). It keeps the K-1
// previous inputs of its channel in registers (from x, or from the state before the sequence's
// first row), slides over its rows (consecutive threads = consecutive channels, so every row access
// is coalesced) and writes silu(conv). The state column (slot, c) is read and written only by the
// thread of the first row tile: after its rows, its window holds the last K-1 inputs of
// [state; x] when the sequence fits in one tile, and otherwise those inputs are x's last K-1 rows
// (kConvRows >= K-1), so no other thread ever reads a state row that is being replaced.
// A decode step (one row per sequence) is the same kernel with one row tile.
//
// L2NormalizeHeads: a warp per row (head), two passes over the row (the second hits L1).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_linear_attention.h"
#include "ops/cuda/linear_attention_common.cuh"

namespace uniprefill::ops::cuda {
namespace {

using linear_detail::bf16;
using linear_detail::LoadF;
using linear_detail::Require;
using linear_detail::StoreF;

constexpr int kConvThreads = 128;
constexpr int kConvRows = 16;  // rows per thread; must be >= K - 1
constexpr int kMaxConvKernel = 8;
static_assert(kConvRows >= kMaxConvKernel - 1);

template <typename T>
struct ConvArgs {
  T* out = nullptr;
  const T* x = nullptr;
  const float* weight = nullptr;  // f32 [C, K]
  float* state = nullptr;         // f32 [slots][K-1][C]
  int64_t out_stride = 0, x_stride = 0;
  int64_t channels = 0;
  LinearAttentionBatch seqs;
};

__device__ __forceinline__ float Silu(float x) { return x / (1.0f + expf(-x)); }

template <typename T, int K>
__global__ void __launch_bounds__(kConvThreads) CausalConvKernel(ConvArgs<T> a) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kConvThreads + threadIdx.x;
  if (c >= a.channels) return;
  const linear_detail::SeqInfo s = linear_detail::GetSeq(a.seqs, blockIdx.z);
  const int t0 = static_cast<int>(blockIdx.y) * kConvRows;
  if (t0 >= s.len) return;
  const int n = min(kConvRows, s.len - t0);
  const int64_t C = a.channels;

  float w[K];
#pragma unroll
  for (int j = 0; j < K; ++j) w[j] = a.weight[c * K + j];

  // win[j]: the input at row t0 - (K-1) + j of the sequence (state row K-1 + tau before row 0).
  constexpr int kWin = K > 1 ? K - 1 : 1;
  float win[kWin] = {};
  float* st = a.state + s.slot * (K - 1) * C + c;  // state row j at st[j * C]
#pragma unroll
  for (int j = 0; j < K - 1; ++j) {
    const int tau = t0 - (K - 1) + j;
    win[j] = tau >= 0 ? LoadF(a.x + (s.bos + tau) * a.x_stride + c) : st[(K - 1 + tau) * C];
  }

#pragma unroll
  for (int i = 0; i < kConvRows; ++i) {
    if (i < n) {
      const int64_t row = s.bos + t0 + i;
      const float xi = LoadF(a.x + row * a.x_stride + c);
      // Same order as the CPU: w[0] * in[0], then FMAs up to the current input.
      float acc;
      if constexpr (K == 1) {
        acc = w[0] * xi;
      } else {
        acc = w[0] * win[0];
#pragma unroll
        for (int j = 1; j < K - 1; ++j) acc = fmaf(w[j], win[j], acc);
        acc = fmaf(w[K - 1], xi, acc);
#pragma unroll
        for (int j = 0; j + 1 < K - 1; ++j) win[j] = win[j + 1];
        win[K - 2] = xi;
      }
      StoreF(a.out + row * a.out_stride + c, Silu(acc));
    }
  }

  if (K > 1 && t0 == 0) {
    if (s.len <= kConvRows) {
      // The window slid over every input of the call: it is the new state.
#pragma unroll
      for (int j = 0; j < K - 1; ++j) st[j * C] = win[j];
    } else {
#pragma unroll
      for (int j = 0; j < K - 1; ++j) {
        st[j * C] = LoadF(a.x + (s.bos + s.len - (K - 1) + j) * a.x_stride + c);
      }
    }
  }
}

template <typename T, int K>
void LaunchConv(const ConvArgs<T>& a, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((a.channels + kConvThreads - 1) / kConvThreads),
                  static_cast<unsigned>((a.seqs.max_seqlen + kConvRows - 1) / kConvRows),
                  static_cast<unsigned>(a.seqs.batch));
  CausalConvKernel<T, K><<<grid, kConvThreads, 0, stream>>>(a);
  UP_CUDA_CHECK_LAUNCH();
}

template <typename T>
void DispatchConv(const ConvArgs<T>& a, int K, cudaStream_t stream) {
  switch (K) {
    case 1:
      LaunchConv<T, 1>(a, stream);
      break;
    case 2:
      LaunchConv<T, 2>(a, stream);
      break;
    case 3:
      LaunchConv<T, 3>(a, stream);
      break;
    case 4:
      LaunchConv<T, 4>(a, stream);
      break;
    case 5:
      LaunchConv<T, 5>(a, stream);
      break;
    case 6:
      LaunchConv<T, 6>(a, stream);
      break;
    case 7:
      LaunchConv<T, 7>(a, stream);
      break;
    case 8:
      LaunchConv<T, 8>(a, stream);
      break;
    default:
      Require(false, "CausalConv1dSilu", "kernel size K must be in [1, 8]");
  }
}

template <typename T>
ConvArgs<T> MakeConvArgs(TensorView out, TensorView x, TensorView weight, float* state,
                         const LinearAttentionBatch& seqs) {
  ConvArgs<T> a;
  a.out = out.as<T>();
  a.x = x.as<T>();
  a.weight = weight.as<float>();
  a.state = state;
  a.out_stride = out.stride[0];
  a.x_stride = x.stride[0];
  a.channels = x.dim(1);
  a.seqs = seqs;
  return a;
}

// ---- L2NormalizeHeads ---------------------------------------------------------------------------

constexpr int kNormWarps = 8;

template <typename T>
__global__ void __launch_bounds__(kNormWarps * 32)
    L2NormKernel(T* x, int64_t rows, int64_t heads, int64_t stride_t, int64_t stride_h, int d,
                 float eps, float scale) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kNormWarps + (threadIdx.x >> 5);
  if (row >= rows) return;  // warp-uniform
  const int lane = threadIdx.x & 31;
  const int64_t t = row / heads, h = row - t * heads;
  T* p = x + t * stride_t + h * stride_h;
  float ss = 0.0f;
  for (int i = lane; i < d; i += 32) {
    const float v = LoadF(p + i);
    ss = fmaf(v, v, ss);
  }
  ss = linear_detail::WarpSum(ss);
  const float f = scale / sqrtf(ss + eps);
  for (int i = lane; i < d; i += 32) StoreF(p + i, LoadF(p + i) * f);
}

}  // namespace

void CausalConv1dSilu(DeviceContext& ctx, TensorView out, TensorView x, TensorView weight,
                      float* state, const LinearAttentionBatch& seqs) {
  constexpr const char* kOp = "CausalConv1dSilu";
  Require(linear_detail::IsActivation(x) && x.ndim == 2, kOp,
          "x must be a bf16/f32 [T, C] device view");
  Require(linear_detail::IsActivation(out) && out.ndim == 2 && out.dtype == x.dtype, kOp,
          "out must be a device view [T, C] of x's dtype");
  Require(out.dim(0) == x.dim(0) && out.dim(1) == x.dim(1), kOp, "out and x shapes differ");
  Require(out.data != x.data, kOp, "out must not alias x");
  Require(weight.device == Device::kCuda && weight.dtype == DType::kF32 && weight.ndim == 2 &&
              weight.dim(0) == x.dim(1) && weight.is_contiguous(),
          kOp, "weight must be a contiguous f32 [C, K] device view");
  Require(seqs.batch >= 0 && seqs.batch <= 65535 && seqs.max_seqlen >= 0, kOp,
          "batch must be in [0, 65535] and max_seqlen >= 0");
  Require(
      seqs.cu_seqlens != nullptr || static_cast<int64_t>(seqs.batch) * seqs.max_seqlen == x.dim(0),
      kOp, "without cu_seqlens, x must have batch * max_seqlen rows");
  if (seqs.batch == 0 || seqs.max_seqlen == 0 || x.dim(1) == 0) return;
  Require((seqs.max_seqlen + kConvRows - 1) / kConvRows <= 65535, kOp, "max_seqlen too large");
  const int K = static_cast<int>(weight.dim(1));
  cudaStream_t stream = ctx.cuda().stream();
  if (x.dtype == DType::kBF16) {
    DispatchConv(MakeConvArgs<bf16>(out, x, weight, state, seqs), K, stream);
  } else {
    DispatchConv(MakeConvArgs<float>(out, x, weight, state, seqs), K, stream);
  }
}

void L2NormalizeHeads(DeviceContext& ctx, TensorView x, float eps, float scale) {
  constexpr const char* kOp = "L2NormalizeHeads";
  Require(linear_detail::IsActivation(x) && (x.ndim == 2 || x.ndim == 3), kOp,
          "x must be a bf16/f32 [R, D] or [T, H, D] device view");
  const int64_t heads = x.ndim == 3 ? x.dim(1) : 1;
  const int64_t rows = x.dim(0) * heads;
  const int d = static_cast<int>(x.dim(-1));
  if (rows == 0 || d == 0) return;
  const int64_t stride_h = x.ndim == 3 ? x.stride[1] : 0;
  const int64_t blocks = (rows + kNormWarps - 1) / kNormWarps;
  Require(blocks <= INT32_MAX, kOp, "too many rows");
  cudaStream_t stream = ctx.cuda().stream();
  if (x.dtype == DType::kBF16) {
    L2NormKernel<bf16><<<static_cast<unsigned>(blocks), kNormWarps * 32, 0, stream>>>(
        x.as<bf16>(), rows, heads, x.stride[0], stride_h, d, eps, scale);
  } else {
    L2NormKernel<float><<<static_cast<unsigned>(blocks), kNormWarps * 32, 0, stream>>>(
        x.as<float>(), rows, heads, x.stride[0], stride_h, d, eps, scale);
  }
  UP_CUDA_CHECK_LAUNCH();
}

}  // namespace uniprefill::ops::cuda
