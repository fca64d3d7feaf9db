// KernelTimeline (kernel_timeline.h): CUPTI's activity records, parsed as CUPTI hands over its
// buffers, kept by correlation id until their group is taken.
#include "backend/cuda/kernel_timeline.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#if __has_include(<cupti_activity.h>)
#include <cupti_activity.h>
#define UP_HAVE_CUPTI_HEADERS 1
#endif

namespace uniprefill::cuda_backend {

#ifdef UP_HAVE_CUPTI_HEADERS

struct KernelTimeline::Impl {
  void* library = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiActivityPushExternalCorrelationId) push_id = nullptr;
  decltype(&cuptiActivityPopExternalCorrelationId) pop_id = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;

  std::mutex mu;  // CUPTI may hand buffers over from its own thread
  // Activities by the correlation id of the call that launched them (a graph launch's kernels
  // share one), and the group each correlation id belongs to.
  std::unordered_map<uint32_t, std::vector<GpuActivity>> activities;
  std::unordered_map<uint32_t, uint64_t> group_of;

  std::string Error(CUptiResult r) const {
    const char* s = nullptr;
    if (result_string) result_string(r, &s);
    return s ? s : "CUPTI error " + std::to_string(static_cast<int>(r));
  }
  void Parse(uint8_t* buffer, size_t valid_bytes);
};

namespace {

// The open timeline: CUPTI's buffer callbacks take no user pointer, so the one open timeline is
// found here (Open refuses a second).
std::mutex open_mu;
KernelTimeline::Impl* open_timeline = nullptr;
bool callbacks_registered = false;  // once a process: the same two functions every time

constexpr size_t kBufferBytes = size_t{8} << 20;

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_bytes) {
  {
    std::lock_guard<std::mutex> lock(open_mu);
    if (open_timeline && buffer) open_timeline->Parse(buffer, valid_bytes);
  }
  std::free(buffer);
}

template <typename F>
bool Resolve(void* library, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(library, name));
  return f != nullptr;
}

}  // namespace

void KernelTimeline::Impl::Parse(uint8_t* buffer, size_t valid_bytes) {
  std::lock_guard<std::mutex> lock(mu);
  CUpti_Activity* record = nullptr;
  while (next_record(buffer, valid_bytes, &record) == CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        activities[k->correlationId].push_back({k->start, k->end, k->name ? k->name : "?"});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        activities[m->correlationId].push_back({m->start, m->end, "[memcpy]"});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        activities[m->correlationId].push_back({m->start, m->end, "[memset]"});
        break;
      }
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
        if (e->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) {
          group_of[e->correlationId] = e->externalId;
        }
        break;
      }
      default:
        break;
    }
  }
}

namespace {

// The API kinds too: CUPTI writes an external correlation record only beside an API record
// (runtime calls ours, driver calls cuBLAS's launches); their records are not kept.
constexpr CUpti_ActivityKind kKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_MEMSET,            CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
    CUPTI_ACTIVITY_KIND_RUNTIME,           CUPTI_ACTIVITY_KIND_DRIVER};

}  // namespace

