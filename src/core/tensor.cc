#include "core/tensor.h"

#include <cassert>

namespace uniprefill {

TensorView TensorView::Contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                  Device device) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.ndim = static_cast<int>(shape.size());
  assert(v.ndim <= kMaxDims);
  int i = 0;
  for (int64_t s : shape) v.shape[i++] = s;
  int64_t st = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    v.stride[d] = st;
    st *= v.shape[d];
  }
  return v;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t st = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && stride[d] != st) return false;
    st *= shape[d];
  }
  return true;
}

std::string TensorView::ShapeString() const {
  std::string s = DTypeName(dtype);
  s += " [";
  for (int d = 0; d < ndim; ++d) {
    if (d) s += ", ";
    s += std::to_string(shape[d]);
  }
  return s + "]";
}

TensorView TensorView::Slice0(int64_t begin, int64_t count) const {
  TensorView v = *this;
  const auto info = GetDTypeInfo(static_cast<uint32_t>(dtype));
  const int64_t elem_offset = begin * stride[0];
  const int64_t byte_offset = elem_offset / info->block_elems * info->block_bytes;
  v.data = static_cast<char*>(data) + byte_offset;
  v.shape[0] = count;
  return v;
}

}  // namespace uniprefill
