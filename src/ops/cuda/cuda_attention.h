// CUDA varlen causal flash attention for prefill (and packed prefill + decode batches): bf16 in and
// out, f32 softmax and accumulation, tensor-core MMAs, online softmax (memory linear in context).
// The GPU twin of ops::Attention, over a packed batch of sequences.
#pragma once

#include <cstdint>

#include "core/device_context.h"
#include "core/tensor.h"
#include "ops/ops.h"

namespace uniprefill::ops::cuda {

// Sequence b's queries are rows [cu_seqlens_q[b], cu_seqlens_q[b+1]) of q, its keys and values
// rows [cu_seqlens_k[b], cu_seqlens_k[b+1]) of k and v (device int32 [batch + 1] each).
struct VarlenBatch {
  const int32_t* cu_seqlens_q = nullptr;
  const int32_t* cu_seqlens_k = nullptr;
  int batch = 0;
  int max_seqlen_q = 0;  // upper bound over b (sizes the grid)
  int max_seqlen_k = 0;
};

// q bf16 [Tq, Hq, D]; k, v bf16 [Tk, Hkv, D]; out bf16 [Tq, Hq, D] (rows of all four may be
// strided: q/k/v are often column slices of one fused QKV GEMM output). Query head h uses kv head
// h / (Hq / Hkv). Within sequence b, key j is visible to query i iff k_pos[j] <= q_pos[i] and
// (window == 0 or k_pos[j] > q_pos[i] - window); positions (device int32 [Tq], [Tk]) ascending
// within each sequence (after a UniPrefill drop they are the kept tokens' original positions, not
// consecutive). A query with no visible key gets zeros. D in {64, 128, 256}.
void FlashAttention(DeviceContext& ctx, TensorView out, TensorView q, TensorView k, TensorView v,
                    const int32_t* q_pos, const int32_t* k_pos, const VarlenBatch& batch,
                    const AttentionParams& params);

}  // namespace uniprefill::ops::cuda
