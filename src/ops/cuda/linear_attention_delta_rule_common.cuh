// What the GatedDeltaRule kernels share (linear_attention_delta_rule.cu: the f32 chunked and
// recurrent kernels and the dispatch; linear_attention_delta_rule_tc.cu: the tensor-core chunked
// kernel): the kernel arguments and the tensor-core kernel's launcher. Private to ops/cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/cuda_linear_attention.h"

namespace uniprefill::ops::cuda::linear_detail {

// The views of GatedDeltaRule as raw pointers and element strides (T: bf16 or float).
template <typename T>
struct DeltaArgs {
  T* out = nullptr;             // [T, Hv, Dv]
  const T* q = nullptr;         // [T, Hk, Dk]
  const T* k = nullptr;         // [T, Hk, Dk]
  const T* v = nullptr;         // [T, Hv, Dv]
  const float* g = nullptr;     // f32 [T, Hv]
  const float* beta = nullptr;  // f32 [T, Hv]
  float* state = nullptr;       // f32 [slots][Hv][Dk][Dv]
  int64_t out_t = 0, out_h = 0, q_t = 0, q_h = 0, k_t = 0, k_h = 0, v_t = 0, v_h = 0;
  int64_t g_t = 0, beta_t = 0;
  int group = 1;  // Hv / Hk
  int hv = 0, dk = 0, dv = 0;
  LinearAttentionBatch seqs;
};

// The chunked delta rule with bf16 tensor-core products (DeltaRuleKernel::kChunkedTensorCore).
// Instantiated for T = __nv_bfloat16 and float (f32 activations are rounded to bf16 on load).
template <typename T>
void LaunchChunkedTensorCore(const DeltaArgs<T>& a, int sm_count, cudaStream_t stream);

inline bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// cp.async needs every 8-element segment of K, Q, V rows 16-byte aligned and wholly in or out.
template <typename T>
inline bool CanCopyAsync(const DeltaArgs<T>& a) {
  if constexpr (sizeof(T) != 2) {
    return false;  // f32 activations are rounded to bf16 on the way
  } else {
    const int64_t strides[] = {a.q_t, a.q_h, a.k_t, a.k_h, a.v_t, a.v_h};
    for (int64_t s : strides) {
      if (s % 8 != 0) return false;
    }
    return a.dk % 8 == 0 && a.dv % 8 == 0 && Aligned16(a.q) && Aligned16(a.k) && Aligned16(a.v);
  }
}

}  // namespace uniprefill::ops::cuda::linear_detail
