// RmsNorm and Add: row-wise, memory-bound; AVX2 with f32 accumulation, rows split over the pool
// once there is enough work to pay for a wake-up (~16K elements per chunk).
#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cmath>

#include "ops/cpu/cpu_ops.h"

namespace uniprefill::ops::cpu {
namespace {

int64_t RowGrain(int64_t row_elems) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, row_elems)); }

float SumSquares(const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
    a1 = _mm256_fmadd_ps(v1, v1, a1);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(a0, a1));
  float s = 0;
  for (float l : lanes) s += l;
  for (; i < n; ++i) s += x[i] * x[i];
  return s;
}

}  // namespace

void RmsNorm(DeviceContext& ctx, TensorView out, TensorView x, const float* weight, float eps) {
  const int64_t D = x.dim(-1);
  assert(out.dim(-1) == D && out.dim(0) == x.dim(0));
  ctx.pool().ParallelFor(x.dim(0), RowGrain(D), [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x.row<float>(r);
      float* o = out.row<float>(r);
      const float inv = 1.0f / std::sqrt(SumSquares(xr, D) / static_cast<float>(D) + eps);
      for (int64_t i = 0; i < D; ++i) o[i] = xr[i] * inv * weight[i];
    }
  });
}

void Add(DeviceContext& ctx, TensorView out, TensorView a, TensorView b) {
  const int64_t D = a.dim(-1);
  assert(b.dim(-1) == D && out.dim(-1) == D);
  ctx.pool().ParallelFor(a.dim(0), RowGrain(D), [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      const float* ar = a.row<float>(r);
      const float* br = b.row<float>(r);
      float* o = out.row<float>(r);
      for (int64_t i = 0; i < D; ++i) o[i] = ar[i] + br[i];
    }
  });
}

}  // namespace uniprefill::ops::cpu
