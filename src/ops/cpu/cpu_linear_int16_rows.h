// Linear on the stored quantised weights for several rows of x at once (a decode step of several
// requests, short prefill chunks, and any chunk when no f32 weight copy exists). Each activation
// row is quantised once to int16 with one scale per kI16ScaleGroup values (cpu_quant_dot_i16.h)
// for the parts with a multi-row int16 kernel; the other parts (Q4_1, and every type on AVX2) run
// the f32-activation fused kernels (cpu_quant_dot.h) on the same rows. Threads split the output
// columns; within a thread, a tile of weight rows is multiplied into every group of activation
// rows while it is in cache, so the weights stream from memory once per chunk of rows (the body,
// shared with the int8 rows: cpu_linear_quant_rows.h).
// Non-goals: weights without an int16 multi-row kernel in any part (CanRunLinearInt16Rows says
// false and Linear keeps its other paths: sgemm on the f32 copy, or the 7-row fused matvec).
#pragma once

#include "core/device_context.h"
#include "core/tensor.h"
#include "ops/ops.h"

namespace uniprefill::ops::cpu {

// At `isa`, some part of w has a multi-row int16 kernel and every other part an f32-activation
// fused kernel.
bool CanRunLinearInt16Rows(const LinearWeight& w, CpuIsa isa);

// out f32 [T, out] = x f32 [T, in] @ W^T; requires CanRunLinearInt16Rows(w, ctx.cpu_isa()).
void LinearInt16Rows(DeviceContext& ctx, TensorView out, TensorView x, const LinearWeight& w);

}  // namespace uniprefill::ops::cpu
