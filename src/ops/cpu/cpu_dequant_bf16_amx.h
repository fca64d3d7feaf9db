// Stored weight rows straight to bf16 with AVX-512 (the amx-bf16 level): the batched decode
// steps of --prefill-gemm bf16 (cpu_linear_bf16.h) dequantise every weight of the model once per
// step, so this conversion, not the tile products, is their arithmetic; io/dequant.h's scalar
// loops plus an f32 -> bf16 pass cost ~4x more on the 2-core Xeon of 2026-12-03.
// Values: bf16 (round to nearest even) of the f32 that io/dequant.h's Dequantize gives, computed
// with the same f32 operations (a fused multiply-subtract where the baseline compiler contracts
// one: the two can differ in the f32's last bit, so at most one bf16 step apart).
// Include only from baseline files that call it after ResolveCpuIsa granted kAmxBf16.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace uniprefill::ops::cpu::amx {

// Whether DequantRowBf16 has a vector decoder for `type` (Q8_0, Q5_0, Q4_K, Q6_K, F16, BF16,
// F32; others go through io/dequant.h and ConvertRowsBf16).
bool HasDequantRowBf16(DType type);

// dst bf16 [n] = the first n values of the stored row `row` of `type`; n a multiple of the
// type's block (256 for the K quants, 32 otherwise). Requires HasDequantRowBf16(type).
void DequantRowBf16(DType type, const uint8_t* row, int64_t n, uint16_t* dst);

}  // namespace uniprefill::ops::cpu::amx
