// What the two paged decode attention kernels (paged_attention.cu: CUDA cores; paged_decode_tc.cuh:
// tensor cores) share: their launch arguments and the block-table tile they stage in shared memory.
// Private to ops/cuda.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace uniprefill::ops::cuda::paged {

constexpr int kTableTile = 256;  // block-table entries staged in shared memory per tile

struct DecodeArgs {
  const __nv_bfloat16* q;
  __nv_bfloat16* out;
  const __nv_bfloat16* kv;
  const int32_t* pos;
  const int32_t* table;
  const int32_t* seq_lens;
  const int32_t* q_pos;
  float* part_o;    // f32 [B, Hq, splits, D] (splits > 1)
  float* part_lse;  // f32 [B, Hq, splits]: log2 of the split's sum of 2^scores, -inf when empty
  int64_t q_row, q_head, o_row, o_head;  // strides in elements
  int64_t blk_stride, v_off, kv_row;     // pool strides in elements
  int64_t pos_blk;                       // pos_pool row stride
  int num_blocks;
  int table_stride;
  int hq, group, head_chunks;  // a CTA takes group / head_chunks query heads (rounded up)
  int splits, keys_per_split;
  int block_shift;  // log2(block_tokens)
  int window;
  float scale_log2;  // scale * log2(e)
};

}  // namespace uniprefill::ops::cuda::paged
