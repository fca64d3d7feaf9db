// PlanKeySplits (attention_split_plan.h).
#include "ops/attention_split_plan.h"

#include <algorithm>
#include <functional>
#include <queue>

namespace uniprefill::ops {

double ModelledSplitLaunch(const std::vector<SplitPlanChunk>& chunks, const SplitPlanShape& shape,
                           int splits) {
  if (chunks.empty() || shape.heads <= 0 || shape.sms <= 0 || splits <= 0) return 0;
  int max_rows = 0;
  for (const SplitPlanChunk& c : chunks) max_rows = std::max(max_rows, c.q_rows);
  const int x_tiles = (max_rows + shape.tile_rows - 1) / shape.tile_rows;
  // Free times of the SMs (a min-heap); CTAs start in launch order on the first one free.
  std::priority_queue<double, std::vector<double>, std::greater<double>> free_at;
  for (int i = 0; i < shape.sms; ++i) free_at.push(0.0);
  double makespan = 0;
  double merge = 0;
  for (const SplitPlanChunk& c : chunks) {
    const int64_t offset = c.keys - c.q_rows;  // query i is key offset + i
    for (int split = 0; split < splits; ++split) {
      for (int head = 0; head < shape.heads; ++head) {
        for (int x = 0; x < x_tiles; ++x) {
          const int q_tile = x_tiles - 1 - x;  // heaviest tiles first, as the kernel orders them
          const int64_t q0 = int64_t{q_tile} * shape.tile_rows;
          if (q0 >= c.q_rows) continue;  // exits at once
          const int64_t seen = std::min<int64_t>(offset + q0 + shape.tile_rows, c.keys);
          const int64_t all = (seen + shape.tile_keys - 1) / shape.tile_keys;
          const int64_t steps = all * (split + 1) / splits - all * split / splits;
          const double start = free_at.top();
          free_at.pop();
          const double end = start + static_cast<double>(steps) + shape.cta_overhead;
          free_at.push(end);
          makespan = std::max(makespan, end);
        }
      }
    }
    if (splits > 1) {
      // Reads every split's bf16 rows, writes the merged ones.
      const double bytes = static_cast<double>(splits + 1) * c.q_rows * shape.heads *
                           shape.head_dim * 2.0;
      merge += bytes * shape.merge_steps_per_byte + shape.merge_launch;
    }
  }
  return makespan + merge;
}

int PlanKeySplits(const std::vector<SplitPlanChunk>& chunks, const SplitPlanShape& shape) {
  std::vector<double> time(static_cast<size_t>(std::max(shape.max_splits, 1)) + 1, 0.0);
  double least = ModelledSplitLaunch(chunks, shape, 1);
  time[1] = least;
  for (int splits = 2; splits <= shape.max_splits; ++splits) {
    time[splits] = ModelledSplitLaunch(chunks, shape, splits);
    least = std::min(least, time[splits]);
  }
  for (int splits = 1; splits <= shape.max_splits; ++splits) {
    if (time[splits] <= least * (1.0 + shape.tolerance)) return splits;
  }
  return 1;
}

}  // namespace uniprefill::ops
