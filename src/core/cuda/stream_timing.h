// TimeRunsMs: how long each of several runs of some work takes on a CUDA stream, by events
// (PrepareServing's measurements, the GEMM tuner, bench gpu-prefill's GEMM ceiling).
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <type_traits>
#include <vector>

#include "core/status.h"

namespace uniprefill {

// Milliseconds of each of `runs` runs of `work` (what it enqueues on `stream`; it returns void or
// a Status, and an error ends the timing with it). Each run is synchronised; warm-ups are the
// caller's. A CUDA error of the events is returned, not aborted on.
template <typename Work>
Result<std::vector<float>> TimeRunsMs(cudaStream_t stream, int runs, Work&& work) {
  cudaEvent_t start = nullptr, end = nullptr;
  cudaError_t err = cudaEventCreate(&start);
  if (err == cudaSuccess) err = cudaEventCreate(&end);
  std::vector<float> ms;
  Status st = OkStatus();
  for (int i = 0; i < runs && st.ok() && err == cudaSuccess; ++i) {
    err = cudaEventRecord(start, stream);
    if (err != cudaSuccess) break;
    if constexpr (std::is_void_v<std::invoke_result_t<Work&>>) {
      work();
    } else {
      st = work();
      if (!st.ok()) break;
    }
    float t = 0;
    err = cudaEventRecord(end, stream);
    if (err == cudaSuccess) err = cudaEventSynchronize(end);
    if (err == cudaSuccess) err = cudaEventElapsedTime(&t, start, end);
    if (err == cudaSuccess) ms.push_back(t);
  }
  if (start != nullptr) cudaEventDestroy(start);
  if (end != nullptr) cudaEventDestroy(end);
  UP_RETURN_IF_ERROR(st);
  if (err != cudaSuccess) {
    return Internal(std::string("timing on the stream: ") + cudaGetErrorString(err));
  }
  return ms;
}

}  // namespace uniprefill
