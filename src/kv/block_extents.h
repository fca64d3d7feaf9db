// BlockExtents: free block ids kept as extents (runs of consecutive ids), so that a caller can
// take a whole run at once, for memory where consecutive blocks are consecutive rows.
//
// What it is for: the CUDA KV pool (backend/cuda/cuda_kv_cache.h). A long prefill takes one run
// per attention layer, so each layer's keys and values lie in one piece and a chunk's attention
// over its cached prefix reads them in place instead of copying them out (issue 18).
// Not for: the scheduler's accounting (BlockPool / KvBlockManager); it owns no memory.
//
// Order: single blocks come from the lowest free id; a run from the smallest extent that holds
// it (best fit), at that extent's start, so single blocks and short runs do not split the long
// extents long runs need. Freed ids merge with their neighbours.
// Invariants: every id in [0, num_blocks) is free or used, never both; extents never touch (a
// free id's neighbours in the same extent are merged); free_count() is the sum of the extents.
#pragma once

#include <map>
#include <set>
#include <utility>

#include "core/status.h"

namespace uniprefill {

class BlockExtents {
 public:
  BlockExtents() = default;
  // Ids [0, num_blocks) free.
  explicit BlockExtents(int num_blocks) { Grow(num_blocks); }

  // Ids [num_blocks(), num_blocks) join the free ones (no-op when not larger).
  void Grow(int num_blocks);
  int num_blocks() const { return num_blocks_; }
  int free_count() const { return free_; }
  // The longest run Take(n) could take now (0 when nothing is free).
  int longest_run() const;

  // The lowest free id, or -1 when every id is in use.
  int TakeOne();
  // `count` (>= 1) consecutive ids from the smallest extent that holds them: the first id, or -1
  // (nothing taken) when no extent is that long.
  int TakeRun(int count);
  // Returns used ids [first, first + count) (InvalidArgument, changing nothing, when any of
  // them is free or out of range).
  Status Free(int first, int count = 1);

 private:
  void Insert(int first, int count);
  void Erase(std::map<int, int>::iterator it);

  int num_blocks_ = 0;
  int free_ = 0;
  std::map<int, int> by_first_;            // first id -> length
  std::set<std::pair<int, int>> by_size_;  // (length, first id)
};

}  // namespace uniprefill
