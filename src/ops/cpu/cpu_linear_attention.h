// The CPU backend of linear_attention_ops.h (same contracts), called by the dispatch in
// ops/linear_attention_ops.cc.
#pragma once

#include "core/device_context.h"
#include "core/tensor.h"

namespace uniprefill::ops::cpu {

void CausalConv1dSilu(DeviceContext& ctx, TensorView out, TensorView x, TensorView weight,
                      float* state);
void L2NormalizeHeads(DeviceContext& ctx, TensorView x, float eps, float scale);
void GatedDeltaRule(DeviceContext& ctx, TensorView out, TensorView q, TensorView k, TensorView v,
                    TensorView g, TensorView beta, float* state);

}  // namespace uniprefill::ops::cpu
