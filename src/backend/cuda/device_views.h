// Strided device views the CUDA model layers use to address column ranges of fused GEMM outputs.
#pragma once

#include <cstdint>

#include "core/cuda/device_buffer.h"
#include "core/tensor.h"

namespace uniprefill::cuda_backend {

// A [rows, cols] view of device memory whose rows are row_stride elements apart.
inline TensorView Rows(void* data, DType dtype, int64_t rows, int64_t cols, int64_t row_stride) {
  TensorView v = TensorView::Contiguous(data, dtype, {rows, cols}, Device::kCuda);
  v.stride[0] = row_stride;
  return v;
}

// A bf16 [rows, heads, dim] view, heads contiguous inside a row of row_stride elements.
inline TensorView Heads(void* data, int64_t rows, int64_t heads, int64_t dim,
                        int64_t row_stride) {
  TensorView v = TensorView::Contiguous(data, DType::kBF16, {rows, heads, dim}, Device::kCuda);
  v.stride[0] = row_stride;
  return v;
}

// The bf16 element `offset` of a device buffer.
inline uint16_t* Bf16(const DeviceBuffer& b, int64_t offset = 0) {
  return b.as<uint16_t>() + offset;
}

}  // namespace uniprefill::cuda_backend
