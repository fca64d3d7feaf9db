// One token row's keys, values and slot coordinates into the paged pool, as PagedKvAppend
// (cuda_paged_attention.h) writes them: shared by PagedKvAppend (paged_attention.cu) and
// RopePagedKvAppend (rope_append.cu). Private to ops/cuda.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace uniprefill::ops::cuda::detail {

struct AppendArgs {
  __nv_bfloat16* kv = nullptr;  // the pool: bf16 [num_blocks, 2, block_tokens, kv_dim], strided
  int64_t blk_stride = 0, v_off = 0, kv_row = 0;
  int32_t* pos = nullptr;  // positions: int32 [num_blocks, block_tokens], rows pos_blk apart
  int64_t pos_blk = 0;
  int64_t num_slots = 0;
  int block_tokens = 0;
  const __nv_bfloat16* k_new = nullptr;  // bf16 [rows, kv_dim], rows k_row apart
  int64_t k_row = 0;
  const __nv_bfloat16* v_new = nullptr;  // bf16 [rows, kv_dim], rows v_row apart
  int64_t v_row = 0;
  const int32_t* slots = nullptr;      // int32 [rows]
  const int32_t* positions = nullptr;  // int32 [rows] or null (pos left alone)
  int32_t* index = nullptr;            // the alive-index plane, like pos, or null
  int64_t index_blk = 0;
  const int32_t* indices = nullptr;  // int32 [rows] or null
  int kv_dim = 0;
  bool vectorised = false;  // 16-byte copies (kv_dim % 8 == 0, everything 16-byte aligned)
  int64_t rows = 0;
};

// Row r copied by the block's threads (an exact copy; a negative slot or one past the pool: none).
__device__ __forceinline__ void AppendRow(const AppendArgs& a, int r) {
  const int slot = a.slots[r];
  if (slot < 0 || slot >= a.num_slots) return;
  const int64_t blk = slot / a.block_tokens, off = slot % a.block_tokens;
  __nv_bfloat16* dst_k = a.kv + blk * a.blk_stride + off * a.kv_row;
  __nv_bfloat16* dst_v = dst_k + a.v_off;
  const __nv_bfloat16* src_k = a.k_new + static_cast<int64_t>(r) * a.k_row;
  const __nv_bfloat16* src_v = a.v_new + static_cast<int64_t>(r) * a.v_row;
  if (a.vectorised) {
    for (int i = threadIdx.x; i < a.kv_dim / 8; i += blockDim.x) {
      reinterpret_cast<uint4*>(dst_k)[i] = reinterpret_cast<const uint4*>(src_k)[i];
      reinterpret_cast<uint4*>(dst_v)[i] = reinterpret_cast<const uint4*>(src_v)[i];
    }
  } else {
    for (int i = threadIdx.x; i < a.kv_dim; i += blockDim.x) {
      dst_k[i] = src_k[i];
      dst_v[i] = src_v[i];
    }
  }
  if (threadIdx.x == 0 && a.positions != nullptr) a.pos[blk * a.pos_blk + off] = a.positions[r];
  if (threadIdx.x == 0 && a.indices != nullptr) a.index[blk * a.index_blk + off] = a.indices[r];
}

// PagedKvAppend's checks (aborting with a message naming `op` on misuse) and its kernel's
// arguments (paged_attention.cu).
AppendArgs CheckedAppendArgs(const char* op, TensorView kv_pool, TensorView pos_pool,
                             TensorView k_new, TensorView v_new, const int32_t* slot_mapping,
                             const int32_t* positions, TensorView index_pool,
                             const int32_t* indices);

}  // namespace uniprefill::ops::cuda::detail
