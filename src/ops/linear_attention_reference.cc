#include "ops/linear_attention_reference.h"

#include <cassert>
#include <cmath>
#include <vector>

namespace uniprefill::ops::reference {
namespace {

// Element (t, h, d) of a 3-D view, or (t, d) of a 2-D one with h = 0.
float& At(TensorView x, int64_t t, int64_t h, int64_t d) {
  const int64_t off = x.ndim == 3 ? t * x.stride[0] + h * x.stride[1] + d : t * x.stride[0] + d;
  return x.as<float>()[off];
}

double Silu(double x) { return x / (1.0 + std::exp(-x)); }

}  // namespace

void CausalConv1dSilu(TensorView out, TensorView x, TensorView weight, float* state) {
  const int64_t T = x.dim(0), C = x.dim(1), K = weight.dim(1);
  assert(weight.dim(0) == C && out.dim(0) == T && out.dim(1) == C);
  // in[tau + K - 1] for tau in [-(K-1), T): the previous inputs, then x.
  auto in = [&](int64_t tau, int64_t c) -> double {
    return tau < 0 ? state[(K - 1 + tau) * C + c] : x.row<float>(tau)[c];
  };
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < C; ++c) {
      double acc = 0;
      for (int64_t j = 0; j < K; ++j) {
        acc += static_cast<double>(weight.row<float>(c)[j]) * in(t - (K - 1) + j, c);
      }
      out.row<float>(t)[c] = static_cast<float>(Silu(acc));
    }
  }
  std::vector<float> next((K - 1) * C);
  for (int64_t j = 0; j < K - 1; ++j) {
    for (int64_t c = 0; c < C; ++c) next[j * C + c] = static_cast<float>(in(T - (K - 1) + j, c));
  }
  for (size_t i = 0; i < next.size(); ++i) state[i] = next[i];
}

void L2NormalizeHeads(TensorView x, float eps, float scale) {
  const int64_t T = x.dim(0), H = x.ndim == 3 ? x.dim(1) : 1, D = x.dim(-1);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      double ss = 0;
      for (int64_t d = 0; d < D; ++d) ss += static_cast<double>(At(x, t, h, d)) * At(x, t, h, d);
      const double f = scale / std::sqrt(ss + eps);
      for (int64_t d = 0; d < D; ++d) At(x, t, h, d) = static_cast<float>(At(x, t, h, d) * f);
    }
  }
}

void GatedDeltaRule(TensorView out, TensorView q, TensorView k, TensorView v, TensorView g,
                    TensorView beta, float* state) {
  const int64_t T = q.dim(0), Hk = q.dim(1), Dk = q.dim(2), Hv = v.dim(1), Dv = v.dim(2);
  assert(Hv % Hk == 0 && k.dim(1) == Hk && k.dim(2) == Dk);
  const int64_t group = Hv / Hk;
  std::vector<double> S(Dk * Dv), u(Dv);
  for (int64_t h = 0; h < Hv; ++h) {
    float* st = state + h * Dk * Dv;
    for (int64_t i = 0; i < Dk * Dv; ++i) S[i] = st[i];
    const int64_t kh = h / group;
    for (int64_t t = 0; t < T; ++t) {
      const double decay = std::exp(static_cast<double>(g.row<float>(t)[h]));
      const double b = beta.row<float>(t)[h];
      for (double& s : S) s *= decay;
      for (int64_t j = 0; j < Dv; ++j) {
        double acc = 0;
        for (int64_t i = 0; i < Dk; ++i) acc += S[i * Dv + j] * At(k, t, kh, i);
        u[j] = acc;
      }
      for (int64_t i = 0; i < Dk; ++i) {
        for (int64_t j = 0; j < Dv; ++j) {
          S[i * Dv + j] += At(k, t, kh, i) * (b * (At(v, t, h, j) - u[j]));
        }
      }
      for (int64_t j = 0; j < Dv; ++j) {
        double acc = 0;
        for (int64_t i = 0; i < Dk; ++i) acc += S[i * Dv + j] * At(q, t, kh, i);
        At(out, t, h, j) = static_cast<float>(acc);
      }
    }
    for (int64_t i = 0; i < Dk * Dv; ++i) st[i] = static_cast<float>(S[i]);
  }
}

}  // namespace uniprefill::ops::reference
