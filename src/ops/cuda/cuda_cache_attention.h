// CUDA attention over the paged KV pool for any head dim (a multiple of 8 up to 256) and any number
// of query rows per request: the general fallback of the GPU model where the fast kernels do not
// apply (FlashAttention and PagedDecodeAttention take D in {64, 128, 256} only; the tiny test
// checkpoints have D = 16 or 32), for a step that brings several new tokens to a request whose
// cache already holds keys (chunked prefill continuing a cache), and for the decode rows inside a
// mixed prefill + decode batch. SIMT f32 math (no tensor cores): correct for every shape first,
// reasonably fast second (src/ops/cuda/cache_attention.cu says how it works and what it costs).
//
// Pool layout exactly as in cuda_paged_attention.h: kv_pool bf16 [num_blocks, 2, block_tokens,
// Hkv * D] (strided views allowed: stride[0] between blocks, stride[1] from K rows to V rows,
// stride[2] between token rows, stride[3] = 1), coord_pool int32 [num_blocks, block_tokens]
// (stride[0] may exceed block_tokens) holding each slot's mask coordinate (its key position).
// block_tokens any power of two. Keys are read as 16-byte vectors when the pool's data pointer and
// strides are multiples of 8 elements, element by element otherwise. q and out may have any row /
// head strides (last dim contiguous) and need no alignment.
//
// Enqueues on ctx.cuda().stream(), never synchronises, needs no scratch. Integer arrays are device
// pointers.
#pragma once

#include <cstdint>

#include "core/device_context.h"
#include "core/tensor.h"
#include "ops/ops.h"

namespace uniprefill::ops::cuda {

// Query rows of request b are rows [q_start[b], q_start[b] + q_len[b]) of q and out (requests
// with q_len 0 are skipped and their out rows untouched; rows of different requests may leave
// gaps). All arrays device int32.
struct CacheAttentionBatch {
  const int32_t* q_start = nullptr;       // [batch]
  const int32_t* q_len = nullptr;         // [batch]
  const int32_t* q_coord = nullptr;       // [total q rows, indexed like q's rows]: mask coordinate of each query row
  const int32_t* block_tables = nullptr;  // [batch, max_blocks_per_seq]; negative entry = released page, keys invisible
  int max_blocks_per_seq = 0;
  const int32_t* seq_lens = nullptr;      // [batch]: key slots of request b
  int batch = 0;
  int max_q_len = 0;                      // host upper bound of q_len (grid sizing)
  int max_seq_len = 0;                    // host upper bound of seq_lens
};

// out bf16 [Tq, Hq, D] (rows strided), q bf16 [Tq, Hq, D] (rows and heads strided, e.g. column
// slices of a fused QKV GEMM output, or [query | gate] interleaved heads with head stride 2D);
// kv_pool bf16 [num_blocks, 2, block_tokens, Hkv * D] and coord_pool int32 [num_blocks, block_tokens]
// exactly as in cuda_paged_attention.h (strided views allowed; block_tokens any power of two).
// Key j (slot order along the table) of request b is visible to query row i iff
// coord[j] <= q_coord[i] and (window == 0 or coord[j] > q_coord[i] - window). f32 scores/softmax/
// accumulation; a query with no visible key gets zeros. D any multiple of 8 up to 256;
// Hq a multiple of Hkv (query head h uses kv head h / (Hq / Hkv)).
// Keys of request b are its first min(seq_lens[b], max_blocks_per_seq * block_tokens) slots along
// its table; table entries that are negative or >= num_blocks are skipped (their keys invisible).
// Coordinates need not ascend along the table. max_q_len must bound every q_len[b] (rows past it
// are not computed); max_seq_len is only checked against the table size.
void CacheAttention(DeviceContext& ctx, TensorView out, TensorView q, TensorView kv_pool,
                    TensorView coord_pool, const CacheAttentionBatch& batch,
                    const AttentionParams& params);

}  // namespace uniprefill::ops::cuda
