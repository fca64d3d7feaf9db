// PinnedStaging: pinned host memory + device memory for one forward's small integer arrays
// (positions, slots, block tables): bump-allocated and uploaded with async copies; a region is
// never reused within a forward, so no copy in flight is overwritten. Two halves, one per forward
// in turn: a forward that ends without a host sync (CudaBackend::Finish when nothing goes back to
// the host) leaves its copies queued, so the next forward writes the other half, and Reserve
// waits for the forward two back (long done, in practice) before reusing a half.
//
// Growing a half frees and pins host memory and reallocates its device twin (cudaFreeHost and
// cudaFree synchronise; pinning MBs takes ms): served on the H200 (24th session's 130K trace),
// each forward whose staging bound (CudaBackend::Begin: its rows, its requests x the context's
// block table, a UniPrefill prompt's cached entries) was a new high grew its half, and the GPU sat
// idle 5-12 ms before it: each half in turn at every new request count (~0.1 s of the dense
// prompt's TTFT), and every forward of the UniPrefill prompt, whose bound grows with its depth
// (384 ms). So a half grows geometrically (at least doubling), and a server presizes both
// (Presize) before its first request.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "core/status.h"

namespace uniprefill::cuda_backend {

class PinnedStaging {
 public:
  PinnedStaging() = default;
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;
  ~PinnedStaging() {
    for (Half& h : halves_) {
      if (h.done) cudaEventDestroy(h.done);
      if (h.host) cudaFreeHost(h.host);
    }
  }
  // At a forward's start: the other half, at least `ints` long, once its last forward has run
  // (waited for by `wait` when given: the backend's bounded wait under tensor parallelism).
  Status Reserve(size_t ints, const std::function<Status(cudaEvent_t)>& wait = {}) {
    cur_ ^= 1;
    Half& h = halves_[cur_];
    if (h.in_flight) {
      if (wait) {
        UP_RETURN_IF_ERROR(wait(h.done));
      } else {
        UP_CUDA_CHECK(cudaEventSynchronize(h.done));
      }
    }
    h.in_flight = false;
    used_ = 0;
    if (ints <= h.cap) return OkStatus();
    return Resize(h, std::max(ints, 2 * h.cap));
  }
  // Both halves at least `ints` long (exactly that where they grow), once the forwards that used
  // them have run: before a server's first request, so that its first forwards grow nothing.
  Status Presize(size_t ints) {
    for (Half& h : halves_) {
      if (h.in_flight) UP_CUDA_CHECK(cudaEventSynchronize(h.done));
      h.in_flight = false;
      if (ints > h.cap) UP_RETURN_IF_ERROR(Resize(h, ints));
    }
    used_ = 0;
    return OkStatus();
  }
  // The current half's capacity in ints.
  size_t capacity() const { return halves_[cur_].cap; }
  // A forward returns without a host sync: its copies from this half may still be queued on
  // `stream`; the next Reserve of this half waits for them.
  Status MarkInFlight(cudaStream_t stream) {
    Half& h = halves_[cur_];
    if (h.done == nullptr) UP_CUDA_CHECK(cudaEventCreateWithFlags(&h.done, cudaEventDisableTiming));
    UP_CUDA_CHECK(cudaEventRecord(h.done, stream));
    h.in_flight = true;
    return OkStatus();
  }
  // Device copy of v (enqueued on stream).
  Result<const int32_t*> Put(const std::vector<int32_t>& v, cudaStream_t stream) {
    UP_ASSIGN_OR_RETURN(size_t at, Take(v.size()));
    Half& h = halves_[cur_];
    if (!v.empty()) {
      std::memcpy(h.host + at, v.data(), v.size() * 4);
      UP_CUDA_CHECK(cudaMemcpyAsync(h.dev.as<int32_t>() + at, h.host + at, v.size() * 4,
                                    cudaMemcpyHostToDevice, stream));
    }
    return h.dev.as<int32_t>() + at;
  }
  // Device copies of several arrays in one upload (each 16-byte aligned in one region), in the
  // order given. A forward's metadata came as several small in-stream copies a layer (the
  // attention's four problem arrays, a decode run's tables and lengths); each copy sits between
  // two kernels on the stream. With separate_uploads (UNIPREFILL_CUDA_SEPARATE_UPLOADS=1, the
  // behaviour before) each array is its own copy, for same-binary comparisons.
  Result<std::vector<const int32_t*>> PutAll(
      std::initializer_list<const std::vector<int32_t>*> arrays, cudaStream_t stream) {
    std::vector<const int32_t*> out;
    out.reserve(arrays.size());
    if (separate_uploads_) {
      for (const std::vector<int32_t>* a : arrays) {
        UP_ASSIGN_OR_RETURN(const int32_t* d, Put(*a, stream));
        out.push_back(d);
      }
      return out;
    }
    size_t total = 0;
    for (const std::vector<int32_t>* a : arrays) total += Padded(a->size());
    UP_ASSIGN_OR_RETURN(const size_t at, Take(total));
    Half& h = halves_[cur_];
    size_t offset = at;
    for (const std::vector<int32_t>* a : arrays) {
      if (!a->empty()) std::memcpy(h.host + offset, a->data(), a->size() * 4);
      out.push_back(h.dev.as<int32_t>() + offset);
      offset += Padded(a->size());
    }
    if (total > 0) {
      UP_CUDA_CHECK(cudaMemcpyAsync(h.dev.as<int32_t>() + at, h.host + at, total * 4,
                                    cudaMemcpyHostToDevice, stream));
    }
    return out;
  }
  void set_separate_uploads(bool on) { separate_uploads_ = on; }
  // Uninitialised device ints, and their pinned host twin (for copies back).
  Result<std::pair<int32_t*, int32_t*>> Scratch(size_t n) {
    UP_ASSIGN_OR_RETURN(size_t at, Take(n));
    Half& h = halves_[cur_];
    return std::make_pair(h.dev.as<int32_t>() + at, h.host + at);
  }

