// CUDA paged KV cache ops for decode: appending a step's new keys/values into their pool slots, and
// decode attention (one query token per request) over keys that live in fixed-size pool blocks
// named by per-request block tables (the device twin of the CPU paged layout, kv/kv_arena.h and
// kv/kv_block_manager.h: one table per (request, segment) and layer kind).
//
// Pool layout (one attention layer): block p holds K bf16 [block_tokens, Hkv * D] and then V bf16
// [block_tokens, Hkv * D], described by a 4-D view bf16 [num_blocks, 2, block_tokens, Hkv * D]
// whose strides say where things are: stride[0] = elements between blocks, stride[1] = elements
// from a block's K rows to its V rows, stride[2] = elements between token rows (>= Hkv * D),
// stride[3] =
// 1. K | V interleaved per block, CudaKvPool's two planes (every block's K rows, then every
// block's V rows), a layer slice of a multi-layer pool, or a CPU-arena-like layout (V at
// block_tokens * max_kv_dim, rows of kv_dim) are strided views of the same shape. Each
// token slot also has an int32 key position: a view int32 [num_blocks, block_tokens] (stride[0]
// may exceed block_tokens, e.g. the pos half of the arena's [num_blocks, 2, block_tokens] meta).
// A global slot index is block * block_tokens + offset.
//
// Every op takes the DeviceContext (device kCuda) first, enqueues on ctx.cuda().stream() and never
// synchronises. Integer arrays are device pointers. Data pointers and row/head strides of the bf16
// views must be 16-byte aligned (multiples of 8 elements): the kernels move 16-byte vectors.
// Not for: prefill (cuda_attention.h's FlashAttention), quantised KV, block allocation (the
// KvBlockManager decides ids on the host).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/device_context.h"
#include "core/tensor.h"
#include "ops/ops.h"

