// Dispatch of linear_attention_ops.h (CPU only for now; the CUDA backend adds its branches here).
#include "ops/linear_attention_ops.h"

#include <cassert>

#include "ops/cpu/cpu_linear_attention.h"

namespace uniprefill::ops {

void CausalConv1dSilu(DeviceContext& ctx, TensorView out, TensorView x, TensorView weight,
                      float* state) {
  assert(ctx.device() == Device::kCpu);
  cpu::CausalConv1dSilu(ctx, out, x, weight, state);
}

void L2NormalizeHeads(DeviceContext& ctx, TensorView x, float eps, float scale) {
  assert(ctx.device() == Device::kCpu);
  cpu::L2NormalizeHeads(ctx, x, eps, scale);
}

void GatedDeltaRule(DeviceContext& ctx, TensorView out, TensorView q, TensorView k, TensorView v,
                    TensorView g, TensorView beta, float* state) {
  assert(ctx.device() == Device::kCpu);
  cpu::GatedDeltaRule(ctx, out, q, k, v, g, beta, state);
}

}  // namespace uniprefill::ops
