// Linear on the stored quantised weights for several rows of x at once with int8 activations
// (the VNNI kernels of cpu_quant_dot_i8.h): the same work as LinearInt16Rows
// (cpu_linear_int16_rows.h), chosen by LinearWeight::int8_rows_activations (--prefill-gemm int8).
// Each activation row is quantised once per call to int8, one scale per kI8ScaleGroup values;
// parts without an int8 kernel (Q4_1, ...) run the f32-activation fused kernels on the same rows.
// Threads and tiles as cpu_rows_tiling.h.
// Non-goals: levels without VNNI, rows not a multiple of 64 long, weights without any int8 part
// (CanRunLinearInt8Rows says false; Linear then takes the int16 rows or its other paths).
#pragma once

#include "core/device_context.h"
#include "core/tensor.h"
#include "ops/ops.h"

namespace uniprefill::ops::cpu {

// At `isa`, some part of w has a multi-row int8 kernel, every other part an f32-activation fused
// kernel, and in_features is a multiple of 64.
bool CanRunLinearInt8Rows(const LinearWeight& w, CpuIsa isa);

// out f32 [T, out] = x f32 [T, in] @ W^T; requires CanRunLinearInt8Rows(w, ctx.cpu_isa()).
void LinearInt8Rows(DeviceContext& ctx, TensorView out, TensorView x, const LinearWeight& w);

}  // namespace uniprefill::ops::cpu
