// Rows of stored weights dequantised to f32 with AVX-512 (F/BW/VL/DQ): the operand of the
// prefill sgemm when no f32 copy is kept (LinearWeight::f32_on_call, cpu_linear.cc). Equal bit
// for bit to io/dequant.h's scalar loops (as the baseline compiler builds them: the K-quants'
// q * scale - min is one fused multiply-subtract there too); the tests check every type.
// Call only at the avx512 level or above (core/cpu_isa.h).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace uniprefill::ops::cpu {

// Whether DequantRowF32Avx512 covers `type` (Q8_0, Q5_0, Q4_K, Q6_K, f16, bf16, f32).
bool HasDequantRowF32Avx512(DType type);
// dst f32 [n] = the n values of the row at `row` (n a multiple of the type's block).
void DequantRowF32Avx512(DType type, const uint8_t* row, int64_t n, float* dst);

}  // namespace uniprefill::ops::cpu
