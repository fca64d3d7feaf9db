// StepTrace (step_trace.h): CUDA events around each forward, written as JSON lines at host syncs.
#include "backend/cuda/step_trace.h"

#include <cstdlib>

#include "core/cuda/cuda_check.h"

namespace uniprefill::cuda_backend {

namespace {

double Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

}  // namespace

Result<std::unique_ptr<StepTrace>> StepTrace::FromEnvironment() {
  const char* path = std::getenv("UNIPREFILL_CUDA_STEP_TRACE");
  if (path == nullptr || *path == '\0') return std::unique_ptr<StepTrace>();
  std::FILE* file = std::fopen(path, "w");
  if (file == nullptr) {
    return InvalidArgument(std::string("UNIPREFILL_CUDA_STEP_TRACE: cannot write '") + path +
                           "' (unset the variable, or name a writable file)");
  }
  return std::unique_ptr<StepTrace>(new StepTrace(file));
}

StepTrace::~StepTrace() {
  for (Forward& f : open_) {
    cudaEventDestroy(f.start);
    cudaEventDestroy(f.end);
  }
  if (previous_end_) cudaEventDestroy(previous_end_);
  std::fclose(file_);
}

Status StepTrace::Begin(cudaStream_t stream, int64_t rows, int requests, std::string units) {
  // A forward that failed before its launch ended (its end event never recorded) is dropped:
  // its times do not exist. (H200, session 7: writing it aborted a server whose forward failed.)
  if (!open_.empty() && open_.back().launched == Clock::time_point{}) {
    cudaEventDestroy(open_.back().start);
    cudaEventDestroy(open_.back().end);
    open_.pop_back();
  }
  Forward f;
  f.begin = Clock::now();
  f.rows = rows;
  f.requests = requests;
  f.units = std::move(units);
  UP_CUDA_CHECK(cudaEventCreate(&f.start));
  UP_CUDA_CHECK(cudaEventCreate(&f.end));
  UP_CUDA_CHECK(cudaEventRecord(f.start, stream));
  open_.push_back(f);
  return OkStatus();
}

Status StepTrace::Launched(cudaStream_t stream, bool will_sync) {
  if (open_.empty()) return OkStatus();
  Forward& f = open_.back();
  f.launched = Clock::now();
  f.synced = will_sync;
  UP_CUDA_CHECK(cudaEventRecord(f.end, stream));
  if (!will_sync) f.returned = f.launched;
  return OkStatus();
}

Status StepTrace::Synced() {
  if (open_.empty()) return OkStatus();
  open_.back().returned = Clock::now();
  for (const Forward& f : open_) UP_RETURN_IF_ERROR(Write(f));
  open_.clear();
  std::fflush(file_);
  return OkStatus();
}

void StepTrace::Note(const std::string& json_object) {
  std::fprintf(file_, "%s\n", json_object.c_str());
  std::fflush(file_);
}

Status StepTrace::Write(const Forward& f) {
  float gpu_ms = 0, idle_ms = -1;  // idle: -1 for the first forward
  UP_CUDA_CHECK(cudaEventElapsedTime(&gpu_ms, f.start, f.end));
  if (previous_end_) {
    UP_CUDA_CHECK(cudaEventElapsedTime(&idle_ms, previous_end_, f.start));
    UP_CUDA_CHECK(cudaEventDestroy(previous_end_));
  }
  const double between_ms =
      previous_return_ == Clock::time_point{} ? -1.0 : Ms(f.begin - previous_return_);
  std::fprintf(file_,
               "{\"rows\": %lld, \"requests\": %d, \"synced\": %s, \"host_launch_ms\": %.3f, "
               "\"host_wait_ms\": %.3f, \"host_between_ms\": %.3f, \"gpu_ms\": %.3f, "
               "\"gpu_idle_before_ms\": %.3f, \"units\": %s}\n",
               static_cast<long long>(f.rows), f.requests, f.synced ? "true" : "false",
               Ms(f.launched - f.begin), f.synced ? Ms(f.returned - f.launched) : 0.0,
               between_ms, gpu_ms, idle_ms, f.units.empty() ? "[]" : f.units.c_str());
  UP_CUDA_CHECK(cudaEventDestroy(f.start));
  previous_end_ = f.end;
  previous_return_ = f.returned;
  return OkStatus();
}

}  // namespace uniprefill::cuda_backend
