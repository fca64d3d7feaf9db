#include <cuda_bf16.h>

#include <cassert>
#include <climits>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "backend/cuda/cuda_glue_kernels.h"

namespace uniprefill::cuda_backend {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256;

unsigned Blocks(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// One block row per token row (blockIdx.x), 8 elements per thread with 16-byte loads and stores
// (D a multiple of 8, rows and heads 16-byte aligned): the flat form with 64-bit index divisions
// took 3.6 ms at 128K x 4096 on the H200, about a third of HBM's pace.
__global__ void SigmoidGateMulVecKernel(bf16* x, const bf16* gate, int H, int D, int64_t gate_row,
                                        int64_t gate_head) {
  const int64_t t = blockIdx.x;
  const int units_per_head = D / 8;
  for (int u = threadIdx.x; u < H * units_per_head; u += blockDim.x) {
    const int h = u / units_per_head, d = (u - h * units_per_head) * 8;
    bf16* xp = x + (t * H + h) * D + d;
    const uint4 graw = *reinterpret_cast<const uint4*>(gate + t * gate_row + h * gate_head + d);
    uint4 xraw = *reinterpret_cast<const uint4*>(xp);
    const __nv_bfloat162* g2 = reinterpret_cast<const __nv_bfloat162*>(&graw);
    __nv_bfloat162* x2 = reinterpret_cast<__nv_bfloat162*>(&xraw);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 g = __bfloat1622float2(g2[e]), v = __bfloat1622float2(x2[e]);
      x2[e] = __floats2bfloat162_rn(v.x / (1.0f + __expf(-g.x)), v.y / (1.0f + __expf(-g.y)));
    }
    *reinterpret_cast<uint4*>(xp) = xraw;
  }
}

__global__ void SigmoidGateMulKernel(bf16* x, const bf16* gate, int64_t T, int64_t H, int64_t D,
                                     int64_t gate_row, int64_t gate_head) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * H * D) return;
  const int64_t t = i / (H * D), h = (i / D) % H, d = i % D;
  const float g = __bfloat162float(gate[t * gate_row + h * gate_head + d]);
  x[i] = __float2bfloat16_rn(__bfloat162float(x[i]) / (1.0f + __expf(-g)));
}

__global__ void DeltaNetGatesKernel(float* g, float* beta, const bf16* b, int64_t b_row,
                                    const bf16* a, int64_t a_row, const float* a_log,
                                    const float* dt_bias, int64_t T, int Hv) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= T * Hv) return;
  const int64_t t = i / Hv;
  const int h = static_cast<int>(i % Hv);
  const float bv = __bfloat162float(b[t * b_row + h]);
  const float x = __bfloat162float(a[t * a_row + h]) + dt_bias[h];
  const float softplus = x > 20.0f ? x : log1pf(expf(x));  // torch softplus, threshold 20
  beta[i] = 1.0f / (1.0f + expf(-bv));
  g[i] = -expf(a_log[h]) * softplus;
}

// One CUDA block copies kGatherRows rows of one sequence, 16 bytes per thread and step.
constexpr int kGatherRows = 8;

// Pool strides in 16-byte units: block (blk), K to V (v_off), row within a block (row_vecs).
__global__ void GatherCacheRowsKernel(int4* k, int4* v, const int4* kv, int bt, int64_t vecs,
                                      int64_t blk, int64_t v_off, int64_t row_vecs,
                                      const int32_t* table, int max_blocks,
                                      const int32_t* row_begin) {
  const int b = blockIdx.y;
  const int64_t begin = row_begin[b], len = row_begin[b + 1] - begin;
  for (int i = 0; i < kGatherRows; ++i) {
    const int64_t a = static_cast<int64_t>(blockIdx.x) * kGatherRows + i;
    if (a >= len) return;
    const int64_t block = table[static_cast<int64_t>(b) * max_blocks + a / bt], row = a % bt;
    const int4* src_k = kv + block * blk + row * row_vecs;
    const int4* src_v = src_k + v_off;
    int4* dst_k = k + (begin + a) * vecs;
    int4* dst_v = v + (begin + a) * vecs;
    for (int64_t c = threadIdx.x; c < vecs; c += blockDim.x) {
      dst_k[c] = src_k[c];
      dst_v[c] = src_v[c];
    }
  }
}

}  // namespace

void SigmoidGateMul(DeviceContext& ctx, TensorView x, TensorView gate) {
  assert(x.ndim == 3 && gate.ndim == 3 && x.is_contiguous() && gate.stride[2] == 1);
  const int64_t T = x.dim(0), H = x.dim(1), D = x.dim(2);
  if (T == 0) return;
  const bool vec = D % 8 == 0 && gate.stride[0] % 8 == 0 && gate.stride[1] % 8 == 0 &&
                   reinterpret_cast<uintptr_t>(x.data) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(gate.data) % 16 == 0 && H * D <= INT32_MAX;
  if (vec) {
    SigmoidGateMulVecKernel<<<static_cast<unsigned>(T), kThreads, 0, ctx.cuda().stream()>>>(
        x.as<bf16>(), gate.as<const bf16>(), static_cast<int>(H), static_cast<int>(D),
        gate.stride[0], gate.stride[1]);
    UP_CUDA_CHECK_LAUNCH();
    return;
  }
  SigmoidGateMulKernel<<<Blocks(T * H * D), kThreads, 0, ctx.cuda().stream()>>>(
      x.as<bf16>(), gate.as<const bf16>(), T, H, D, gate.stride[0], gate.stride[1]);
  UP_CUDA_CHECK_LAUNCH();
}

void DeltaNetGates(DeviceContext& ctx, float* g, float* beta, TensorView b, TensorView a,
                   const float* a_log, const float* dt_bias) {
  const int64_t T = b.dim(0);
  const int Hv = static_cast<int>(b.dim(1));
  if (T == 0) return;
  DeltaNetGatesKernel<<<Blocks(T * Hv), kThreads, 0, ctx.cuda().stream()>>>(
      g, beta, b.as<const bf16>(), b.stride[0], a.as<const bf16>(), a.stride[0], a_log, dt_bias, T,
      Hv);
  UP_CUDA_CHECK_LAUNCH();
}

void GatherCacheRows(DeviceContext& ctx, TensorView k, TensorView v, TensorView kv,
                     const int32_t* table, int max_blocks, const int32_t* row_begin, int batch,
                     int max_len) {
  if (batch <= 0 || max_len <= 0) return;
  const int64_t kv_dim = kv.dim(3);
  assert(kv_dim % 8 == 0 && k.stride[0] == kv_dim && v.stride[0] == kv_dim &&
         kv.stride[0] % 8 == 0 && kv.stride[1] % 8 == 0 && kv.stride[2] % 8 == 0 &&
         kv.stride[3] == 1);
  const dim3 grid(static_cast<unsigned>((max_len + kGatherRows - 1) / kGatherRows),
                  static_cast<unsigned>(batch));
  GatherCacheRowsKernel<<<grid, 128, 0, ctx.cuda().stream()>>>(
      static_cast<int4*>(k.data), static_cast<int4*>(v.data), static_cast<const int4*>(kv.data),
      static_cast<int>(kv.dim(2)), kv_dim / 8, kv.stride[0] / 8, kv.stride[1] / 8,
      kv.stride[2] / 8, table, max_blocks, row_begin);
  UP_CUDA_CHECK_LAUNCH();
}

}  // namespace uniprefill::cuda_backend
