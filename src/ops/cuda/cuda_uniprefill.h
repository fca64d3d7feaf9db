// CUDA UniPrefill kernels (DESIGN.md section 1): attention-mass scoring from the last n queries,
// block reduction, per-request top-p / fixed-ratio block selection and the compaction row list, all
// on the device. GPU twins of ops::AttentionImportance and sparsity::SelectTokens; the selection
// equals the CPU one on the same importance (ties broken the same way).
#pragma once

#include <cstdint>

#include "core/device_context.h"
#include "core/tensor.h"
#include "sparsity/token_selection.h"

namespace uniprefill::ops::cuda {

// importance f32 [N] (device, accumulated into: zero it first) += for each query j of q and head
// h, the f32 softmax over the keys visible to j (k_pos[i] <= q_pos[j]) of scale * q[j,h].k[i,kv(h)].
// q bf16 [n, Hq, D] (rows strided); k bf16 [N, Hkv, D] (rows strided); q_pos device int32 [n];
// k_pos device int32 [N], ascending.
void AttentionImportance(DeviceContext& ctx, float* importance, TensorView q, TensorView k,
                         const int32_t* q_pos, const int32_t* k_pos, float scale);

// Scratch for SelectTokens on up to max_tokens tokens (device memory, reused across calls).
size_t SelectTokensScratchBytes(int64_t max_tokens, const sparsity::SelectionParams& params);

// The kept token indices of one request, as sparsity::SelectTokens: kept_rows device int32 [N]
// receives the kept indices ascending in its first *kept_count entries; kept_count is a device
// int32 [1]. importance device f32 [N]. No host synchronisation: the caller copies kept_count back
// when it needs it on the host.
void SelectTokens(DeviceContext& ctx, int32_t* kept_rows, int32_t* kept_count,
                  const float* importance, int64_t n_tokens,
                  const sparsity::SelectionParams& params, void* scratch, size_t scratch_bytes);

}  // namespace uniprefill::ops::cuda
