// Sizing checks made before anything is allocated: a `--kv-cache-memory` the host or the GPU cannot
// give is one error naming the flag and both sizes, instead of std::bad_alloc or a failed
// cudaMalloc after the weights are loaded (issue 20).
//
// Not for: tracking memory in use; the KV pools size themselves from the flag (kv/, backend/cuda/).
// The header is CUDA-free; builds without the CUDA backend get an Unimplemented CudaMemoryInfo.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace uniprefill {

struct DeviceMemoryInfo {
  int64_t free_bytes = 0;
  int64_t total_bytes = 0;
};

// Free and total memory of CUDA device `device_index` (cudaMemGetInfo; creates the device's primary
// context). Errors: built without CUDA (Unimplemented), no usable GPU or a bad index (Unavailable).
Result<DeviceMemoryInfo> CudaMemoryInfo(int device_index);

// The PCI bus id of CUDA device `device_index` ("0000:65:00.0"; what NVML finds a GPU by, so
// CUDA_VISIBLE_DEVICES's renumbering cannot point a reader at another GPU). Errors as
// CudaMemoryInfo's.
Result<std::string> CudaPciBusId(int device_index);

// Bytes of memory this machine can still give (MemAvailable of /proc/meminfo; its physical memory
// when that is unknown).
int64_t HostAvailableBytes();

// "12.50 GiB" (or TiB): sizes in error messages.
std::string FormatGib(int64_t bytes);

// OK when `requested` bytes of KV cache fit in the `available` bytes of `where` ("this machine",
// "GPU 0"), or when `available` is unknown (<= 0); otherwise ResourceExhausted naming
// --kv-cache-memory, both sizes and a size that would fit.
Status CheckKvCacheFits(int64_t requested, int64_t available, const std::string& where);

}  // namespace uniprefill
