#include "core/buffer.h"

#include <cassert>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include <sys/mman.h>

namespace uniprefill {
namespace {

// Buffers this large come straight from the kernel: zero pages that take memory only when first
// written, so a KV pool sized for --kv-cache-memory costs nothing until requests fill it.
constexpr size_t kMapThreshold = size_t{64} << 20;

bool IsMapped(size_t bytes) { return bytes >= kMapThreshold; }

void Release(void* data, size_t bytes) {
  if (data == nullptr) return;
  if (IsMapped(bytes)) {
    munmap(data, bytes);
  } else {
    std::free(data);
  }
}

}  // namespace

Buffer::Buffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  if (IsMapped(bytes)) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = p;  // page-aligned, hence kAlignment-aligned
    return;
  }
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  data_ = std::aligned_alloc(kAlignment, rounded);
  if (!data_) throw std::bad_alloc();
  std::memset(data_, 0, rounded);
}

Buffer::~Buffer() { Release(data_, bytes_); }

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Release(data_, bytes_);
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
