// PinnedStaging: pinned host memory + device memory for one forward's small integer arrays
// (positions, slots, block tables): bump-allocated and uploaded with async copies; a region is
// never reused within a forward, so no copy in flight is overwritten. Reserve (at a forward's
// start, with nothing in flight) resets it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "core/status.h"

namespace uniprefill::cuda_backend {

class PinnedStaging {
 public:
  ~PinnedStaging() {
    if (host_) cudaFreeHost(host_);
  }
  Status Reserve(size_t ints) {
    used_ = 0;
    if (ints <= cap_) return OkStatus();
    if (host_) cudaFreeHost(host_);
    host_ = nullptr;
    cap_ = 0;
    UP_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_), ints * 4));
    UP_ASSIGN_OR_RETURN(dev_, DeviceBuffer::Allocate(ints * 4));
    cap_ = ints;
    return OkStatus();
  }
  // Device copy of v (enqueued on stream).
  Result<const int32_t*> Put(const std::vector<int32_t>& v, cudaStream_t stream) {
    UP_ASSIGN_OR_RETURN(size_t at, Take(v.size()));
    if (!v.empty()) {
      std::memcpy(host_ + at, v.data(), v.size() * 4);
      UP_CUDA_CHECK(cudaMemcpyAsync(dev_.as<int32_t>() + at, host_ + at, v.size() * 4,
                                    cudaMemcpyHostToDevice, stream));
    }
    return dev_.as<int32_t>() + at;
  }
  // Uninitialised device ints, and their pinned host twin (for copies back).
  Result<std::pair<int32_t*, int32_t*>> Scratch(size_t n) {
    UP_ASSIGN_OR_RETURN(size_t at, Take(n));
    return std::make_pair(dev_.as<int32_t>() + at, host_ + at);
  }

 private:
  Result<size_t> Take(size_t n) {
    const size_t at = used_;
    used_ += (n + 3) / 4 * 4;  // 16-byte aligned regions
    if (used_ > cap_) return Internal("forward staging overflow (a sizing bug)");
    return at;
  }
  int32_t* host_ = nullptr;
  DeviceBuffer dev_;
  size_t cap_ = 0, used_ = 0;
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
