// Dequantisation of GGML block formats to f32 (the scalar reference path; the fast fused
// matmul kernels in ops/cpu are tested against it).
//
// Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace uniprefill {

float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);  // round to nearest even
float Bf16ToFloat(uint16_t h);

bool CanDequantize(DType type);
// Dequantises n elements (a multiple of the type's block size) from src into dst.
// Unimplemented for unsupported types, InvalidArgument for a bad n.
Status Dequantize(DType type, const void* src, float* dst, int64_t n);

}  // namespace uniprefill
