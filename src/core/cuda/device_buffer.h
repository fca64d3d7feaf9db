// DeviceBuffer: an owning cudaMalloc allocation on the current device (move-only), the device twin
// of core/buffer.h. Allocation failure (out of device memory) is a Status, since a user can fix it
// with a smaller model, context or batch; contents start uninitialised.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace uniprefill {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Aborts with a clear message when the device is out of memory; use Allocate() where a user
  // choice (model, context, batch) sets the size.
  explicit DeviceBuffer(size_t bytes);
  static Result<DeviceBuffer> Allocate(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }
  // A contiguous device view of this buffer's start (must fit).
  TensorView View(DType dtype, std::initializer_list<int64_t> shape) const;

  // Synchronous copies (tests, loading, small control data).
  void CopyFromHost(const void* src, size_t bytes, size_t offset = 0);
  void CopyToHost(void* dst, size_t bytes, size_t offset = 0) const;
  template <typename T>
  static DeviceBuffer FromHost(const std::vector<T>& v) {
    DeviceBuffer b(v.size() * sizeof(T) + (v.empty() ? 1 : 0));
    if (!v.empty()) b.CopyFromHost(v.data(), v.size() * sizeof(T));
    return b;
  }
  template <typename T>
  std::vector<T> ToHost(size_t count) const {
    std::vector<T> v(count);
    if (count) CopyToHost(v.data(), count * sizeof(T));
    return v;
  }
  // Fills every byte with `byte` (tests poison outputs with 0xFF: bf16 0xFFFF and f32 0xFFFFFFFF
  // are NaN, so an unwritten element fails any comparison).
  void Fill(uint8_t byte);

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace uniprefill
