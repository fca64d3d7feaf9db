// CudaMemoryInfo for builds with the CUDA backend (core/memory_check.h; the stub for builds
// without it is in core/memory_check.cc).
#include <cuda_runtime_api.h>

#include <string>

#include "core/memory_check.h"

namespace uniprefill {

namespace {

// Unavailable naming the index when there is no such device.
Status CheckDeviceIndex(int device_index) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || device_index < 0 || device_index >= count) {
    (void)cudaGetLastError();
    return Unavailable("no CUDA device " + std::to_string(device_index) + " (" +
                       std::to_string(count) + " found" +
                       (err != cudaSuccess ? std::string(": ") + cudaGetErrorString(err) : "") +
                       ")");
  }
  return OkStatus();
}

}  // namespace

Result<DeviceMemoryInfo> CudaMemoryInfo(int device_index) {
  UP_RETURN_IF_ERROR(CheckDeviceIndex(device_index));
  size_t free_bytes = 0, total_bytes = 0;
  cudaError_t err = cudaSetDevice(device_index);
  if (err == cudaSuccess) err = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return Unavailable(std::string("cannot read the memory of GPU ") +
                       std::to_string(device_index) + ": " + cudaGetErrorString(err));
  }
  return DeviceMemoryInfo{static_cast<int64_t>(free_bytes), static_cast<int64_t>(total_bytes)};
}

Result<std::string> CudaPciBusId(int device_index) {
  UP_RETURN_IF_ERROR(CheckDeviceIndex(device_index));
  char bus[64] = {};
  if (const cudaError_t err = cudaDeviceGetPCIBusId(bus, sizeof(bus), device_index);
      err != cudaSuccess) {
    (void)cudaGetLastError();
    return Unavailable(std::string("cannot read the PCI bus id of GPU ") +
                       std::to_string(device_index) + ": " + cudaGetErrorString(err));
  }
  return std::string(bus);
}

}  // namespace uniprefill
