// StepTrace (step_trace.h): CUDA events around each forward, written as JSON lines at host syncs.
#include "backend/cuda/step_trace.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/gpu_activity_summary.h"

namespace uniprefill::cuda_backend {

namespace {

double Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

}  // namespace

Result<std::unique_ptr<StepTrace>> StepTrace::FromEnvironment() {
  const char* path = std::getenv("UNIPREFILL_CUDA_STEP_TRACE");
  const char* phases = std::getenv("UNIPREFILL_CUDA_STEP_TRACE_PHASES");
  const bool want_phases = phases != nullptr && std::string(phases) == "1";
  const char* kernels = std::getenv("UNIPREFILL_CUDA_STEP_TRACE_KERNELS");
  const bool want_kernels = kernels != nullptr && std::string(kernels) == "1";
  if (path == nullptr || *path == '\0') {
    const std::pair<bool, const char*> additions[] = {{want_phases, "PHASES"},
                                                      {want_kernels, "KERNELS"}};
    for (const auto& [wanted, name] : additions) {
      if (wanted) {
        return InvalidArgument(std::string("UNIPREFILL_CUDA_STEP_TRACE_") + name +
                               "=1 adds to the step trace's lines, but no trace was asked for: "
                               "set UNIPREFILL_CUDA_STEP_TRACE=path as well, or unset it");
      }
    }
    return std::unique_ptr<StepTrace>();
  }
  std::unique_ptr<KernelTimeline> timeline;
  if (want_kernels) {
    UP_ASSIGN_OR_RETURN(timeline, KernelTimeline::Open());
  }
  std::FILE* file = std::fopen(path, "w");
  if (file == nullptr) {
    return InvalidArgument(std::string("UNIPREFILL_CUDA_STEP_TRACE: cannot write '") + path +
                           "' (unset the variable, or name a writable file)");
  }
  int device = 0;
  UP_CUDA_CHECK(cudaGetDevice(&device));
  return std::unique_ptr<StepTrace>(
      new StepTrace(file, want_phases, std::move(timeline), device));
}

StepTrace::StepTrace(std::FILE* file, bool phases, std::unique_ptr<KernelTimeline> timeline,
                     int device)
    : file_(file), phases_(phases), timeline_(std::move(timeline)) {
  writer_ = std::thread([this, device] { WriterLoop(device); });
}

StepTrace::~StepTrace() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  writer_.join();  // it writes what was handed over first
  for (Forward& f : open_) {
    cudaEventDestroy(f.start);
    cudaEventDestroy(f.end);
    Release(f);
  }
  for (cudaEvent_t e : spare_) cudaEventDestroy(e);
  if (previous_end_) cudaEventDestroy(previous_end_);
  std::fclose(file_);
}

void StepTrace::Release(Forward& f) {
  std::lock_guard<std::mutex> lock(spare_mu_);
  for (const auto& [name, event] : f.marks) spare_.push_back(event);
  f.marks.clear();
}

void StepTrace::Hand(Batch batch) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(std::move(batch));
  }
  cv_.notify_one();
}

void StepTrace::WriterLoop(int device) {
  // Event times and CUPTI's records are read on this thread, so that a traced run's engine
  // keeps its pace (H200, 27th session: written at the sync, 311 chunks' lines took 2.9 s
  // between a prompt's last chunk and its first token).
  cudaSetDevice(device);
  for (;;) {
    Batch batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
      if (pending_.empty()) return;  // stopping, everything written
      batch = std::move(pending_.front());
      pending_.pop_front();
    }
    Status st;
    for (Forward& f : batch.forwards) {
      if (st.ok()) {
        st = Write(f);
      } else {  // after an error: the events go, the lines do not
        cudaEventDestroy(f.start);
        cudaEventDestroy(f.end);
        Release(f);
      }
    }
    if (!batch.note.empty()) std::fprintf(file_, "%s\n", batch.note.c_str());
    std::fflush(file_);
    if (!st.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (error_.ok()) error_ = st;
    }
  }
}

