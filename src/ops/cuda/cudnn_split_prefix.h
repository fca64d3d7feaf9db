// Split-KV for a chunk of queries over a deep cached prefix, on cuDNN's fused attention (why:
// cudnn_attention.h). The prefix's key rows are cut into `pieces` near-equal runs, run as one
// batch of non-causal sequences that share the chunk's query rows; the chunk over its own keys
// runs causally as a second call; both write their log-sum-exps, and MergeAttentionPieces
// (cuda_attention_merge.h) weighs the partial outputs into the chunk's attention rows. The result
// equals RunPrefix on the whole prefix up to bf16 rounding of the partial outputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ops/cuda/cudnn_attention.h"
#include "ops/ops.h"

namespace uniprefill::ops::cuda {

struct SplitPrefix {
  int q_row = 0, q_len = 0;  // the chunk's query rows [q_row, q_row + q_len) of q and out
  // Its keys from row kv_row of k and v: `prefix` cached entries, then the chunk's own q_len.
  int kv_row = 0, prefix = 0;
  int pieces = 8;  // the prefix's pieces (1 .. kMaxAttentionPieces - 1)
  int q_rows_bucket = 0;   // both graphs' query rows (>= q_len; 0: a power of two)
  int kv_rows_bucket = 0;  // the pieces' graph's key rows (0: a power of two)
};

// Scratch bytes for `s` with Hq heads of dimension D: partial outputs bf16 [pieces + 1, bucket,
// Hq, D] and log-sum-exps f32 [pieces + 1, Hq, bucket].
size_t SplitPrefixScratchBytes(const SplitPrefix& s, int64_t hq, int64_t d);

// Uploads a small host int32 array for the stream's next launches (the caller's staging).
using UploadInts = std::function<Result<const int32_t*>(const std::vector<int32_t>&)>;

// out rows [q_row, q_row + q_len) bf16 [*, Hq, D] = causal attention (bottom-right) of those q
// rows (bf16 [*, Hq, D], rows strided) over k, v bf16 [*, Hkv, D] rows [kv_row, kv_row + prefix
// + q_len) (rows strided alike), by split-KV. scratch: device, SplitPrefixScratchBytes. Errors as
// CudnnAttention::RunPrefix (out untouched then).
Status RunSplitPrefix(DeviceContext& ctx, CudnnAttention& cudnn, TensorView out, TensorView q,
                      TensorView k, TensorView v, const SplitPrefix& s,
                      const AttentionParams& params, void* scratch, const UploadInts& upload);

}  // namespace uniprefill::ops::cuda
