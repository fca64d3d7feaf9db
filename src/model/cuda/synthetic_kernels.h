// Small CUDA kernels the synthetic Qwen3-Next layers need beside the ops in ops/cuda: the output
// gate of gated attention and the Gated DeltaNet gates. Enqueued on ctx.cuda().stream(), no sync.
#pragma once

#include "core/device_context.h"
#include "core/tensor.h"

namespace uniprefill::synthetic_cuda {

// x bf16 [T, C] *= sigmoid(gate bf16 [T, C]) in place (rows of both may be strided; f32 math).
void SigmoidGateMul(DeviceContext& ctx, TensorView x, TensorView gate);

// The Gated DeltaNet gates of Qwen3-Next from ba bf16 [T, 2 Hv] (rows strided: columns [0, Hv)
// are b, [Hv, 2 Hv) are a): beta f32 [T, Hv] = sigmoid(b), g f32 [T, Hv] = -exp(a_log) *
// softplus(a + dt_bias) (the log decay; a_log and dt_bias are one constant for every head here).
void DeltaNetGates(DeviceContext& ctx, float* g, float* beta, TensorView ba, float a_log,
                   float dt_bias);

}  // namespace uniprefill::synthetic_cuda
