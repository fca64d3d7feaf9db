// KvArena: the tensor memory behind a KvBlockManager's pool. The manager hands out block ids and
// state slots (bookkeeping only); the arena is where those ids point: KV rows of pool blocks and
// the linear-attention (Gated DeltaNet) state of each slot. PagedSequenceCache reads and writes it.
//
// Blocks. One allocation of num_blocks * block_bytes, block_bytes = block_tokens *
// layer_token_bytes exactly as KvBlockManager::SizePool budgeted it (layer_token_bytes = K + V of
// one token of the widest attention layer in the layout's kv_dtype, f32 or f16). Block b starts at
// byte b * block_bytes and holds
//   K kv_dtype [block_tokens, max_kv_dim], then V kv_dtype [block_tokens, max_kv_dim].
// A layer with kv_dim < max_kv_dim packs its rows at the start of each half (row stride = its own
// kv_dim), so a run of rows of one block is always one contiguous [count, kv_dim] chunk.
// Each token slot also carries its original position and alive index (int32 pos[block_tokens],
// index[block_tokens] per block, a second allocation): 8 bytes per token slot on top of the
// budget, which counts K and V only (for Gemma 3 270M, 8 of 2048 bytes per token and layer).
//
// Linear-attention state: one LinearAttentionState per (state slot, linear layer), allocated
// lazily on first use with the layer's LinearStateShape (an idle slot costs nothing). Reset(slot)
// zeroes a slot's states for a new request.
//
// Invariants: the arena never decides who owns a block or slot (the manager does); accessors take
// ids in range (checked with assert). Not thread-safe: Linear() may allocate; the engine drives
// forwards from one thread. Not for: host/device transfers, quantised (int8 / int4) KV, swapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/buffer.h"
#include "kv/kv_block_manager.h"
#include "kv/kv_rows.h"
#include "kv/linear_state.h"
#include "kv/sequence_cache.h"

namespace uniprefill {

class KvArena {
 public:
  // The pool sizes as the manager was built with (KvBlockManager::SizePool, or exact sizes).
  KvArena(const CacheLayout& layout, const KvPoolSize& size);
  KvArena(const CacheLayout& layout, int num_blocks, int block_tokens, int state_slots);

  KvArena(const KvArena&) = delete;
  KvArena& operator=(const KvArena&) = delete;

  int num_blocks() const { return num_blocks_; }
  int block_tokens() const { return block_tokens_; }
  int state_slots() const { return state_slots_; }
  int max_kv_dim() const { return max_kv_dim_; }
  DType dtype() const { return dtype_; }  // of every K / V element (CacheLayout::kv_dtype)
  // K + V bytes of one block (KvBlockManager::block_bytes() for the same layout and block size).
  int64_t block_bytes() const {
    return int64_t{2} * block_tokens_ * max_kv_dim_ * KvElementBytes(dtype_);
  }
  // Bytes of one slot's state over all linear layers (allocated or not).
  int64_t slot_state_bytes() const { return slot_state_bytes_; }
  int linear_layers() const { return static_cast<int>(linear_layers_.size()); }

  // Row `row` of block `block` for a layer of `kv_dim` values per row: dtype() [kv_dim], followed
  // by the block's later rows (stride kv_dim). The two-argument forms use max_kv_dim.
  void* k(int block, int row, int kv_dim) const;
  void* v(int block, int row, int kv_dim) const;
  void* k(int block, int row) const { return k(block, row, max_kv_dim_); }
  void* v(int block, int row) const { return v(block, row, max_kv_dim_); }
  // The position / alive index of token slot `row` of `block` (then the block's later rows).
  int32_t* pos(int block, int row) const;
  int32_t* index(int block, int row) const;

  // The state of linear-attention layer `layer` (a model layer index) in `slot`, allocated (zero)
  // on first use; nullptr when `layer` is not a linear-attention layer or `slot` is out of range.
  LinearAttentionState* Linear(int slot, int layer);
  // Zeroes every allocated state of `slot` (a new request in that slot).
  void Reset(int slot);

  // Memory held: KV blocks + pos/index + allocated linear states.
  size_t bytes() const;

 private:
  int num_blocks_ = 0, block_tokens_ = 0, state_slots_ = 0, max_kv_dim_ = 0;
  DType dtype_ = DType::kF32;
  Buffer kv_;                   // dtype_ [num_blocks, 2 (K, V), block_tokens, max_kv_dim]
  Buffer meta_;                 // int32 [num_blocks, 2 (pos, index), block_tokens]
  std::vector<int> linear_of_layer_;  // [n_layers]: ordinal among linear layers, or -1
  std::vector<LinearStateShape> linear_layers_;  // [linear layers]
  int64_t slot_state_bytes_ = 0;
  std::vector<std::unique_ptr<LinearAttentionState>> states_;  // [state_slots, linear layers]
};

}  // namespace uniprefill
