// Gated feed-forward (SwiGLU / GeGLU) over packed rows, in row chunks so the [rows, 2F]
// intermediate stays bounded at long prompts (a 32K-token prefill would otherwise hold 32K x 2F).
#pragma once

#include "core/device_context.h"
#include "ops/ops.h"

namespace uniprefill {

struct GatedFfnWeights {
  ops::LinearWeight gate_up;  // [2F, H]: gate rows, then up rows
  ops::LinearWeight down;     // [H, F]
  ops::Activation activation = ops::Activation::kSilu;
};

// out f32 [T, H] = down(act(gate(x)) * up(x)); x f32 [T, H] (already normalised). out may not
// alias x.
void GatedFfnForward(DeviceContext& ctx, const GatedFfnWeights& w, TensorView x, TensorView out);

}  // namespace uniprefill
