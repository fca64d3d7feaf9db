// The two-kernel tensor-core delta rule (DeltaRuleKernel::kChunkedTensorCoreSplit,
// linear_attention_delta_rule_split.cu). Not a public op interface: GatedDeltaRule dispatches.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "ops/cuda/linear_attention_delta_rule_common.cuh"

namespace uniprefill::ops::cuda::linear_detail {

// Device scratch the split kernel needs for `rows` token rows (256-byte aligned pieces).
size_t SplitDeltaRuleScratchBytes(int64_t rows, int hv, int dv);

// Requirements: bf16 q, k, v with 16-byte aligned rows, strides and Dk, Dv multiples of 8 (as the
// fused kernel's cp.async path), Dv <= 128; rows >= every token row the sequences reach; scratch
// of SplitDeltaRuleScratchBytes(rows, hv, dv) bytes, 256-byte aligned.
void LaunchChunkedTensorCoreSplit(const DeltaArgs<__nv_bfloat16>& a, int64_t rows, void* scratch,
                                  int sm_count, cudaStream_t stream);

}  // namespace uniprefill::ops::cuda::linear_detail
