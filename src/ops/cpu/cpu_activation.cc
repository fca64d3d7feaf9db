// Gated activations. Both are written as x * sigmoid(z), which is exact algebra:
//   gelu_tanh(x) = 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   silu(x)      = x / (1 + exp(-x))
// so one accurate vectorised expf (Cephes polynomial, ~1 ulp) gives ~1e-7 relative error without
// the cancellation of 1 - 2 / (exp(2u) + 1) near zero.
#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cmath>

#include "ops/cpu/cpu_math.h"
#include "ops/cpu/cpu_ops.h"

namespace uniprefill::ops::cpu {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCoef = 0.044715f;

// The sigmoid argument z (act(x) = x * sigmoid(z)).
inline __m256 SigmoidArg(__m256 x, Activation act) {
  if (act == Activation::kSilu) return x;
  const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  const __m256 u = _mm256_mul_ps(_mm256_set1_ps(kSqrt2OverPi),
                                 _mm256_fmadd_ps(_mm256_set1_ps(kGeluCoef), x3, x));
  return _mm256_add_ps(u, u);
}

inline float SigmoidArg(float x, Activation act) {
  if (act == Activation::kSilu) return x;
  return 2.0f * kSqrt2OverPi * (x + kGeluCoef * x * x * x);
}

void GatedRow(float* out, const float* gate, const float* up, int64_t n, Activation act) {
  int64_t i = 0;
  const __m256 one = _mm256_set1_ps(1.0f);
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = Exp(_mm256_sub_ps(_mm256_setzero_ps(), SigmoidArg(g, act)));
    const __m256 a = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(a, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-SigmoidArg(g, act))) * up[i];
  }
}

}  // namespace

void GatedActivation(DeviceContext& ctx, TensorView out, TensorView gate, TensorView up,
                     Activation act) {
  const int64_t F = gate.dim(-1);
  assert(up.dim(-1) == F && out.dim(-1) == F);
  const int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(1, F));
  ctx.pool().ParallelFor(gate.dim(0), grain, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      GatedRow(out.row<float>(t), gate.row<float>(t), up.row<float>(t), F, act);
    }
  });
}

}  // namespace uniprefill::ops::cpu
