// PagedSequenceCache: a SequenceCache whose keys and values live in fixed-size blocks of the paged
// pool (KvArena memory, KvBlockManager tables) instead of per-request growable buffers, so that
// requests share one preallocated budget and UniPrefill's shorter later segments free real memory.
//
// Mapping. Attention layer i belongs to segment s = layout.segment_of_layer[i] and is the l-th
// full-attention (or l-th sliding-window) layer of that segment. Alive index a of that layer lives
// in block table[p * layers_of_kind + l], p = a / block_tokens, row a % block_tokens, where table
// is the manager's FullTable (or SlidingTable) of (id, s): page-major, see kv_block_manager.h.
//
// Staging. The SequenceCache interface hands out one contiguous KvAppendSlot per AppendKv, but a
// step's new rows usually span several blocks. So AppendKv returns views into a per-layer staging
// buffer and Commit (the end of the forward, PackedBatch::Commit) scatters the staged rows into
// their blocks: one extra copy of the step's new rows. Until then Layer() shows the staged rows as
// its last chunk. The staging of a prefill holds its new rows of every layer until Commit (then it
// is freed); decodes reuse a one-row buffer.
//
// Layer() returns one chunk per block (full layers: pages 0..; sliding layers: the pages the
// manager has not released, the last one partial), then the staged chunk. Attention reads the
// chunks in place (ops::AttentionPaged, equal bit for bit to one contiguous buffer); only a
// UniPrefill drop layer's scoring still gathers them (ViewKv in attention_block.cc, once per
// prefill chunk at the drop layers). Sliding layers may show up to a page of
// entries older than the window (released by pages, not entries); the kernels mask by alive index
// or position, so results equal the contiguous cache's (which keeps W - 1 older entries).
//
// Protocol (engine/scheduler.h): the manager must already hold room for every entry appended
// (Schedule: the dense prefill reservation, or AppendDecode), and must not shrink or release the
// request's tables between AppendKv and Commit (CommitPrefill / ReleaseWindow run after the
// forward). One cache per admission: a preempted request gets a fresh cache (and its linear state
// slot is zeroed) when it is recomputed.
//
// Invariants: layer i's committed entries are alive indices 0 .. committed - 1 of its segment, all
// in blocks; staged entries continue them; after Commit every attention layer of segment s holds
// segment_length(s) entries. The cache owns no KV memory (bytes() reports the request's share).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "kv/kv_arena.h"
#include "kv/kv_block_manager.h"
#include "kv/sequence_cache.h"

namespace uniprefill {

class PagedSequenceCache final : public SequenceCache {
 public:
  // Checks the preconditions of the constructor: the layout gives the manager's spec
  // (KvCacheSpec::FromLayout(layout, KvElementBytes(layout.kv_dtype))), the arena backs the
  // manager's pool (same block size, block bytes and K / V dtype, at least as many blocks, state
  // slots and linear layers) and `id` holds blocks.
  static Result<std::unique_ptr<PagedSequenceCache>> Create(CacheLayout layout, int max_tokens,
                                                            const KvBlockManager* manager,
                                                            RequestId id, KvArena* arena);
  // Precondition: what Create checks (asserted in debug builds). Zeroes the request's linear
  // state slot (a fresh prefill, also after a preemption). manager and arena outlive the cache.
  PagedSequenceCache(CacheLayout layout, int max_tokens, const KvBlockManager* manager,
                     RequestId id, KvArena* arena);

  const CacheLayout& layout() const override { return layout_; }
  int length() const override { return length_; }
  int max_tokens() const override { return max_tokens_; }
  int segment_length(int segment) const override { return segment_len_[segment]; }
  // The slot points into the layer's staging buffer; it stays valid until the next AppendKv or
  // Commit. OutOfRange when the context is full; Internal when the indices do not continue the
  // layer's entries or the manager holds no room for them (a scheduler protocol error).
  Result<KvAppendSlot> AppendKv(int layer, int n, const int32_t* pos,
                                const int32_t* index) override;
  KvLayerView Layer(int layer) const override;
  LinearAttentionState* Linear(int layer) override;
  // Scatters every layer's staged rows into their blocks, then counts the step.
  void Commit(int tokens, const std::vector<int>& added) override;
  // The request's blocks (BlocksHeld * block_bytes) plus its linear-state slot.
  size_t bytes() const override;

  RequestId id() const { return id_; }
  // Entries of `layer` appended since the last Commit.
  int staged(int layer) const { return layers_[layer].staged; }

 private:
  struct LayerState {
    bool attention = false;
    bool sliding = false;
    int segment = 0;
    int ordinal = 0;         // l: rank among the segment's layers of the same kind
    int layers_of_kind = 0;  // full (or sliding) layers of the segment: the table's page stride
    int kv_dim = 0;
    int committed = 0;       // entries in blocks: alive indices 0 .. committed - 1
    int staged = 0;          // entries appended since the last Commit
    std::vector<uint8_t> k, v;           // layout's kv_dtype [staged, kv_dim]
    std::vector<int32_t> pos, index;     // [staged]
  };

  std::span<const int> Table(const LayerState& l) const;
  void Scatter(int layer);

  CacheLayout layout_;
  int max_tokens_;
  const KvBlockManager* manager_;
  RequestId id_;
  KvArena* arena_;
  int slot_ = -1;  // the manager's state slot of id_
  int length_ = 0;
  std::vector<int> segment_len_;
  std::vector<LayerState> layers_;
  // A Commit that found no block for a staged row (the tables changed mid-step). Commit cannot
  // return it, so the next AppendKv does.
  Status broken_;
};

}  // namespace uniprefill
