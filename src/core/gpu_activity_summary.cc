// SummarizeGpuActivities (gpu_activity_summary.h): one sweep over the activities by start.
#include "core/gpu_activity_summary.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>

namespace uniprefill {

GpuActivitySummary SummarizeGpuActivities(std::vector<GpuActivity> activities, int largest_gaps) {
  GpuActivitySummary s;
  s.activities = static_cast<int>(activities.size());
  std::map<std::string, GpuActivityName> names;
  for (const GpuActivity& a : activities) {
    GpuActivityName& n = names[a.name];
    ++n.count;
    if (a.end_ns > a.start_ns) n.ms += static_cast<double>(a.end_ns - a.start_ns) * 1e-6;
  }
  // Zero-length activities (a timestamp pair CUPTI can report for an empty copy) take no time
  // and split no gap.
  std::erase_if(activities, [](const GpuActivity& a) { return a.end_ns <= a.start_ns; });
  const auto names_by_time = [&] {
    for (auto& [name, n] : names) {
      n.name = name;
      s.by_name.push_back(std::move(n));
    }
    std::stable_sort(s.by_name.begin(), s.by_name.end(),
                     [](const GpuActivityName& a, const GpuActivityName& b) {
                       return a.ms + a.idle_before_ms > b.ms + b.idle_before_ms;
                     });
  };
  if (activities.empty()) {
    names_by_time();
    return s;
  }
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
      names[a.name].idle_before_ms += gaps.back().ms;
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
  names_by_time();
  return s;
}

std::string ReadableKernelName(const std::string& name) {
  int status = 0;
  const std::unique_ptr<char, decltype(&std::free)> demangled(
      abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status), &std::free);
  if (status != 0 || demangled == nullptr) return name;
  std::string s = demangled.get();
  for (const std::string noise : {"(anonymous namespace)::", "uniprefill::ops::cuda::"}) {
    for (size_t at; (at = s.find(noise)) != std::string::npos;) s.erase(at, noise.size());
  }
  // The name ends at its parameter list (the first '(' outside template brackets); a return
  // type before it ends at the last space outside them.
  int depth = 0;
  size_t begin = 0, end = s.size();
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '<') ++depth;
    if (c == '>') --depth;
    if (depth == 0 && c == ' ') begin = i + 1;
    if (depth == 0 && c == '(') {
      end = i;
      break;
    }
  }
  return begin < end ? s.substr(begin, end - begin) : s;
}

}  // namespace uniprefill