namespace uniprefill::ops::cuda {

// Writes R new token rows into their slots: row r of k_new / v_new (bf16 [R, Hkv * D], rows may be
// strided) goes to slot slot_mapping[r] (device int32 [R]; a negative slot skips the row, e.g.
// padding) of kv_pool (bf16 [num_blocks, 2, block_tokens, Hkv * D], see above), and positions[r]
// (device int32 [R]) to the same slot of pos_pool (int32 [num_blocks, block_tokens]). positions may
// be null: pos_pool is then left alone. With `indices` (device int32 [R]) as well, indices[r] goes
// to the same slot of index_pool (int32 [num_blocks, block_tokens], like pos_pool): the CUDA
// cache's second coordinate (alive index) in the same launch, instead of a kernel of its own per
// layer. Slots must be distinct; slots past the pool are skipped. An exact copy. R == 0 is a
// no-op.
void PagedKvAppend(DeviceContext& ctx, TensorView kv_pool, TensorView pos_pool, TensorView k_new,
                   TensorView v_new, const int32_t* slot_mapping, const int32_t* positions,
                   TensorView index_pool = TensorView(), const int32_t* indices = nullptr);

// Rope (cuda_dense_ops.h) of a fused QKV row's query and key heads, then PagedKvAppend of the
// rotated keys and the values, in one launch (one block per row) instead of two: equal bit for
// bit to Rope(qk, pos, inv_freq, rot_dims, style) followed by PagedKvAppend(kv_pool, pos_pool,
// keys, v_new, slot_mapping, positions, index_pool, indices), where keys are qk's last
// kv_heads heads as bf16 [R, kv_heads * D]. qk bf16 [R, Hq + kv_heads, D] is rotated in place
// (query heads then key heads; row stride free, heads D apart, so that the keys of a row are
// contiguous as the pool's rows); pos int32 [R]; inv_freq f32 [rot_dims / 2]. The other
// arguments as PagedKvAppend's. A slot that skips its row (negative) still rotates it.
void RopePagedKvAppend(DeviceContext& ctx, TensorView qk, int kv_heads, const int32_t* pos,
                       const float* inv_freq, int rot_dims, RopeStyle style, TensorView kv_pool,
                       TensorView pos_pool, TensorView v_new, const int32_t* slot_mapping,
                       const int32_t* positions, TensorView index_pool = TensorView(),
                       const int32_t* indices = nullptr);

// A batch of decode queries over the paged cache (all device int32 arrays).
struct PagedDecodeBatch {
  // block_tables[b * max_blocks_per_seq + i] is the block of request b's keys i * block_tokens ..
  // (i + 1) * block_tokens - 1 (table order = key order). A negative entry (BlockPool::kNoBlock:
  // a sliding-window page released behind the window) is skipped: its keys count as invisible.
  const int32_t* block_tables = nullptr;  // [batch, max_blocks_per_seq]
  int max_blocks_per_seq = 0;             // row stride of block_tables
  const int32_t* seq_lens = nullptr;      // [batch]: number of key slots of request b (may be 0)
  const int32_t* q_pos = nullptr;         // [batch]: position of request b's query token
  // An upper bound of every seq_lens[b], known on the host (e.g. the scheduler's longest context):
  // it sizes the split-K grid and the scratch; keys past it are never read.
  int max_seq_len = 0;
};

// Which kernel PagedDecodeAttention runs. kTensorCores (the default, kAuto): K / V tiles through a
// cp.async pipeline, Q K^T and P V on mma.sync (bf16 in, f32 accumulate; P rounded to bf16 like
// the prefill kernels). kCudaCores: f32 FMAs over lanes, the earlier kernel, kept as a second judge
// in the tests and as the measured baseline (docs/gpu_performance.md, decode).
enum class DecodeAttentionKernel { kAuto, kTensorCores, kCudaCores };

// Scratch bytes PagedDecodeAttention needs for these sizes on this device with this kernel (0 when
// no request is split, so scratch may then be null). The split count grows as batch * Hkv falls
// short of filling the GPU, so one request with a 128K context is spread over hundreds of CTAs;
// the scratch is small (about 4 * batch * Hq * splits * (D + 1) bytes, a few MB at most).
size_t PagedDecodeAttentionScratchBytes(
    DeviceContext& ctx, int batch, int q_heads, int kv_heads, int head_dim, int max_seq_len,
    DecodeAttentionKernel kernel = DecodeAttentionKernel::kAuto);

// Decode attention, flash-decoding style: out[b, h] = softmax over the visible keys of request b of
// scale * q[b, h] . k, times v, with f32 scores, softmax and accumulation.
//   out bf16 [B, Hq, D] (rows and heads strided), q bf16 [B, Hq, D] (rows and heads strided, e.g.
//   a column slice of a fused QKV output); kv_pool, pos_pool as above, with Hkv * D =
//   kv_pool.dim(3) and D = q.dim(2) in {64, 128, 256}; block_tokens = kv_pool.dim(2), a power of
//   two (16, 32 or 64 in practice).
// Query head h uses kv head h / (Hq / Hkv). Key j (slot order) of request b is visible iff its
// position p satisfies p <= q_pos[b] and (window == 0 or p > q_pos[b] - window) (positions ascend
// along the table; after UniPrefill drops they have gaps). A query with no visible key gets zeros.
// Keys are split across CTAs (split-K) when batch * Hkv alone would not fill the GPU; the partial
// results are merged by a second kernel through `scratch` (16-byte aligned device memory of at
// least PagedDecodeAttentionScratchBytes for the same sizes and kernel; contents need no
// initialisation).
void PagedDecodeAttention(DeviceContext& ctx, TensorView out, TensorView q, TensorView kv_pool,
                          TensorView pos_pool, const PagedDecodeBatch& batch,
                          const AttentionParams& params, void* scratch, size_t scratch_bytes,
                          DecodeAttentionKernel kernel = DecodeAttentionKernel::kAuto);

}  // namespace uniprefill::ops::cuda
