// Shared pieces of the CUDA linear-attention kernels (linear_attention_conv.cu,
// linear_attention_delta_rule.cu): a sequence's rows and state slot from a LinearAttentionBatch,
// bf16 / f32 element loads and stores as f32, a warp sum, and the host-side precondition checks.
// Private to ops/cuda.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/tensor.h"
#include "ops/cuda/cuda_linear_attention.h"

namespace uniprefill::ops::cuda::linear_detail {

using bf16 = __nv_bfloat16;

// Sequence b of a batch: its first row, its row count and its state slot.
struct SeqInfo {
  int64_t bos = 0;
  int len = 0;
  int64_t slot = 0;
};
__device__ __forceinline__ SeqInfo GetSeq(const LinearAttentionBatch& s, int b) {
  SeqInfo r;
  if (s.cu_seqlens != nullptr) {
    r.bos = s.cu_seqlens[b];
    r.len = s.cu_seqlens[b + 1] - s.cu_seqlens[b];
    if (s.seq_lens != nullptr) r.len = max(0, min(r.len, s.seq_lens[b]));
  } else {
    r.bos = static_cast<int64_t>(b) * s.max_seqlen;
    r.len = s.max_seqlen;
  }
  r.slot = s.state_slots != nullptr ? s.state_slots[b] : b;
  return r;
}

__device__ __forceinline__ float LoadF(const float* p) { return *p; }
__device__ __forceinline__ float LoadF(const bf16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void StoreF(float* p, float v) { *p = v; }
__device__ __forceinline__ void StoreF(bf16* p, float v) { *p = __float2bfloat16_rn(v); }

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// A violated precondition is a bug in the calling model code: say which op and what, then stop.
inline void Require(bool ok, const char* op, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "cuda::%s: %s\n", op, what);
    std::abort();
  }
}

// bf16 or f32 device view with a contiguous last dimension (the token tensors of these ops).
inline bool IsActivation(const TensorView& v) {
  return v.device == Device::kCuda && (v.dtype == DType::kBF16 || v.dtype == DType::kF32) &&
         v.ndim >= 2 && v.stride[v.ndim - 1] == 1;
}

}  // namespace uniprefill::ops::cuda::linear_detail
