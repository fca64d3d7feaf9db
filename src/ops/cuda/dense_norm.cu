// RmsNorm and AddRmsNorm on bf16 rows: f32 math, eps inside the square root as on the CPU
// (x / sqrt(mean(x^2) + eps) * weight). Memory-bound: each row is read once into registers in
// 16-byte vectors and written once.
// Variants (picked by the launcher from D and the alignment of every pointer and row stride):
//   - 8, 16 or 32 lanes of a warp per row, <= 4 vectors per lane (D <= 1024: q/k-norm heads,
//     small hidden sizes);
//   - a block per row, <= 4 vectors per thread (D <= 32768: hidden sizes up to 8192 and beyond);
//   - scalar, a block per row reading it twice (any D or alignment; a fallback, not a fast path).
// Besides the [R, D] views of the header, 3-D views [T, H, D] (R = T * H rows, both outer
// dimensions strided) are accepted, so q/k-norm can run in place on a column slice of a fused QKV
// GEMM output, where [T * H, D] is not a view.
#include <algorithm>
#include <cassert>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_dense_ops.h"
#include "ops/cuda/dense_kernels_common.cuh"

namespace uniprefill::ops::cuda {
namespace {

using detail::bf16;
using detail::kBf16PerVec;

// A bf16 [T, H, D] or [R, D] (H = 1) view: row r = (t, h) = (r / H, r % H).
template <typename T>
struct Rows {
  T* data = nullptr;
  int64_t stride_t = 0, stride_h = 0;
  __device__ __forceinline__ T* Row(int64_t t, int64_t h) const {
    return data + t * stride_t + h * stride_h;
  }
};
template <typename T>
Rows<T> MakeRows(const TensorView& v) {
  Rows<T> r;
  r.data = static_cast<T*>(v.data);
  r.stride_t = v.stride[0];
  r.stride_h = v.ndim == 3 ? v.stride[1] : 0;
  return r;
}

struct NormArgs {
  Rows<bf16> out;
  Rows<bf16> residual;  // AddRmsNorm only
  Rows<const bf16> x;
  const float* weight = nullptr;  // f32 [d]
  int64_t rows = 0;               // T * H
  int64_t heads = 1;              // H
  int d = 0;
  float eps = 0;
};

constexpr int kMaxVecPerThread = 4;
constexpr int kLaneGroupThreads = 128;  // block size of the lane-group variant

// The sum over aligned groups of kLanes lanes (a power of two <= 32); every lane must call it.
template <int kLanes>
__device__ __forceinline__ float GroupSum(float v) {
#pragma unroll
  for (int o = kLanes / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Up to kMaxVec 16-byte vectors per thread, kept in registers between the sum and the output.
// kLanes > 0: a row per kLanes lanes (8, 16 or 32) of a warp; kLanes == 0: a row per block.
// kAdd: the row is residual + x rounded to bf16 (and stored back to residual) before the norm.
template <int kMaxVec, bool kAdd, int kLanes>
__global__ void RmsNormVecKernel(NormArgs a) {
  int64_t row;
  int tid, group;
  bool valid = true;
  if constexpr (kLanes > 0) {
    row = static_cast<int64_t>(blockIdx.x) * (kLaneGroupThreads / kLanes) + threadIdx.x / kLanes;
    valid = row < a.rows;  // no early return: the whole warp takes part in the shuffles
    tid = threadIdx.x % kLanes;
    group = kLanes;
  } else {
    row = blockIdx.x;
    tid = threadIdx.x;
    group = blockDim.x;
  }
  const int n_vec = valid ? a.d / kBf16PerVec : 0;
  const int64_t t = a.heads == 1 ? row : row / a.heads, h = row - t * a.heads;
  const bf16* xr = a.x.Row(t, h);
  bf16* rr = kAdd ? a.residual.Row(t, h) : nullptr;
  float v[kMaxVec][kBf16PerVec];
  // The weights are loaded with the row, before the sum: after it, their load was a second
  // memory latency in series (a one-row decode norm is nothing but latency).
  float4 w[kMaxVec][2];
  const float4* w4 = reinterpret_cast<const float4*>(a.weight);
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < kMaxVec; ++j) {
    const int c = tid + j * group;
    if (c < n_vec) {
      w[j][0] = w4[2 * c];
      w[j][1] = w4[2 * c + 1];
      detail::LoadBf16x8(xr + c * kBf16PerVec, v[j]);
      if constexpr (kAdd) {
        float r[kBf16PerVec];
        detail::LoadBf16x8(rr + c * kBf16PerVec, r);
#pragma unroll
        for (int k = 0; k < kBf16PerVec; ++k) v[j][k] = detail::RoundBf16(r[k] + v[j][k]);
        detail::StoreBf16x8(rr + c * kBf16PerVec, v[j]);
      }
#pragma unroll
      for (int k = 0; k < kBf16PerVec; ++k) ss += v[j][k] * v[j][k];
    }
  }
  if constexpr (kLanes > 0) {
    ss = GroupSum<kLanes>(ss);
  } else {
    ss = detail::BlockSum(ss);
  }
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(a.d) + a.eps);
  bf16* orow = a.out.Row(t, h);
#pragma unroll
  for (int j = 0; j < kMaxVec; ++j) {
    const int c = tid + j * group;
    if (c < n_vec) {
      const float4 w0 = w[j][0], w1 = w[j][1];
      const float wk[kBf16PerVec] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
      float o[kBf16PerVec];
#pragma unroll
      for (int k = 0; k < kBf16PerVec; ++k) o[k] = v[j][k] * inv * wk[k];
      detail::StoreBf16x8(orow + c * kBf16PerVec, o);
    }
  }
}

// Any D and alignment: a block per row; each thread revisits in pass 2 exactly the elements it
// read (and, for kAdd, wrote) in pass 1, so in-place and out == x need no synchronisation.
template <bool kAdd>
__global__ void RmsNormScalarKernel(NormArgs a) {
  const int64_t row = blockIdx.x;
  const int64_t t = a.heads == 1 ? row : row / a.heads, h = row - t * a.heads;
  const bf16* xr = a.x.Row(t, h);
  bf16* rr = kAdd ? a.residual.Row(t, h) : nullptr;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < a.d; i += blockDim.x) {
    float v = __bfloat162float(xr[i]);
    if constexpr (kAdd) {
      v = detail::RoundBf16(__bfloat162float(rr[i]) + v);
      rr[i] = __float2bfloat16_rn(v);
    }
    ss += v * v;
  }
  ss = detail::BlockSum(ss);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(a.d) + a.eps);
  bf16* orow = a.out.Row(t, h);
  for (int i = threadIdx.x; i < a.d; i += blockDim.x) {
    const float v = __bfloat162float(kAdd ? rr[i] : xr[i]);
    orow[i] = __float2bfloat16_rn(v * inv * a.weight[i]);
  }
}

