// CUDA dense ops (bf16 activations, f32 math): the GPU twins of ops/ops.h's Linear, RmsNorm, Rope,
// GatedActivation, Embedding, Add and GatherRows. Every op takes the DeviceContext (device kCuda)
// first, enqueues on ctx.cuda().stream() and never synchronises. Tensors are device views
// (TensorView::device == kCuda); integer arrays (positions, ids, rows) are device pointers.
// Tensor comments give dtype and shape, outermost first; rows may be strided (stride[0]) where
// stated, the last dimension is always contiguous.
#pragma once

#include <cstdint>
#include <vector>

#include "core/device_context.h"
#include "core/tensor.h"
#include "ops/ops.h"

namespace uniprefill::ops::cuda {

// out bf16 [M, N] = x bf16 [M, K] @ w^T, w bf16 [N, K] (y = x W^T, as ops::Linear), through
// cuBLASLt with f32 accumulation. out and x rows may be strided. M == 0 is a no-op.
void Gemm(DeviceContext& ctx, TensorView out, TensorView x, TensorView w);
// out bf16 [M, N] += x @ w^T: cuBLASLt's epilogue adds out (C = D = out, beta 1) to the f32
// accumulator and rounds once (a residual stream updated by its block's output projection
// without a separate add).
void GemmAccumulate(DeviceContext& ctx, TensorView out, TensorView x, TensorView w);

// Fused residual add + RMSNorm over the last dim D (f32 math):
//   residual[r] += x[r] (rounded to bf16), then out[r] = residual[r] / rms(residual[r]) * weight.
// residual, x, out bf16 [R, D]; weight f32 [D] on the device. out may alias x (not residual).
void AddRmsNorm(DeviceContext& ctx, TensorView out, TensorView residual, TensorView x,
                const float* weight, float eps);
// out bf16 [R, D] = x / rms(x) * weight (f32 math); in place allowed (q/k-norm views [T*H, D]).
void RmsNorm(DeviceContext& ctx, TensorView out, TensorView x, const float* weight, float eps);

// Rotates the first rot_dims dims of every head of x bf16 [T, H, D] (rows strided) in place by
// pos[t] (device int32 [T]) with inv_freq (device f32 [rot_dims / 2]); both RopeStyles.
void Rope(DeviceContext& ctx, TensorView x, const int32_t* pos, const float* inv_freq, int rot_dims,
          RopeStyle style);

// out bf16 [T, F] = act(gate) * up; gate, up bf16 [T, F] (rows strided: halves of one fused
// [T, 2F] GEMM output). out may alias gate.
void GatedActivation(DeviceContext& ctx, TensorView out, TensorView gate, TensorView up,
                     Activation act);

// The FFN's gate and up in one weight with their rows interleaved (gate row j at row 2j, up row j
// at 2j + 1: GatedWeightRowOrder), where GatedGemmRuns says the fused GEMM runs here:
//   GatedGemm: out bf16 [T, F] = act(x w_gate^T) * (x w_up^T) from one GEMM, the [T, 2F]
//     intermediate never stored (CUTLASS's Hopper GEMM with our epilogue); x bf16 [T, K] (rows
//     strided), w bf16 [2F, K] interleaved. Rounded once from f32 (GatedActivation rounds gate
//     and up to bf16 first), on the fast exp and divide. Rows do not depend on the batch.
//   GatedActivationPairs: out bf16 [T, F] from pairs bf16 [T, 2F] (rows strided), the product of
//     Gemm(x, interleaved w): for steps GatedGemm does not take (few rows, captured graphs).
//   variant: the kernel configuration (GatedGemmVariant names them; nullptr past the last).
bool GatedGemmRuns(DeviceContext& ctx, const TensorView& x, const TensorView& w);
void GatedGemm(DeviceContext& ctx, TensorView out, TensorView x, TensorView w, Activation act,
               int variant = 0);
const char* GatedGemmVariant(int variant);
void GatedActivationPairs(DeviceContext& ctx, TensorView out, TensorView pairs, Activation act);
// Row r of the interleaved [2F, K] weight is row GatedWeightRowOrder(F)[r] of [gate; up].
std::vector<int64_t> GatedWeightRowOrder(int64_t f);

// out bf16 [T, D] = table[ids[t] - first_id] * scale; table bf16 [V, D]; ids device int32 [T].
// A vocabulary shard's table holds ids first_id .. first_id + V - 1; other ids embed as zeros.
void Embedding(DeviceContext& ctx, TensorView out, TensorView table, const int32_t* ids,
               float scale, int32_t first_id = 0);

// out bf16 [R, D] = a + b (out may alias a).
void Add(DeviceContext& ctx, TensorView out, TensorView a, TensorView b);

// out [R, D] row r = x row rows[r], or zeros where rows[r] < 0; bf16, f32 or i32 (same dtype
// both); rows device int32 [R]. out must not alias x.
void GatherRows(DeviceContext& ctx, TensorView out, TensorView x, const int32_t* rows);

// dtype conversions, elementwise over n contiguous elements (device pointers).
void F32ToBf16(DeviceContext& ctx, void* out_bf16, const float* x, int64_t n);
void Bf16ToF32(DeviceContext& ctx, float* out, const void* x_bf16, int64_t n);

// Fills n bf16 elements with deterministic pseudo-random values uniform in [-scale, scale) from
// (seed, index) (synthetic weights without host memory or files).
void FillRandomBf16(DeviceContext& ctx, void* out_bf16, int64_t n, uint64_t seed, float scale);

}  // namespace uniprefill::ops::cuda
