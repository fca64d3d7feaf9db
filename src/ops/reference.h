// Scalar reference implementations of every op in ops.h: plain loops, double accumulation where it
// matters, no threads, no SIMD. They define what the fast kernels must compute and are used by the
// tests only (never on a hot path). Same argument conventions as ops.h, minus the DeviceContext.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/ops.h"

namespace uniprefill::ops::reference {

void Linear(TensorView out, TensorView x, const LinearWeight& w);
void RmsNorm(TensorView out, TensorView x, const float* weight, float eps);
void Rope(TensorView x, const int32_t* pos, const float* inv_freq, int rot_dims, RopeStyle style);
void GatedActivation(TensorView out, TensorView gate, TensorView up, Activation act);
void Embedding(TensorView out, TensorView table, const int32_t* ids, float scale);
void Add(TensorView out, TensorView a, TensorView b);
void Attention(TensorView out, TensorView q, TensorView k, TensorView v, const int32_t* q_pos,
               const int32_t* k_pos, const AttentionParams& params);

// gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in double.
double GeluTanh(double x);
double Silu(double x);

}  // namespace uniprefill::ops::reference
