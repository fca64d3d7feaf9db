// Buffer: an owning, 64-byte aligned host allocation; the only way engine code owns raw memory.
//
// Move-only; copies are explicit (Copy()) because buffers hold activations and weights that are
// expensive to duplicate by accident.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"

namespace uniprefill {

class Buffer {
 public:
  static constexpr size_t kAlignment = 64;

  Buffer() = default;
  explicit Buffer(size_t bytes);  // zero-initialised
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  Buffer Copy() const;
  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }
  // A contiguous view of this buffer's start (must fit).
  TensorView View(DType dtype, std::initializer_list<int64_t> shape) const;

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace uniprefill
