#include "model/blocks/feed_forward.h"

#include <algorithm>

#include "core/buffer.h"

namespace uniprefill {

namespace {
constexpr int64_t kRowChunk = 2048;  // rows per pass: bounds the [rows, 2F] intermediate
}

void GatedFfnForward(DeviceContext& ctx, const GatedFfnWeights& w, TensorView x, TensorView out) {
  const int64_t T = x.dim(0), F = w.down.in_features;
  const int64_t chunk = std::min(T, kRowChunk);
  Buffer gu_buf(sizeof(float) * chunk * 2 * F);
  for (int64_t b = 0; b < T; b += chunk) {
    const int64_t n = std::min(chunk, T - b);
    TensorView gu = gu_buf.View(DType::kF32, {n, 2 * F});  // f32 [n, 2F]: gate | up
    ops::Linear(ctx, gu, x.Slice0(b, n), w.gate_up);
    TensorView gate = gu, up = gu, act = gu;
    gate.shape[1] = F;
    up.shape[1] = F;
    up.data = gu.as<float>() + F;
    act.shape[1] = F;  // written over the gate half, row stride 2F
    ops::GatedActivation(ctx, act, gate, up, w.activation);
    ops::Linear(ctx, out.Slice0(b, n), act, w.down);
  }
}

}  // namespace uniprefill
