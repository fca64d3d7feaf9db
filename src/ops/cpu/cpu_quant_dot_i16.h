// Decode matvec kernels with int16-quantised activations (AVX2 vpmaddwd; AVX-512 variants).
//
// Why: on this Zen 1 class of CPU the f32 fused kernels (cpu_quant_dot.h) are bound by the
// int -> float conversion of every weight, not by memory. Quantising the single activation row
// once per call to int16 (x ~= scale * xq, |xq| <= 32767, one scale per row) lets the weights stay
// integers: vpmaddwd does 16 multiply-adds per instruction and only one conversion per 32-weight
// block remains. Measured 2-3x faster per weight than the f32 kernels (docs/kernels.md).
// Accuracy: the only error is the activation rounding, at most scale / 2 = max|x| / 65534 per
// element, ~1e-5 relative to max|x| (vs int8 activations in llama.cpp, ~4e-3), far below the
// quantisation error of the weights themselves; tests bound it against the f32 reference.
// Non-goals: several activation rows (prefill uses BLAS); K-quant types on AVX2 (future work).
#pragma once

#include <cstdint>
#include <string_view>

#include "core/cpu_isa.h"
#include "core/dtype.h"

namespace uniprefill::ops::cpu {

// xq[i] = round(x[i] / scale) with scale = max|x| / 32767 (0 when x is all zeros).
void QuantizeRowI16(const float* x, int64_t n, int16_t* xq, float* scale);

// Returns sum_i dequant(w)[i] * xq[i] for one weight row of n elements (a multiple of 32); the
// caller multiplies by the activation scale.
using QuantDotI16Fn = float (*)(const void* w, const int16_t* xq, int64_t n);

// The kernel for `type` at `isa` (a resolved level), or nullptr: AVX2 has Q8_0, Q5_0 and Q4_1;
// AVX-512 (and VNNI, with vpdpwssd) adds Q4_K and Q6_K. Defined in cpu_quant_dot_dispatch.cc.
QuantDotI16Fn FusedQuantDotI16(DType type, CpuIsa isa);
// The level whose variant FusedQuantDotI16(type, isa) returns, or "" for none.
std::string_view FusedQuantDotI16Level(DType type, CpuIsa isa);

}  // namespace uniprefill::ops::cpu
