// KvBlockManager: which KV blocks and which linear-attention state slot each running request holds,
// as plain bookkeeping (no tensors). The scheduler asks it whether a request fits; the model side
// (a PagedSequenceCache) reads the block tables to find where each token's keys and values live.
//
// Unit of memory. One block holds `block_tokens` consecutive alive indices of ONE attention layer
// (its keys and values): block_bytes = block_tokens * layer_token_bytes. Segments (docs/design.md
// section 2) hold different numbers of layers (Llama-3.1-8B with drops at 7, 11, ..., 27 has 8
// layers in segment 0 and 4 in the others), so a block sized for "all layers of a segment" would
// not be one fixed size; a per-layer block keeps one pool of equal blocks shared by every segment,
// which is what turns UniPrefill's shorter later segments into room for more requests.
//
// Block tables, per (request, segment), one for its full-attention layers and one for its
// sliding-window layers. Both are page-major: page p covers alive indices [p * block_tokens,
// (p + 1) * block_tokens) of the segment and holds one block per layer of that kind, so entry
// p * layers + l is the block of the segment's l-th layer of that kind. The sliding table marks
// pages that left every future query's window as BlockPool::kNoBlock (their blocks went back to the
// pool); the full table never has holes. Linear-attention layers take no blocks: each request holds
// one state slot (index into per-layer state arrays of max_seqs entries) for all of them.
//
// UniPrefill. A prefill's kept counts per segment are known only after its forward, so a prefill is
// reserved dense (every segment holds the whole prompt, sliding layers too, because every query of
// the step needs its window) and CommitPrefill then shrinks each segment to what it kept and
// releases the sliding pages behind the window. Decodes add one token to every segment
// (AppendDecode).
//
// Allocation order (tests assert exact ids): segment by segment; within a segment the full table's
// new pages (page-major, layer-minor), then the sliding table's. Frees run in the reverse order, so
// with the LIFO pool the blocks of a request allocated in one call come back in the same order.
//
// Invariants: every used pool block appears in exactly one table entry; a request holds one state
// slot; a failed call (ResourceExhausted, InvalidArgument) changes nothing (CheckInvariants()).
// Not for: prefix caching, copy-on-write sharing, swapping to host memory, or tensor memory.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "kv/block_pool.h"

namespace uniprefill {

struct CacheLayout;  // kv/sequence_cache.h

using RequestId = int64_t;

// The cache layout as the block manager needs it: layer counts, not tensors.
struct KvSegmentSpec {
  int full_layers = 0;     // full-attention layers in this segment
  int sliding_layers = 0;  // sliding-window layers in this segment
  int window = 0;          // W of its sliding layers (a query sees the W newest alive indices)
};

struct KvCacheSpec {
  std::vector<KvSegmentSpec> segments;  // one per segment, segment 0 first
  int64_t layer_token_bytes = 0;   // K + V bytes of one token of one attention layer (the largest)
  int linear_layers = 0;           // linear-attention (Gated DeltaNet) layers
  int64_t linear_state_bytes = 0;  // recurrent + conv state of one linear layer for one request

  int n_segments() const { return static_cast<int>(segments.size()); }
  Status Validate() const;
  // Counts the layout's layers per segment. KV entries take kv_element_bytes per value (4: f32);
  // linear state is f32. Sliding layers of one segment with different windows use the largest.
  static Result<KvCacheSpec> FromLayout(const CacheLayout& layout, int kv_element_bytes);
};

// Flags of the paged cache (names, defaults and help text in one place).
struct KvCacheConfig {
  int64_t memory_bytes = int64_t{4} << 30;  // --kv-cache-memory: bytes for KV blocks + linear state
  int block_tokens = 16;                    // --kv-block-tokens: alive indices per block
  int max_seqs = 256;  // --max-num-seqs: requests running at once (= linear state slots)
};

// How the budget was split.
struct KvPoolSize {
  int num_blocks = 0;
  int block_tokens = 16;
  int state_slots = 0;
};

// Memory in use now, and what the same requests would hold had every prefill been dense.
struct KvUsage {
  int num_blocks = 0;
  int used_blocks = 0;
  // Blocks the running requests would hold if every segment held segment 0's tokens (a dense
  // prefill), with the same sliding-window releases. Exact between steps; during a step the new
  // prefills hold their dense reservation, which counts the same on both sides.
  int dense_blocks = 0;
  int64_t block_bytes = 0;
  int64_t used_bytes = 0;
  int64_t dense_bytes = 0;
  int64_t saved_bytes = 0;  // dense_bytes - used_bytes: what UniPrefill saved (may dip below 0 by a
                            // page when a shorter segment's window straddles a page boundary)
  int state_slots = 0;
  int used_state_slots = 0;
  int64_t state_bytes = 0;  // bytes of the used state slots (all linear layers)
};

class KvBlockManager {
 public:
  // Splits config.memory_bytes: max_seqs state slots first, the rest into whole blocks.
  static Result<KvPoolSize> SizePool(const KvCacheSpec& spec, const KvCacheConfig& config);
  static Result<KvBlockManager> Create(KvCacheSpec spec, const KvCacheConfig& config);
  // Exact pool sizes (tests, or a size computed elsewhere). The spec must Validate().
  KvBlockManager(KvCacheSpec spec, KvPoolSize size);

