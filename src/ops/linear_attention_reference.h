// Scalar references for linear_attention_ops.h: plain loops in double, no threads, no SIMD; they
// define what the fast kernels compute and are used by the tests only. Same argument conventions,
// minus the DeviceContext.
#pragma once

#include "core/tensor.h"

namespace uniprefill::ops::reference {

void CausalConv1dSilu(TensorView out, TensorView x, TensorView weight, float* state);
void L2NormalizeHeads(TensorView x, float eps, float scale = 1.0f);
// The recurrence literally as written in linear_attention_ops.h, with S held in double between
// tokens (stored back to f32 `state` at the end).
void GatedDeltaRule(TensorView out, TensorView q, TensorView k, TensorView v, TensorView g,
                    TensorView beta, float* state);

}  // namespace uniprefill::ops::reference
