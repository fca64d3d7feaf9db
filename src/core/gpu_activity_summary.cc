// SummarizeGpuActivities (gpu_activity_summary.h): one sweep over the activities by start.
#include "core/gpu_activity_summary.h"

#include <algorithm>

namespace uniprefill {

GpuActivitySummary SummarizeGpuActivities(std::vector<GpuActivity> activities, int largest_gaps) {
  GpuActivitySummary s;
  s.activities = static_cast<int>(activities.size());
  // Zero-length activities (a timestamp pair CUPTI can report for an empty copy) take no time
  // and split no gap.
  std::erase_if(activities, [](const GpuActivity& a) { return a.end_ns <= a.start_ns; });
  if (activities.empty()) return s;
  std::stable_sort(activities.begin(), activities.end(),
                   [](const GpuActivity& a, const GpuActivity& b) { return a.start_ns < b.start_ns; });
  constexpr double kNsPerMs = 1e6;
  const uint64_t first = activities.front().start_ns;
  // The running union's end and the activity that reached it (overlapping activities: streams
  // or copies beside kernels).
  uint64_t covered_to = activities.front().end_ns;
  const GpuActivity* last_to_end = &activities.front();
  uint64_t busy = covered_to - first;
  std::vector<GpuGap> gaps;
  for (size_t i = 1; i < activities.size(); ++i) {
    const GpuActivity& a = activities[i];
    if (a.start_ns > covered_to) {
      gaps.push_back({static_cast<double>(a.start_ns - covered_to) / kNsPerMs, last_to_end->name,
                      a.name});
      busy += a.end_ns - a.start_ns;
      covered_to = a.end_ns;
      last_to_end = &a;
    } else if (a.end_ns > covered_to) {
      busy += a.end_ns - covered_to;
      covered_to = a.end_ns;
      last_to_end = &a;
    }
  }
  s.span_ms = static_cast<double>(covered_to - first) / kNsPerMs;
  s.busy_ms = static_cast<double>(busy) / kNsPerMs;
  s.gap_ms = s.span_ms - s.busy_ms;
  s.gaps = static_cast<int>(gaps.size());
  const size_t keep = std::min(gaps.size(), static_cast<size_t>(std::max(largest_gaps, 0)));
  std::partial_sort(gaps.begin(), gaps.begin() + keep, gaps.end(),
                    [](const GpuGap& a, const GpuGap& b) { return a.ms > b.ms; });
  gaps.resize(keep);
  s.largest = std::move(gaps);
  return s;
}

}  // namespace uniprefill
