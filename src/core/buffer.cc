#include "core/buffer.h"

#include <cassert>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace uniprefill {

Buffer::Buffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  data_ = std::aligned_alloc(kAlignment, rounded);
  if (!data_) throw std::bad_alloc();
  std::memset(data_, 0, rounded);
}

Buffer::~Buffer() { std::free(data_); }

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

Buffer Buffer::Copy() const {
  Buffer b(bytes_);
  if (bytes_) std::memcpy(b.data_, data_, bytes_);
  return b;
}

TensorView Buffer::View(DType dtype, std::initializer_list<int64_t> shape) const {
  TensorView v = TensorView::Contiguous(data_, dtype, shape);
  assert(DTypeBytes(dtype, v.numel()) <= static_cast<int64_t>(bytes_));
  return v;
}

}  // namespace uniprefill
