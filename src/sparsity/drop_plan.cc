#include "sparsity/drop_plan.h"

#include "sparsity/keep_rules.h"

namespace uniprefill {

bool Selects(const DropRequest& r) {
  return r.allow_drop && r.rows > r.params->sink + r.params->last_n;
}

bool PlanSyncFree(std::span<const DropRequest> requests, bool has_drops, DropSync policy) {
  bool any_selects = false;
  for (const DropRequest& r : requests) {
    if (!r.allow_drop) continue;
    if (!r.fixed_ratio) return false;
    if (Selects(r)) {
      any_selects = true;
      if (r.cache_holds_tokens) return false;
    }
  }
  return has_drops && any_selects && policy == DropSync::kOnlyWhenNeeded;
}

SegmentLayout PlanExactSegment(std::span<const DropRequest> requests,
                               const std::vector<std::vector<int32_t>>& keep) {
  SegmentLayout out;
  int first_row = 0;  // the request's first row in the current segment
  for (size_t r = 0; r < requests.size(); ++r) {
    const DropRequest& q = requests[r];
    const bool kept_some = r < keep.size() && !keep[r].empty();
    const int n = kept_some ? static_cast<int>(keep[r].size()) : q.rows;
    out.begin.push_back(out.total);
    out.rows.push_back(n);
    out.rows_min.push_back(n);
    out.selected.push_back(kept_some ? 1 : 0);
    for (int i = 0; i < n; ++i) {
      out.source.push_back(first_row + (kept_some ? keep[r][i] : i));
      out.index.push_back(q.next_base + i);
    }
    out.total += n;
    first_row += q.rows;
  }
  return out;
}

SegmentLayout PlanBoundedSegment(std::span<const DropRequest> requests) {
  SegmentLayout out;
  for (const DropRequest& q : requests) {
    const bool selects = Selects(q);
    const sparsity::SelectionParams& p = *q.params;
    const int rows = selects ? static_cast<int>(sparsity::FixedRatioCapacity(
                                   q.rows, p.block_size, p.sink, p.last_n, p.keep_ratio))
                             : q.rows;
    const int rows_min = selects ? static_cast<int>(sparsity::FixedRatioMinimum(
                                       q.rows_min, p.block_size, p.sink, p.last_n, p.keep_ratio))
                                 : q.rows_min;
    out.begin.push_back(out.total);
    out.rows.push_back(rows);
    out.rows_min.push_back(rows_min);
    out.selected.push_back(selects ? 1 : 0);
    out.total += rows;
  }
  return out;
}

}  // namespace uniprefill
