// TensorView: a non-owning view of a tensor (data pointer, dtype, shape, strides, device).
//
// Conventions: shapes are written outermost first, the last dimension is contiguous for every view
// the ops accept unless an op says otherwise (e.g. f32 [n_tokens, hidden]: row t starts at
// data + t * stride[0]). Strides count elements, not bytes, for scalar types; quantised tensors are
// only ever 2-D row-major weights whose rows are whole blocks (stride in elements of the row).
// Ownership lives elsewhere (Buffer, the mmap'd model file); a view never frees.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.h"

namespace uniprefill {

enum class Device : uint8_t { kCpu = 0, kCuda = 1 };

struct TensorView {
  static constexpr int kMaxDims = 4;

  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device = Device::kCpu;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> stride{};  // in elements

  // A contiguous row-major view.
  static TensorView Contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Device device = Device::kCpu);

  int64_t dim(int i) const { return shape[i < 0 ? ndim + i : i]; }
  int64_t numel() const;
  bool is_contiguous() const;
  std::string ShapeString() const;  // e.g. "f32 [128, 640]"

  template <typename T>
  T* as() const { return static_cast<T*>(data); }
  // Pointer to row r of a 2-D view of a scalar dtype T.
  template <typename T>
  T* row(int64_t r) const { return static_cast<T*>(data) + r * stride[0]; }

  // Rows [begin, begin + count) of the outermost dimension.
  TensorView Slice0(int64_t begin, int64_t count) const;
};

}  // namespace uniprefill
