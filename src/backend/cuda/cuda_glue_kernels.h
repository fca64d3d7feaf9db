// Small device kernels that glue the CUDA model's layers together (the heavy ops live in
// ops/cuda/). Each enqueues on ctx.cuda().stream() and never synchronises; integer arrays are
// device pointers; an R or T of 0 is a no-op.
#pragma once

#include <cstdint>

#include "core/device_context.h"
#include "core/tensor.h"

namespace uniprefill::cuda_backend {

// x bf16 [T, H, D] (contiguous) *= sigmoid(gate), gate bf16 [T, H, D] (rows and heads strided):
// Qwen3-Next's gated attention output.
void SigmoidGateMul(DeviceContext& ctx, TensorView x, TensorView gate);

// The Gated DeltaNet gates of T rows and Hv value heads: beta = sigmoid(b),
// g = -exp(a_log) * softplus(a + dt_bias). b, a bf16 [T, Hv] (rows strided); a_log, dt_bias f32
// [Hv]; g, beta f32 [T, Hv] contiguous.
void DeltaNetGates(DeviceContext& ctx, float* g, float* beta, TensorView b, TensorView a,
                   const float* a_log, const float* dt_bias);

// Copies sequences' cache entries out of the KV pool into contiguous rows: sequence b's entries
// 0 .. row_begin[b + 1] - row_begin[b] - 1 (entry a in block table[b * max_blocks + a /
// block_tokens], row a % block_tokens of kv bf16 [num_blocks, 2 (K, V), block_tokens, kv_dim],
// any strides that are multiples of 8 with a contiguous last dim: CudaKvPool's planes)
// become rows row_begin[b] .. of k and v, bf16 [Tk, kv_dim] each (contiguous). kv_dim must be a
// multiple of 8 (16-byte copies). max_len: the longest sequence's entries.
void GatherCacheRows(DeviceContext& ctx, TensorView k, TensorView v, TensorView kv,
                     const int32_t* table, int max_blocks, const int32_t* row_begin, int batch,
                     int max_len);

}  // namespace uniprefill::cuda_backend
