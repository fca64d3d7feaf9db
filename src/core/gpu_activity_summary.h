// What a forward's GPU timeline says: given the kernels, copies and memsets the GPU ran for it
// (GPU start and end, ns), how long the GPU was busy (the union of their intervals), how long
// its span was, where it sat idle between them (the largest gaps, named by the activity that
// ended before and the one that started after), and per name how many ran, their time and the
// idle time before them (which kernels a forward's small-kernel overhead is made of). Pure: the CUDA step trace's kernel view
// (backend/cuda/kernel_timeline.h) feeds it CUPTI's records; tests feed it by hand.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace uniprefill {

struct GpuActivity {
  uint64_t start_ns = 0, end_ns = 0;  // end >= start; zero-length ones count, take no time
  std::string name;                   // a kernel's (mangled) name, "[memcpy]", "[memset]"
};

struct GpuGap {
  double ms = 0;
  std::string before, after;  // the activity whose end opened the gap, the one that closed it
};

// The activities of one name: how many, their own time (summed, overlaps included) and the GPU's
// idle time right before them (the gaps they closed).
struct GpuActivityName {
  std::string name;
  int count = 0;
  double ms = 0;
  double idle_before_ms = 0;
};

struct GpuActivitySummary {
  int activities = 0;
  double span_ms = 0;  // first start to last end (0 with no activities)
  double busy_ms = 0;  // the union of the activities' intervals
  double gap_ms = 0;   // span - busy: the GPU idle between them
  int gaps = 0;        // idle stretches between activities (> 0 ns)
  std::vector<GpuGap> largest;  // the `largest_gaps` longest, longest first
  std::vector<GpuActivityName> by_name;  // every name, most time (ms + idle_before_ms) first
};

GpuActivitySummary SummarizeGpuActivities(std::vector<GpuActivity> activities, int largest_gaps);

// A kernel's name as a person reads it: a mangled C++ name demangled, its return type,
// parameters and anonymous namespaces dropped ("uniprefill::ops::cuda::RmsNormKernel<128>");
// anything else (cuBLAS's "nvjet_..." kernels, "[memcpy]") as it is.
std::string ReadableKernelName(const std::string& name);

}  // namespace uniprefill
