// RmsNorm and AddRmsNorm on bf16 rows: f32 math, eps inside the square root as on the CPU
// (x / sqrt(mean(x^2) + eps) * weight). Memory-bound: each row is read once into registers in
// 16-byte vectors and written once.
// Variants (picked by the launcher from D and the alignment of every pointer and row stride):
//   - a warp per row, <= 4 vectors per lane (D <= 1024: q/k-norm heads, small hidden sizes);
//   - a block per row, <= 4 vectors per thread (D <= 32768: hidden sizes up to 8192 and beyond);
//   - scalar, a block per row reading it twice (any D or alignment; a fallback, not a fast path).
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

struct NormArgs {
  bf16* out = nullptr;  // bf16 [rows, d]
  int64_t out_stride = 0;
  bf16* residual = nullptr;  // bf16 [rows, d] (AddRmsNorm only)
  int64_t residual_stride = 0;
  const bf16* x = nullptr;  // bf16 [rows, d]
  int64_t x_stride = 0;
  const float* weight = nullptr;  // f32 [d]
  int64_t rows = 0;
  int d = 0;
  float eps = 0;
};

constexpr int kMaxVecPerThread = 4;
constexpr int kWarpRowsPerBlock = 4;

// kAdd: the row is residual + x rounded to bf16 (and stored back to residual) before the norm.
template <int kMaxVec, bool kAdd, bool kWarpPerRow>
__global__ void RmsNormVecKernel(NormArgs a) {
  int64_t row;
  int tid, group;
  if constexpr (kWarpPerRow) {
    row = static_cast<int64_t>(blockIdx.x) * kWarpRowsPerBlock + (threadIdx.x >> 5);
    if (row >= a.rows) return;  // warp-uniform
    tid = threadIdx.x & 31;
    group = 32;
  } else {
    row = blockIdx.x;
    tid = threadIdx.x;
    group = blockDim.x;
  }
  const int n_vec = a.d / kBf16PerVec;
  const bf16* xr = a.x + row * a.x_stride;
  bf16* rr = kAdd ? a.residual + row * a.residual_stride : nullptr;
  float v[kMaxVec][kBf16PerVec];
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < kMaxVec; ++j) {
    const int c = tid + j * group;
    if (c < n_vec) {
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
  ss = kWarpPerRow ? detail::WarpSum(ss) : detail::BlockSum(ss);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(a.d) + a.eps);
  bf16* orow = a.out + row * a.out_stride;
  const float4* w4 = reinterpret_cast<const float4*>(a.weight);
#pragma unroll
  for (int j = 0; j < kMaxVec; ++j) {
    const int c = tid + j * group;
    if (c < n_vec) {
      const float4 w0 = w4[2 * c], w1 = w4[2 * c + 1];
      const float w[kBf16PerVec] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
      float o[kBf16PerVec];
#pragma unroll
      for (int k = 0; k < kBf16PerVec; ++k) o[k] = v[j][k] * inv * w[k];
      detail::StoreBf16x8(orow + c * kBf16PerVec, o);
    }
  }
}

// Any D and alignment: a block per row; each thread revisits in pass 2 exactly the elements it
// read (and, for kAdd, wrote) in pass 1, so in-place and out == x need no synchronisation.
template <bool kAdd>
__global__ void RmsNormScalarKernel(NormArgs a) {
  const int64_t row = blockIdx.x;
  const bf16* xr = a.x + row * a.x_stride;
  bf16* rr = kAdd ? a.residual + row * a.residual_stride : nullptr;
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
  bf16* orow = a.out + row * a.out_stride;
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
    const int64_t blocks = (a.rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock;
    assert(blocks <= INT32_MAX);
    const int threads = 32 * kWarpRowsPerBlock;
    if (n_vec <= 32) {
      RmsNormVecKernel<1, kAdd, true><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(a);
    } else if (n_vec <= 64) {
      RmsNormVecKernel<2, kAdd, true><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(a);
    } else {
      RmsNormVecKernel<4, kAdd, true><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(a);
    }
  } else if (vectorisable && n_vec <= 1024 * kMaxVecPerThread) {
    // D = 4096: 128 threads x 4 vectors; D = 8192: 256 threads x 4.
    int threads = (n_vec + kMaxVecPerThread - 1) / kMaxVecPerThread;
    threads = std::max(128, (threads + 31) / 32 * 32);
    assert(a.rows <= INT32_MAX);
    RmsNormVecKernel<kMaxVecPerThread, kAdd, false>
        <<<static_cast<unsigned>(a.rows), threads, 0, stream>>>(a);
  } else {
    const int threads = std::min(256, std::max(32, (a.d + 31) / 32 * 32));
    assert(a.rows <= INT32_MAX);
    RmsNormScalarKernel<kAdd><<<static_cast<unsigned>(a.rows), threads, 0, stream>>>(a);
  }
  UP_CUDA_CHECK_LAUNCH();
}

void CheckRows(const TensorView& v, int64_t rows, int64_t d) {
  assert(v.device == Device::kCuda && v.dtype == DType::kBF16 && v.ndim == 2);
  assert(v.dim(0) == rows && v.dim(1) == d && v.stride[1] == 1);
  (void)v, (void)rows, (void)d;
}

}  // namespace

void AddRmsNorm(DeviceContext& ctx, TensorView out, TensorView residual, TensorView x,
                const float* weight, float eps) {
  // residual, x, out bf16 [R, D]; weight f32 [D].
  const int64_t R = x.dim(0), D = x.dim(1);
  CheckRows(out, R, D);
  CheckRows(residual, R, D);
  CheckRows(x, R, D);
  assert(D > 0 && D <= INT32_MAX && out.data != residual.data);
  NormArgs a;
  a.out = out.as<bf16>();
  a.out_stride = out.stride[0];
  a.residual = residual.as<bf16>();
  a.residual_stride = residual.stride[0];
  a.x = x.as<const bf16>();
  a.x_stride = x.stride[0];
  a.weight = weight;
  a.rows = R;
  a.d = static_cast<int>(D);
  a.eps = eps;
  const bool vec = detail::RowsVectorisable(out) && detail::RowsVectorisable(residual) &&
                   detail::RowsVectorisable(x) && detail::Aligned(weight, 16);
  LaunchRmsNorm<true>(a, vec, ctx.cuda().stream());
}

void RmsNorm(DeviceContext& ctx, TensorView out, TensorView x, const float* weight, float eps) {
  // x, out bf16 [R, D]; weight f32 [D].
  const int64_t R = x.dim(0), D = x.dim(1);
  CheckRows(out, R, D);
  CheckRows(x, R, D);
  assert(D > 0 && D <= INT32_MAX);
  NormArgs a;
  a.out = out.as<bf16>();
  a.out_stride = out.stride[0];
  a.x = x.as<const bf16>();
  a.x_stride = x.stride[0];
  a.weight = weight;
  a.rows = R;
  a.d = static_cast<int>(D);
  a.eps = eps;
  const bool vec = detail::RowsVectorisable(out) && detail::RowsVectorisable(x) &&
                   detail::Aligned(weight, 16);
  LaunchRmsNorm<false>(a, vec, ctx.cuda().stream());
}

}  // namespace uniprefill::ops::cuda