Result<std::unique_ptr<KernelTimeline>> KernelTimeline::Open() {
  std::lock_guard<std::mutex> lock(open_mu);
  if (open_timeline) {
    return Internal("a kernel timeline is already open in this process (CUPTI has one)");
  }
  auto impl = std::make_unique<Impl>();
  // The toolkit's usual places, after the loader's own search (LD_LIBRARY_PATH first).
  for (const char* name : {"libcupti.so.13", "libcupti.so", "/usr/local/cuda/lib64/libcupti.so.13",
                           "/usr/local/cuda/lib/libcupti.so.13",
                           "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13"}) {
    impl->library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (impl->library) break;
  }
  if (!impl->library) {
    return NotFound(
        "the kernel timeline (UNIPREFILL_CUDA_STEP_TRACE_KERNELS) needs CUPTI (libcupti.so.13, "
        "part of the CUDA toolkit): put its folder (the toolkit's lib64 or extras/CUPTI/lib64) on "
        "LD_LIBRARY_PATH, or unset the variable");
  }
  void* l = impl->library;
  if (!Resolve(l, "cuptiActivityRegisterCallbacks", impl->register_callbacks) ||
      !Resolve(l, "cuptiActivityEnable", impl->enable) ||
      !Resolve(l, "cuptiActivityDisable", impl->disable) ||
      !Resolve(l, "cuptiActivityFlushAll", impl->flush_all) ||
      !Resolve(l, "cuptiActivityGetNextRecord", impl->next_record) ||
      !Resolve(l, "cuptiActivityPushExternalCorrelationId", impl->push_id) ||
      !Resolve(l, "cuptiActivityPopExternalCorrelationId", impl->pop_id) ||
      !Resolve(l, "cuptiGetResultString", impl->result_string)) {
    return NotFound(std::string("libcupti lacks an activity entry point: ") + dlerror());
  }
  CUptiResult r = CUPTI_SUCCESS;
  if (!callbacks_registered) {
    r = impl->register_callbacks(BufferRequested, BufferCompleted);
    if (r != CUPTI_SUCCESS) return Internal("CUPTI's activity callbacks: " + impl->Error(r));
    callbacks_registered = true;
  }
  for (CUpti_ActivityKind kind : kKinds) {
    r = impl->enable(kind);
    if (r != CUPTI_SUCCESS) {
      for (CUpti_ActivityKind k : kKinds) impl->disable(k);
      return Internal("enabling CUPTI activity kind " + std::to_string(static_cast<int>(kind)) +
                      ": " + impl->Error(r) + " (a profiler such as ncu attached holds CUPTI)");
    }
  }
  open_timeline = impl.get();
  return std::unique_ptr<KernelTimeline>(new KernelTimeline(std::move(impl)));
}

KernelTimeline::KernelTimeline(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

KernelTimeline::~KernelTimeline() {
  impl_->flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  for (CUpti_ActivityKind kind : kKinds) impl_->disable(kind);
  std::lock_guard<std::mutex> lock(open_mu);
  open_timeline = nullptr;
  // libcupti stays loaded: its threads may still run (CUPTI does not support unloading).
}

Status KernelTimeline::BeginGroup(uint64_t id) {
  const CUptiResult r = impl_->push_id(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, id);
  return r == CUPTI_SUCCESS ? OkStatus() : Internal("CUPTI push: " + impl_->Error(r));
}

Status KernelTimeline::EndGroup() {
  uint64_t id = 0;
  const CUptiResult r = impl_->pop_id(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &id);
  return r == CUPTI_SUCCESS ? OkStatus() : Internal("CUPTI pop: " + impl_->Error(r));
}

Result<std::vector<GpuActivity>> KernelTimeline::Take(uint64_t id) {
  const CUptiResult r = impl_->flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  if (r != CUPTI_SUCCESS) return Internal("CUPTI flush: " + impl_->Error(r));
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<GpuActivity> out;
  uint32_t last_correlation = 0;
  for (auto it = impl_->group_of.begin(); it != impl_->group_of.end();) {
    if (it->second > id) {
      ++it;
      continue;
    }
    // This group's, or an earlier group's never taken: this group's go out, the rest go.
    if (it->second == id) {
      last_correlation = std::max(last_correlation, it->first);
      auto a = impl_->activities.find(it->first);
      if (a != impl_->activities.end()) {
        for (GpuActivity& x : a->second) out.push_back(std::move(x));
      }
    }
    impl_->activities.erase(it->first);
    it = impl_->group_of.erase(it);
  }
  // Activities of no group launched before this group ended (set-up copies, other threads').
  std::erase_if(impl_->activities, [&](const auto& kv) {
    return kv.first < last_correlation && !impl_->group_of.contains(kv.first);
  });
  return out;
}

#else  // no CUPTI headers at build time

struct KernelTimeline::Impl {};

Result<std::unique_ptr<KernelTimeline>> KernelTimeline::Open() {
  return Unimplemented(
      "this build has no kernel timeline (UNIPREFILL_CUDA_STEP_TRACE_KERNELS): CUPTI's headers "
      "(cupti_activity.h) were not on the include path; rebuild with the CUDA toolkit's CUPTI "
      "headers there, or unset the variable");
}
KernelTimeline::KernelTimeline(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
KernelTimeline::~KernelTimeline() = default;
Status KernelTimeline::BeginGroup(uint64_t) { return OkStatus(); }
Status KernelTimeline::EndGroup() { return OkStatus(); }
Result<std::vector<GpuActivity>> KernelTimeline::Take(uint64_t) {
  return std::vector<GpuActivity>();
}

#endif

}  // namespace uniprefill::cuda_backend
