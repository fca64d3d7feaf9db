// Rope: per token, cos/sin of (float)pos * inv_freq in f32 (as HF computes them) once, applied to
// every head; tokens split over the pool.
#include <cassert>
#include <cmath>
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace uniprefill::ops::cpu {

void Rope(DeviceContext& ctx, TensorView x, const int32_t* pos, const float* inv_freq, int rot_dims,
          RopeStyle style) {
  const int64_t T = x.dim(0), H = x.dim(1);
  const int half = rot_dims / 2;
  assert(rot_dims % 2 == 0 && rot_dims <= x.dim(2));
  ctx.pool().ParallelFor(T, 4, [&](int64_t begin, int64_t end, int) {
    std::vector<float> cs(half), sn(half);
    for (int64_t t = begin; t < end; ++t) {
      for (int i = 0; i < half; ++i) {
        const float angle = static_cast<float>(pos[t]) * inv_freq[i];
        cs[i] = std::cos(angle);
        sn[i] = std::sin(angle);
      }
      for (int64_t h = 0; h < H; ++h) {
        float* v = x.as<float>() + t * x.stride[0] + h * x.stride[1];
        if (style == RopeStyle::kNeox) {
          float* v1 = v + half;
          for (int i = 0; i < half; ++i) {
            const float x0 = v[i], x1 = v1[i];
            v[i] = x0 * cs[i] - x1 * sn[i];
            v1[i] = x1 * cs[i] + x0 * sn[i];
          }
        } else {
          for (int i = 0; i < half; ++i) {
            const float x0 = v[2 * i], x1 = v[2 * i + 1];
            v[2 * i] = x0 * cs[i] - x1 * sn[i];
            v[2 * i + 1] = x1 * cs[i] + x0 * sn[i];
          }
        }
      }
    }
  });
}

}  // namespace uniprefill::ops::cpu
