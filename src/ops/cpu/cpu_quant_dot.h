// Fused dequantise-and-dot kernels (AVX2 baseline, AVX-512 variants): one quantised weight row
// against up to kQuantDotMaxRows f32 activation rows, so a decode matvec reads every weight byte
// exactly once and never materialises the f32 row. Activations stay f32 (no int8 quantisation of x), so results match
// an f32 reference up to summation order.
// Non-goals: many-row GEMMs (those go to BLAS on a dequantised f32 copy, see cpu_linear.cc).
#pragma once

#include <cstdint>
#include <string_view>

#include "core/cpu_isa.h"
#include "core/dtype.h"

namespace uniprefill::ops::cpu {

inline constexpr int kQuantDotMaxRows = 7;

// out[r * out_stride] = sum_i dequant(w)[i] * x[r * x_stride + i] for r < nx (1..kQuantDotMaxRows);
// w is one row of n elements (n a multiple of the type's block size).
using QuantDotFn = void (*)(const void* w, const float* x, int64_t x_stride, int nx, int64_t n,
                            float* out, int64_t out_stride);

// The fused kernel for `type` at `isa` (a resolved level: DeviceContext::cpu_isa()): the highest
// level's variant up to `isa`, or nullptr when there is none (callers dequantise the row into a
// scratch buffer and use the F32 kernel). Defined in cpu_quant_dot_dispatch.cc.
QuantDotFn FusedQuantDot(DType type, CpuIsa isa);
// The level whose variant FusedQuantDot(type, isa) returns ("avx2", "avx512"), or "" for none.
std::string_view FusedQuantDotLevel(DType type, CpuIsa isa);

}  // namespace uniprefill::ops::cpu
