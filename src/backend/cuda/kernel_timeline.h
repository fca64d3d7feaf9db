// KernelTimeline: every kernel, copy and memset the GPU ran, with its GPU start and end, from
// CUPTI's activity API, grouped by the forward that launched it. The step trace's kernel view
// (UNIPREFILL_CUDA_STEP_TRACE_KERNELS=1, step_trace.h): how much of a served forward's GPU span
// was kernels and how much the GPU sat between them, at the clocks the served run had (Nsight
// Compute times kernels one at a time; Nsight Systems is not on every machine).
//
// libcupti is loaded at run time (dlopen), so the engine neither links nor needs it; Open says
// what to install or put on LD_LIBRARY_PATH when it is missing. Groups are CUPTI external
// correlation ids: every CUDA call the calling thread makes between BeginGroup and EndGroup
// (cuBLAS's included) belongs to the group.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/gpu_activity_summary.h"
#include "core/status.h"

namespace uniprefill::cuda_backend {

class KernelTimeline {
 public:
  // The process's one timeline (CUPTI's buffer callbacks carry no user pointer): an error while
  // another is open, or when libcupti cannot be loaded or enabled.
  static Result<std::unique_ptr<KernelTimeline>> Open();
  ~KernelTimeline();
  KernelTimeline(const KernelTimeline&) = delete;
  KernelTimeline& operator=(const KernelTimeline&) = delete;

  // The calling thread's CUDA calls belong to group `id` until EndGroup.
  Status BeginGroup(uint64_t id);
  Status EndGroup();
  // After the group's work ran (a sync): flushes CUPTI's buffers and returns the group's
  // activities (any order), forgetting them and every activity launched outside a group before
  // the group ended.
  Result<std::vector<GpuActivity>> Take(uint64_t id);

  struct Impl;  // the CUPTI entry points and the collected records (kernel_timeline.cc)

 private:
  explicit KernelTimeline(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace uniprefill::cuda_backend