  KvBlockManager(KvBlockManager&&) = default;
  KvBlockManager& operator=(KvBlockManager&&) = default;
  KvBlockManager(const KvBlockManager&) = delete;
  KvBlockManager& operator=(const KvBlockManager&) = delete;

  const KvCacheSpec& spec() const { return spec_; }
  int n_segments() const { return spec_.n_segments(); }
  int block_tokens() const { return block_tokens_; }
  int num_blocks() const { return pool_.num_blocks(); }
  int free_blocks() const { return pool_.free_count(); }
  int free_state_slots() const { return slots_.free_count(); }
  int64_t block_bytes() const { return int64_t{block_tokens_} * spec_.layer_token_bytes; }

  // Blocks a new request takes to hold tokens[s] alive indices in segment s (sliding layers hold
  // all of them until ReleaseWindow). `tokens` has one entry per segment.
  int BlocksFor(const std::vector<int>& tokens) const;
  // BlocksFor with `tokens` in every segment: a dense prefill's reservation.
  int DenseBlocksFor(int tokens) const;
  // Whether Allocate(tokens) would succeed now (blocks and a free state slot).
  bool CanAllocate(const std::vector<int>& tokens) const;

  // Registers a new request holding tokens[s] in segment s and takes its blocks and a state slot.
  // ResourceExhausted (nothing taken) when either runs out.
  Status Allocate(RequestId id, const std::vector<int>& tokens);
  // Blocks Extend(id, added) would take; -1 for an unknown request.
  int BlocksToExtend(RequestId id, const std::vector<int>& added) const;
  // Grows segment s of a request by added[s] alive indices (all or nothing).
  Status Extend(RequestId id, const std::vector<int>& added);
  // One decode token: every segment grows by one.
  bool CanAppendDecode(RequestId id) const;
  Status AppendDecode(RequestId id);

  // After a prefill's forward: segment s now holds kept[s] <= its reservation tokens in total
  // (UniPrefill's kept counts; a dense prefill passes the reservation). Frees the pages past them,
  // then releases the sliding windows.
  Status CommitPrefill(RequestId id, const std::vector<int>& kept);
  // After a step: frees sliding pages no future query can see. A segment holding T tokens keeps
  // alive indices >= T - (W - 1): the next query (index T) sees T - W + 1 .. T.
  Status ReleaseWindow(RequestId id);
  // Returns every block and the state slot of a request.
  Status Free(RequestId id);

  bool Contains(RequestId id) const { return requests_.count(id) != 0; }
  int num_requests() const { return static_cast<int>(requests_.size()); }
  // Alive indices segment s of a request holds (reserved ones included); 0 for an unknown request.
  int segment_tokens(RequestId id, int segment) const;
  // Page-major block tables (see the header comment); empty for an unknown request.
  std::span<const int> FullTable(RequestId id, int segment) const;
  std::span<const int> SlidingTable(RequestId id, int segment) const;
  // The request's linear-attention state slot, or -1.
  int StateSlot(RequestId id) const;
  int BlocksHeld(RequestId id) const;
  // Blocks this request would hold after a dense prefill (see KvUsage::dense_blocks).
  int DenseBlocksHeld(RequestId id) const;

  KvUsage Usage() const;
  // Every used block in exactly one table entry, counts consistent, slots unique.
  Status CheckInvariants() const;

 private:
  struct SegmentTables {
    int tokens = 0;
    std::vector<int> full;       // [pages * full_layers]
    std::vector<int> sliding;    // [pages * sliding_layers], kNoBlock where released
    int sliding_first_live = 0;  // sliding pages below this were released
    int dense_first_live = 0;    // the same for a dense request holding segment 0's tokens
  };
  struct RequestTables {
    std::vector<SegmentTables> segments;
    int state_slot = -1;
    int blocks = 0;  // pool blocks held
  };

  int Pages(int tokens) const { return (tokens + block_tokens_ - 1) / block_tokens_; }
  Status CheckCounts(const std::vector<int>& counts, const char* what) const;
  void Grow(RequestTables& r, const std::vector<int>& added);
  void ShrinkSegment(RequestTables& r, int segment, int tokens);
  void ReleaseSegmentWindow(RequestTables& r, int segment);
  void FreeBlock(RequestTables& r, int& entry);

  KvCacheSpec spec_;
  int block_tokens_ = 16;
  BlockPool pool_;
  BlockPool slots_;
  std::unordered_map<RequestId, RequestTables> requests_;
};

}  // namespace uniprefill