Status StepTrace::Begin(cudaStream_t stream, int64_t rows, int requests, std::string units) {
  // A forward that failed before its launch ended (its end event never recorded) is dropped:
  // its times do not exist. (H200, session 7: writing it aborted a server whose forward failed.)
  if (!open_.empty() && open_.back().launched == Clock::time_point{}) {
    if (timeline_) UP_RETURN_IF_ERROR(timeline_->EndGroup());  // its group was never closed
    cudaEventDestroy(open_.back().start);
    cudaEventDestroy(open_.back().end);
    Release(open_.back());
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
  if (timeline_) {
    f.id = next_id_++;
    UP_RETURN_IF_ERROR(timeline_->BeginGroup(f.id));
  }
  open_.push_back(f);
  return OkStatus();
}

Status StepTrace::Mark(cudaStream_t stream, const char* name) {
  if (!phases_ || open_.empty() || open_.back().launched != Clock::time_point{}) {
    return OkStatus();
  }
  cudaEvent_t event = nullptr;
  {
    std::lock_guard<std::mutex> lock(spare_mu_);
    if (!spare_.empty()) {
      event = spare_.back();
      spare_.pop_back();
    }
  }
  if (event == nullptr) UP_CUDA_CHECK(cudaEventCreate(&event));
  open_.back().marks.emplace_back(name, event);
  UP_CUDA_CHECK(cudaEventRecord(event, stream));
  return OkStatus();
}

Status StepTrace::Launched(cudaStream_t stream, bool will_sync) {
  if (open_.empty()) return OkStatus();
  Forward& f = open_.back();
  f.launched = Clock::now();
  f.synced = will_sync;
  UP_CUDA_CHECK(cudaEventRecord(f.end, stream));
  if (timeline_) UP_RETURN_IF_ERROR(timeline_->EndGroup());
  if (!will_sync) f.returned = f.released = f.launched;
  return OkStatus();
}

Status StepTrace::Synced() {
  if (open_.empty()) return OkStatus();
  open_.back().returned = Clock::now();
  Batch batch;
  batch.forwards.swap(open_);
  // The engine's time from here is its own: the next forward's host_between_ms starts now, and
  // its host_trace_ms is this hand-over (the lines are the writer thread's work).
  batch.forwards.back().released = Clock::now();
  Hand(std::move(batch));
  std::lock_guard<std::mutex> lock(mu_);
  Status error = error_;
  error_ = Status();
  return error;
}

void StepTrace::Note(const std::string& json_object) {
  Batch batch;
  batch.note = json_object;
  Hand(std::move(batch));
}

Result<std::string> StepTrace::PhasesJson(Forward& f) {
  // Each phase's spans summed, phases in the order they first ran; "begin" is the forward's
  // uploads and layout before its first mark.
  std::vector<std::pair<std::string, double>> phases;
  const auto add = [&](const std::string& name, cudaEvent_t from, cudaEvent_t to) -> Status {
    float ms = 0;
    UP_CUDA_CHECK(cudaEventElapsedTime(&ms, from, to));
    for (auto& [n, total] : phases) {
      if (n == name) {
        total += ms;
        return OkStatus();
      }
    }
    phases.emplace_back(name, ms);
    return OkStatus();
  };
  UP_RETURN_IF_ERROR(add("begin", f.start, f.marks.front().second));
  for (size_t i = 0; i < f.marks.size(); ++i) {
    const cudaEvent_t to = i + 1 < f.marks.size() ? f.marks[i + 1].second : f.end;
    UP_RETURN_IF_ERROR(add(f.marks[i].first, f.marks[i].second, to));
  }
  Release(f);
  std::string json = "{";
  char buf[64];
  for (const auto& [name, ms] : phases) {
    std::snprintf(buf, sizeof(buf), "%s\"%s\": %.3f", json.size() > 1 ? ", " : "", name.c_str(),
                  ms);
    json += buf;
  }
  return json + "}";
}

Result<std::string> StepTrace::KernelsJson(const Forward& f) {
  UP_ASSIGN_OR_RETURN(std::vector<GpuActivity> activities, timeline_->Take(f.id));
  const GpuActivitySummary k = SummarizeGpuActivities(std::move(activities), 3);
  // Kernel names demangled and shortened (ReadableKernelName), quotes and backslashes (template
  // arguments may hold them) replaced, cut to keep lines short.
  const auto name = [](const std::string& n) {
    std::string s = ReadableKernelName(n).substr(0, 80);
    for (char& c : s) {
      if (c == '"' || c == '\\') c = '_';
    }
    return "\"" + s + "\"";
  };
  char buf[160];
  std::snprintf(buf, sizeof(buf),
                "{\"n\": %d, \"span_ms\": %.3f, \"busy_ms\": %.3f, \"gap_ms\": %.3f, "
                "\"gaps\": %d, \"largest_gaps\": [",
                k.activities, k.span_ms, k.busy_ms, k.gap_ms, k.gaps);
  std::string json = buf;
  for (size_t i = 0; i < k.largest.size(); ++i) {
    std::snprintf(buf, sizeof(buf), "%s[%.3f, ", i ? ", " : "", k.largest[i].ms);
    json += buf + name(k.largest[i].before) + ", " + name(k.largest[i].after) + "]";
  }
  // Every name the forward ran: [name, count, ms, idle ms before], most time first.
  json += "], \"by_name\": [";
  for (size_t i = 0; i < k.by_name.size(); ++i) {
    const GpuActivityName& n = k.by_name[i];
    json += (i ? ", [" : "[") + name(n.name);
    std::snprintf(buf, sizeof(buf), ", %d, %.4f, %.4f]", n.count, n.ms, n.idle_before_ms);
    json += buf;
  }
  return json + "]}";
}

Status StepTrace::Write(Forward& f) {
  float gpu_ms = 0, idle_ms = -1;  // idle: -1 for the first forward
  UP_CUDA_CHECK(cudaEventElapsedTime(&gpu_ms, f.start, f.end));
  std::string extra;  // the optional phases and kernels
  if (!f.marks.empty()) {
    UP_ASSIGN_OR_RETURN(std::string json, PhasesJson(f));
    extra = ", \"phases\": " + json;
  }
  if (timeline_) {
    UP_ASSIGN_OR_RETURN(std::string json, KernelsJson(f));
    extra += ", \"kernels\": " + json;
  }
  if (previous_end_) {
    UP_CUDA_CHECK(cudaEventElapsedTime(&idle_ms, previous_end_, f.start));
    UP_CUDA_CHECK(cudaEventDestroy(previous_end_));
  }
  const double between_ms =
      previous_released_ == Clock::time_point{} ? -1.0 : Ms(f.begin - previous_released_);
  std::fprintf(file_,
               "{\"rows\": %lld, \"requests\": %d, \"synced\": %s, \"host_launch_ms\": %.3f, "
               "\"host_wait_ms\": %.3f, \"host_between_ms\": %.3f, \"host_trace_ms\": %.3f, "
               "\"gpu_ms\": %.3f, \"gpu_idle_before_ms\": %.3f, \"units\": %s%s}\n",
               static_cast<long long>(f.rows), f.requests, f.synced ? "true" : "false",
               Ms(f.launched - f.begin), f.synced ? Ms(f.returned - f.launched) : 0.0,
               between_ms, trace_ms_, gpu_ms, idle_ms, f.units.empty() ? "[]" : f.units.c_str(),
               extra.c_str());
  UP_CUDA_CHECK(cudaEventDestroy(f.start));
  previous_end_ = f.end;
  previous_released_ = f.released;
  trace_ms_ = Ms(f.released - f.returned);  // 0 without a sync
  return OkStatus();
}

}  // namespace uniprefill::cuda_backend