template <bool kAdd>
void LaunchRmsNorm(const NormArgs& a, bool vectorisable, cudaStream_t stream) {
  if (a.rows == 0) return;
  const int n_vec = a.d / kBf16PerVec;
  if (vectorisable && n_vec <= 32 * kMaxVecPerThread) {
    // Lanes per row: 8 for D = 64, 16 for D = 128, else a warp with 1, 2 or 4 vectors per lane.
    const int lanes = n_vec <= 8 ? 8 : n_vec <= 16 ? 16 : 32;
    const int64_t rows_per_block = kLaneGroupThreads / lanes;
    const int64_t blocks64 = (a.rows + rows_per_block - 1) / rows_per_block;
    assert(blocks64 <= INT32_MAX);
    const unsigned blocks = static_cast<unsigned>(blocks64);
    if (lanes == 8) {
      RmsNormVecKernel<1, kAdd, 8><<<blocks, kLaneGroupThreads, 0, stream>>>(a);
    } else if (lanes == 16) {
      RmsNormVecKernel<1, kAdd, 16><<<blocks, kLaneGroupThreads, 0, stream>>>(a);
    } else if (n_vec <= 32) {
      RmsNormVecKernel<1, kAdd, 32><<<blocks, kLaneGroupThreads, 0, stream>>>(a);
    } else if (n_vec <= 64) {
      RmsNormVecKernel<2, kAdd, 32><<<blocks, kLaneGroupThreads, 0, stream>>>(a);
    } else {
      RmsNormVecKernel<4, kAdd, 32><<<blocks, kLaneGroupThreads, 0, stream>>>(a);
    }
  } else if (vectorisable && n_vec <= 1024 * kMaxVecPerThread) {
    // D = 4096: 128 threads x 4 vectors; D = 8192: 256 threads x 4.
    int threads = (n_vec + kMaxVecPerThread - 1) / kMaxVecPerThread;
    threads = std::max(128, (threads + 31) / 32 * 32);
    assert(a.rows <= INT32_MAX);
    RmsNormVecKernel<kMaxVecPerThread, kAdd, 0>
        <<<static_cast<unsigned>(a.rows), threads, 0, stream>>>(a);
  } else {
    const int threads = std::min(256, std::max(32, (a.d + 31) / 32 * 32));
    assert(a.rows <= INT32_MAX);
    RmsNormScalarKernel<kAdd><<<static_cast<unsigned>(a.rows), threads, 0, stream>>>(a);
  }
  UP_CUDA_CHECK_LAUNCH();
}

