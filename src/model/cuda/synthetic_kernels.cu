// SigmoidGateMul and DeltaNetGates (synthetic_kernels.h): one block per row / one thread per
// element, f32 math.
#include "model/cuda/synthetic_kernels.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cassert>
#include <cmath>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"

namespace uniprefill::synthetic_cuda {
namespace {

using bf16 = __nv_bfloat16;

__global__ void SigmoidGateMulKernel(bf16* __restrict__ x, int64_t ld_x,
                                     const bf16* __restrict__ gate, int64_t ld_g, int64_t rows,
                                     int cols) {
  const int64_t r = blockIdx.x;
  if (r >= rows) return;
  bf16* xr = x + r * ld_x;
  const bf16* gr = gate + r * ld_g;
  for (int c = threadIdx.x * 2; c < cols; c += blockDim.x * 2) {  // cols even, rows 4-byte aligned
    const float2 xv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(xr + c));
    const float2 gv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(gr + c));
    const float a = xv.x / (1.0f + __expf(-gv.x)), b = xv.y / (1.0f + __expf(-gv.y));
    *reinterpret_cast<__nv_bfloat162*>(xr + c) = __floats2bfloat162_rn(a, b);
  }
}

__global__ void DeltaNetGatesKernel(float* __restrict__ g, float* __restrict__ beta,
                                    const bf16* __restrict__ ba, int64_t ld_ba, int64_t rows,
                                    int hv, float decay, float dt_bias) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * hv) return;
  const int64_t r = i / hv;
  const int h = static_cast<int>(i % hv);
  const float b = __bfloat162float(ba[r * ld_ba + h]);
  const float a = __bfloat162float(ba[r * ld_ba + hv + h]) + dt_bias;
  const float softplus = a > 20.0f ? a : log1pf(expf(a));
  beta[i] = 1.0f / (1.0f + expf(-b));
  g[i] = -decay * softplus;
}

}  // namespace

void SigmoidGateMul(DeviceContext& ctx, TensorView x, TensorView gate) {
  const int64_t rows = x.dim(0);
  const int cols = static_cast<int>(x.dim(1));
  assert(gate.dim(0) == rows && gate.dim(1) == cols && cols % 2 == 0);
  assert(x.stride[0] % 2 == 0 && gate.stride[0] % 2 == 0);
  if (rows == 0) return;
  SigmoidGateMulKernel<<<static_cast<unsigned>(rows), 256, 0, ctx.cuda().stream()>>>(
      static_cast<bf16*>(x.data), x.stride[0], static_cast<const bf16*>(gate.data), gate.stride[0],
      rows, cols);
  UP_CUDA_CHECK_LAUNCH();
}

void DeltaNetGates(DeviceContext& ctx, float* g, float* beta, TensorView ba, float a_log,
                   float dt_bias) {
  const int64_t rows = ba.dim(0);
  const int hv = static_cast<int>(ba.dim(1) / 2);
  if (rows == 0) return;
  const int64_t n = rows * hv;
  DeltaNetGatesKernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, ctx.cuda().stream()>>>(
      g, beta, static_cast<const bf16*>(ba.data), ba.stride[0], rows, hv, expf(a_log), dt_bias);
  UP_CUDA_CHECK_LAUNCH();
}

}  // namespace uniprefill::synthetic_cuda
