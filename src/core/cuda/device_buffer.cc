#include "core/cuda/device_buffer.h"

#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "core/cuda/cuda_check.h"

namespace uniprefill {

Result<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes) {
  DeviceBuffer b;
  if (bytes == 0) return b;
  cudaError_t err = cudaMalloc(&b.data_, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error state of a failed allocation
    size_t free_bytes = 0, total_bytes = 0;
    (void)cudaMemGetInfo(&free_bytes, &total_bytes);
    return ResourceExhausted("cannot allocate " + std::to_string(bytes >> 20) +
                             " MiB on the GPU (" + std::to_string(free_bytes >> 20) + " of " +
                             std::to_string(total_bytes >> 20) + " MiB free): " +
                             cudaGetErrorString(err) +
                             "; use a smaller model, context or batch");
  }
  b.bytes_ = bytes;
  return b;
}

DeviceBuffer::DeviceBuffer(size_t bytes) {
  Result<DeviceBuffer> r = Allocate(bytes);
  if (!r.ok()) {
    std::fprintf(stderr, "DeviceBuffer: %s\n", r.status().message().c_str());
    std::abort();
  }
  *this = std::move(r).value();
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

TensorView DeviceBuffer::View(DType dtype, std::initializer_list<int64_t> shape) const {
  TensorView v = TensorView::Contiguous(data_, dtype, shape, Device::kCuda);
  assert(static_cast<size_t>(DTypeBytes(dtype, v.numel())) <= bytes_);
  return v;
}

void DeviceBuffer::CopyFromHost(const void* src, size_t bytes, size_t offset) {
  assert(offset + bytes <= bytes_);
  UP_CUDA_CHECK(cudaMemcpy(static_cast<char*>(data_) + offset, src, bytes, cudaMemcpyHostToDevice));
}

void DeviceBuffer::CopyToHost(void* dst, size_t bytes, size_t offset) const {
  assert(offset + bytes <= bytes_);
  UP_CUDA_CHECK(cudaMemcpy(dst, static_cast<const char*>(data_) + offset, bytes,
                           cudaMemcpyDeviceToHost));
}

void DeviceBuffer::Fill(uint8_t byte) {
  if (bytes_) UP_CUDA_CHECK(cudaMemset(data_, byte, bytes_));
}

}  // namespace uniprefill
