// BlockPool: a fixed number of equally sized blocks handed out by id, each in O(1).
//
// What it is for: the bookkeeping of the paged KV cache (KvBlockManager) and of the per-request
// linear-attention state slots. It owns no memory: a block id is an index into storage that the
// model side allocates once (block b lives at offset b * block_bytes of the KV arena).
// Not for: sizing from a byte budget (KvBlockManager does that), refcounts or prefix sharing.
//
// Order (tests rely on it): the free list is a LIFO stack. A fresh pool hands out 0, 1, 2, ...; a
// freed block is the next one handed out, so freeing a run of blocks in reverse order and
// allocating again yields the same ids in the same order (and recently used memory is reused
// while warm).
// Invariants: every id in [0, num_blocks) is either free or used, never both; free_count() +
// used_count() == num_blocks(); freeing a free or unknown id is an error Status, changing nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/status.h"

namespace uniprefill {

class BlockPool {
 public:
  // A block id that stands for "no block" in tables (e.g. a page a sliding window released).
  static constexpr int kNoBlock = -1;

  explicit BlockPool(int num_blocks);

  // The next free block (LIFO), or nullopt when every block is in use.
  std::optional<int> Allocate();
  // Returns a used block to the pool. Freeing a free or out-of-range id is InvalidArgument.
  Status Free(int block);

  int num_blocks() const { return static_cast<int>(used_.size()); }
  int free_count() const { return static_cast<int>(free_.size()); }
  int used_count() const { return num_blocks() - free_count(); }
  bool is_used(int block) const;

 private:
  std::vector<int> free_;      // stack of free ids: back() is handed out next
  std::vector<uint8_t> used_;  // [num_blocks] 1 while handed out
};

}  // namespace uniprefill
