// The host side of a UniPrefill drop, as plain data (docs/design.md section 1): which requests
// select at a drop layer, whether a forward can run its drops without a host sync, and the next
// segment's row layout, exact (after the kept rows are known) or bounded (sync-free: capacities).
// Both backends execute what it plans (scoring, selection and compaction are theirs); it is tested
// on its own with exact row ids (tests/sparsity/drop_plan_test.cc).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sparsity/token_selection.h"
#include "sparsity/uniprefill_config.h"

namespace uniprefill {

// One request at a drop layer, as the host knows it.
struct DropRequest {
  int rows = 0;      // its rows in the current segment (after a sync-free drop: a capacity)
  int rows_min = 0;  // the fewest it may truly have (== rows while exact)
  bool allow_drop = true;
  bool cache_holds_tokens = false;  // its cache held entries before this step
  bool fixed_ratio = false;         // its selection mode is kFixedRatio
  int next_base = 0;  // entries its cache already holds in the next segment (first new index)
  const sparsity::SelectionParams* params = nullptr;  // its selection (mode, p / ratio, G, S, n)
};

// A request selects when it may drop and has more rows than the sink plus the window.
bool Selects(const DropRequest& request);

// Sync-free drops (bounded segments): some request selects, every request that may drop uses a
// fixed ratio (top-p's kept count is unknown until read back), every selecting request starts
// its prompt in this step (a request whose cache holds tokens is scored over its cached keys,
// which the bounded layout does not plan), the forward has drop layers and the policy allows it.
bool PlanSyncFree(std::span<const DropRequest> requests, bool has_drops, DropSync policy);

// The next segment: request r owns rows [begin[r], begin[r] + rows[r]) (capacities when bounded).
struct SegmentLayout {
  std::vector<int> begin, rows, rows_min;
  std::vector<char> selected;  // r selected at this drop
  int total = 0;
  // Exact layouts only: for every next-segment row its row in the current segment (the gather
  // list) and its alive index in the next segment (next_base + i).
  std::vector<int32_t> source, index;
};

// After the kept rows are known: keep[r] lists request r's kept rows, relative to its first row
// and ascending; an empty list (a request that did not select) keeps them all.
SegmentLayout PlanExactSegment(std::span<const DropRequest> requests,
                               const std::vector<std::vector<int32_t>>& keep);

// Sync-free: every selecting request gets FixedRatioCapacity rows (its true count, at least
// FixedRatioMinimum, stays on the device); the others keep theirs.
SegmentLayout PlanBoundedSegment(std::span<const DropRequest> requests);

}  // namespace uniprefill
