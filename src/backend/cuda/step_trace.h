// StepTrace: a diagnostic timeline of the CUDA backend's forwards, asked for by the environment
// (UNIPREFILL_CUDA_STEP_TRACE=path; docs/gpu_performance.md): one JSON line per forward with its
// rows and requests (and each request's work unit), the host's time from Begin to the last
// launch, the host's wait in the final sync (0 when the forward returned without one), the
// host's time since the previous forward returned (the engine's scheduling and bookkeeping; not
// the trace's own time at the previous forward's sync, host_trace_ms: handing its lines to the
// trace's writer thread, which reads the events and CUPTI's records and writes them off the
// engine's thread), and
// from CUDA events the GPU's time on the forward and the GPU's idle time before it. What it answers: how much of a served step is the
// host's, and whether the GPU waits for it. Lines are written at the host syncs, so a forward
// without one is written with the next synced forward.
//
// With UNIPREFILL_CUDA_STEP_TRACE_PHASES=1 as well, each forward's line also splits its GPU
// time by walk phase ("phases": {"begin": ms, "embed": ms, "norm": ms, "attention": ms, ...}):
// an event recorded at every walk step (LayerBackend::MarkPhase), a phase's time the sum of the
// spans from its marks to the next mark (the last to the forward's end). Nothing waits for
// them, unlike ForwardStats::time_phases, so served steps keep their overlap; each mark costs
// the stream an event record (~200 a forward of the 8B shape). Graph-captured forwards (decode
// steps) carry no marks. A span holds its kernels and the GPU's idle time before the next mark.
//
// With UNIPREFILL_CUDA_STEP_TRACE_KERNELS=1 as well, each forward's line also says what its
// kernels were from CUPTI (kernel_timeline.h): "kernels": {"n", "span_ms", "busy_ms", "gap_ms",
// "gaps", "largest_gaps": [[ms, before, after], ...], "by_name": [[name, n, ms, idle ms before],
// ...]}: the GPU's time in the forward's kernels, copies and memsets (their union), its idle time
// between them, and both per kernel name, at the served run's clocks.
// CUPTI costs each launch some host time; read it beside a run without it.
//
// Not for: per-kernel times (ncu).
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend/cuda/kernel_timeline.h"
#include "core/status.h"

namespace uniprefill::cuda_backend {

class StepTrace {
 public:
  // The trace the environment asks for, or null (unset or empty). A path that cannot be opened
  // is an error naming it.
  static Result<std::unique_ptr<StepTrace>> FromEnvironment();
  ~StepTrace();

  // At a forward's start, before it enqueues anything; `units` (a JSON array, written as is)
  // describes its requests' work.
  Status Begin(cudaStream_t stream, int64_t rows, int requests, std::string units = "[]");
  // After the forward's last launch, before its host sync (if any).
  Status Launched(cudaStream_t stream, bool will_sync);
  // After the forward's host sync: hands every forward recorded so far to the writer thread
  // (their events have completed). An error the writer met since the last call comes back here.
  Status Synced();
  // Whether the environment asked for phases (UNIPREFILL_CUDA_STEP_TRACE_PHASES=1).
  bool phases() const { return phases_; }
  // Whether it asked for the kernel view (UNIPREFILL_CUDA_STEP_TRACE_KERNELS=1).
  bool kernels() const { return timeline_ != nullptr; }
  // Between Begin and Launched, with phases(): an event on `stream` starting phase `name` (a
  // string that outlives the trace, WalkPhaseName's). Ignored outside a forward.
  Status Mark(cudaStream_t stream, const char* name);
  // A line of its own (a JSON object), e.g. what PrepareServing measured; written in order with
  // the forwards handed over before it.
  void Note(const std::string& json_object);

 private:
  using Clock = std::chrono::steady_clock;
  struct Forward {
    int64_t rows = 0;
    int requests = 0;
    std::string units;
    bool synced = false;
    cudaEvent_t start = nullptr, end = nullptr;
    // returned: after the host sync (= launched without one); released: when the engine got
    // its thread back from the trace (= returned without a sync).
    Clock::time_point begin, launched, returned, released;
    std::vector<std::pair<const char*, cudaEvent_t>> marks;  // phase starts, in stream order
    uint64_t id = 0;  // the kernel timeline's group
  };
  // What the writer thread writes, in order: forwards, or a note.
  struct Batch {
    std::vector<Forward> forwards;
    std::string note;
  };
  StepTrace(std::FILE* file, bool phases, std::unique_ptr<KernelTimeline> timeline, int device);
  void WriterLoop(int device);
  void Hand(Batch batch);  // to the writer thread
  // The forward's kernels as a JSON object (its timeline group taken).
  Result<std::string> KernelsJson(const Forward& f);
  Status Write(Forward& f);
  // `f`'s phases as a JSON object, its marks' events returned to spare_.
  Result<std::string> PhasesJson(Forward& f);
  void Release(Forward& f);  // the forward's mark events back to spare_

  std::FILE* file_;
  bool phases_ = false;
  std::unique_ptr<KernelTimeline> timeline_;  // null unless the kernel view was asked for
  uint64_t next_id_ = 1;
  std::vector<Forward> open_;  // recorded, not handed over yet (the last one may still run)

  std::mutex spare_mu_;             // the engine takes spares, the writer returns them
  std::vector<cudaEvent_t> spare_;  // marks' events for reuse (one forward records ~200)

  std::mutex mu_;  // pending_, stop_, error_
  std::condition_variable cv_;
  std::deque<Batch> pending_;
  bool stop_ = false;
  Status error_;  // the writer's first error, for the next Synced

  // The writer thread's own (WriterLoop and what it calls).
  cudaEvent_t previous_end_ = nullptr;      // the last written forward's end (owned)
  Clock::time_point previous_released_{};   // when the engine left the last written forward
  double trace_ms_ = 0;                     // its time in the trace, for the next line
  std::thread writer_;  // last: started when everything above exists
};

}  // namespace uniprefill::cuda_backend
