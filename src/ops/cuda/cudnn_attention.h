// cuDNN's fused attention (the cuDNN frontend's SDPA graph) for the prefill cases its masks express,
// beside our FlashAttention (cuda_attention.h) for the rest. Chosen per model by
// LoadOptions::gpu_attention; measured against our kernel in docs/gpu_performance.md.
//
// Covered: packed varlen self-attention of prompts whose query and key rows are the same rows and
// whose mask coordinates are their row indices within the sequence (a fresh prompt in segment 0,
// and in later segments, where alive indices restart at 0), causal, GQA, bf16 in and out, D 64,
// 128 or 256, rows strided (the fused QKV GEMM's column slices). Each sequence may end in padding
// rows (the sync-free drop's capacities): seq_len holds its true length, and padding rows are
// neither keys nor written. Not covered (FlashAttention runs them): a drop layer's kept queries
// (coordinates not their row indices), sliding windows, requests whose cache holds tokens.
//
// One graph per shape bucket (batch, max length rounded up to a power of two, heads, head dim,
// strides, scale) is built once (cuDNN's heuristics, then its plan) and reused.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ops/ops.h"

namespace uniprefill::ops::cuda {

// Sequence b owns rows [row_begin[b], row_begin[b + 1]) of q, k, v and out (capacities), of which
// the first seq_len[b] are real. The offsets are those row begins in elements of each view (row
// begin x the view's row stride): device int32 [batch + 1] each (RaggedOffsets makes them).
struct CudnnVarlen {
  const int32_t* seq_len = nullptr;  // device int32 [batch]
  const int32_t* q_offsets = nullptr;
  const int32_t* k_offsets = nullptr;
  const int32_t* v_offsets = nullptr;
  const int32_t* o_offsets = nullptr;
  int batch = 0;
  int max_rows = 0;  // the longest sequence's rows
};

// offsets[b] = row_begin[b] * row_stride, b <= batch (host).
std::vector<int32_t> RaggedOffsets(const std::vector<int32_t>& row_begin, int64_t row_stride);

class CudnnAttention {
 public:
  // Unimplemented in builds without cuDNN (UNIPREFILL_WITH_CUDNN), or when no handle can be made.
  static Result<std::unique_ptr<CudnnAttention>> Create(DeviceContext& ctx);
  virtual ~CudnnAttention() = default;

  // out bf16 [T, Hq, D] = causal attention of q bf16 [T, Hq, D] over k, v bf16 [T, Hkv, D] per
  // sequence; params.window must be 0. An error (an unsupported shape) leaves out untouched: the
  // caller runs FlashAttention instead.
  virtual Status Run(DeviceContext& ctx, TensorView out, TensorView q, TensorView k, TensorView v,
                     const CudnnVarlen& batch, const AttentionParams& params) = 0;
};

}  // namespace uniprefill::ops::cuda