 private:
  struct Half {
    int32_t* host = nullptr;  // pinned int32 [cap]
    DeviceBuffer dev;         // int32 [cap]
    size_t cap = 0;
    cudaEvent_t done = nullptr;  // recorded after the last forward that used this half
    bool in_flight = false;      // that forward returned without a host sync
  };
  static size_t Padded(size_t n) { return (n + 3) / 4 * 4; }  // 16-byte aligned regions
  // h holds `ints` ints (its contents dropped; nothing of it in flight).
  static Status Resize(Half& h, size_t ints) {
    if (h.host) cudaFreeHost(h.host);
    h.host = nullptr;
    h.cap = 0;
    h.dev = DeviceBuffer();
    UP_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&h.host), ints * 4));
    UP_ASSIGN_OR_RETURN(h.dev, DeviceBuffer::Allocate(ints * 4));
    h.cap = ints;
    return OkStatus();
  }
  Result<size_t> Take(size_t n) {
    const size_t at = used_;
    used_ += Padded(n);
    if (used_ > halves_[cur_].cap) return Internal("forward staging overflow (a sizing bug)");
    return at;
  }
  Half halves_[2];
  int cur_ = 0;
  size_t used_ = 0;
  bool separate_uploads_ = false;
};

// A grow-only pinned host array of floats: device-to-host copies into it run at full PCIe rate and
// asynchronously (a pageable destination is staged by the driver and blocks the host).
class PinnedFloats {
 public:
  PinnedFloats() = default;
  PinnedFloats(const PinnedFloats&) = delete;
  PinnedFloats& operator=(const PinnedFloats&) = delete;
  ~PinnedFloats() {
    if (host_) cudaFreeHost(host_);
  }
  // At least n floats; earlier contents are lost when it grows.
  Result<float*> Get(size_t n) {
    if (n <= cap_) return host_;
    if (host_) cudaFreeHost(host_);
    host_ = nullptr;
    cap_ = 0;
    UP_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_), n * sizeof(float)));
    cap_ = n;
    return host_;
  }

 private:
  float* host_ = nullptr;
  size_t cap_ = 0;
};

}  // namespace uniprefill::cuda_backend
