// Split-KV's merge (flash-decoding's second step, for query chunks): one attention computed in
// pieces over disjoint sets of keys, each piece's output normalised over its own keys and its
// log-sum-exp of scaled scores kept (cuDNN's stats), is the pieces' outputs weighted by their
// shares of the softmax mass:
//   out = sum_s exp(lse_s - M) o_s / sum_s exp(lse_s - M),  M = max_s lse_s.
// Used by CudaBackend for chunks of a prefill over a deep cached prefix (cudnn_attention.h).
#pragma once

#include <cstdint>

#include "core/device_context.h"
#include "core/tensor.h"

namespace uniprefill::ops::cuda {

// The most pieces one merge takes.
inline constexpr int kMaxAttentionPieces = 16;

// out bf16 [rows, Hq, D] (rows strided, D even) = the merge of `pieces` (1..kMaxAttentionPieces)
// partial outputs, for query row i and head h:
//   piece s's output: partial bf16 [pieces * piece_rows, Hq, D] (contiguous), row s * piece_rows + i
//   its log-sum-exp:  lse f32 [pieces, Hq, lse_rows] (contiguous), element (s, h, i)
// with rows <= piece_rows and rows <= lse_rows.
void MergeAttentionPieces(DeviceContext& ctx, TensorView out, const uint16_t* partial,
                          int64_t piece_rows, const float* lse, int64_t lse_rows, int pieces);

}  // namespace uniprefill::ops::cuda