// A bf16 view of the same shape as `like` ([R, D] or [T, H, D]), last dimension contiguous.
void CheckSameShape(const TensorView& v, const TensorView& like) {
  assert(v.device == Device::kCuda && v.dtype == DType::kBF16 && v.ndim == like.ndim);
  assert(v.ndim == 2 || v.ndim == 3);
  for (int d = 0; d < v.ndim; ++d) assert(v.shape[d] == like.shape[d]);
  assert(v.stride[v.ndim - 1] == 1);
  (void)v, (void)like;
}

NormArgs MakeArgs(const TensorView& out, const TensorView& x, const float* weight, float eps) {
  NormArgs a;
  a.out = MakeRows<bf16>(out);
  a.x = MakeRows<const bf16>(x);
  a.weight = weight;
  a.heads = x.ndim == 3 ? x.dim(1) : 1;
  a.rows = x.dim(0) * a.heads;
  assert(x.dim(-1) > 0 && x.dim(-1) <= INT32_MAX && a.heads > 0);
  a.d = static_cast<int>(x.dim(-1));
  a.eps = eps;
  return a;
}

}  // namespace

void AddRmsNorm(DeviceContext& ctx, TensorView out, TensorView residual, TensorView x,
                const float* weight, float eps) {
  // residual, x, out bf16 [R, D] (or [T, H, D]); weight f32 [D].
  CheckSameShape(x, x);
  CheckSameShape(out, x);
  CheckSameShape(residual, x);
  assert(out.data != residual.data);
  NormArgs a = MakeArgs(out, x, weight, eps);
  a.residual = MakeRows<bf16>(residual);
  const bool vec = detail::RowsVectorisable(out) && detail::RowsVectorisable(residual) &&
                   detail::RowsVectorisable(x) && detail::Aligned(weight, 16);
  LaunchRmsNorm<true>(a, vec, ctx.cuda().stream());
}

void RmsNorm(DeviceContext& ctx, TensorView out, TensorView x, const float* weight, float eps) {
  // x, out bf16 [R, D] (or [T, H, D]); weight f32 [D].
  CheckSameShape(x, x);
  CheckSameShape(out, x);
  const NormArgs a = MakeArgs(out, x, weight, eps);
  const bool vec =
      detail::RowsVectorisable(out) && detail::RowsVectorisable(x) && detail::Aligned(weight, 16);
  LaunchRmsNorm<false>(a, vec, ctx.cuda().stream());
}

}  // namespace uniprefill::ops::cuda
