#include "ops/reference.h"

#include <cassert>
#include <cmath>
#include <vector>

#include "io/dequant.h"

namespace uniprefill::ops::reference {
namespace {

// Row r of a 2-D weight view of any dtype, dequantised.
std::vector<float> DequantRow(TensorView t, int64_t r) {
  const int64_t n = t.dim(-1);
  std::vector<float> row(n);
  const auto info = GetDTypeInfo(static_cast<uint32_t>(t.dtype));
  const int64_t bytes = r * t.stride[0] / info->block_elems * info->block_bytes;
  const Status s = Dequantize(t.dtype, static_cast<const char*>(t.data) + bytes, row.data(), n);
  assert(s.ok());
  (void)s;
  return row;
}

}  // namespace

double GeluTanh(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

double Silu(double x) { return x / (1.0 + std::exp(-x)); }

void Linear(TensorView out, TensorView x, const LinearWeight& w) {
  const int64_t T = x.dim(0), in = w.in_features;
  int64_t col = 0;
  for (const TensorView& part : w.parts) {
    for (int64_t o = 0; o < part.dim(0); ++o) {
      const std::vector<float> wr = DequantRow(part, o);
      for (int64_t t = 0; t < T; ++t) {
        const float* xr = x.row<float>(t);
        double acc = 0;
        for (int64_t i = 0; i < in; ++i) acc += static_cast<double>(wr[i]) * xr[i];
        out.row<float>(t)[col + o] = static_cast<float>(acc);
      }
    }
    col += part.dim(0);
  }
}

void RmsNorm(TensorView out, TensorView x, const float* weight, float eps) {
  const int64_t D = x.dim(-1);
  for (int64_t r = 0; r < x.dim(0); ++r) {
    const float* xr = x.row<float>(r);
    double ss = 0;
    for (int64_t i = 0; i < D; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const double inv = 1.0 / std::sqrt(ss / D + eps);
    float* o = out.row<float>(r);
    for (int64_t i = 0; i < D; ++i) o[i] = static_cast<float>(xr[i] * inv * weight[i]);
  }
}

void Rope(TensorView x, const int32_t* pos, const float* inv_freq, int rot_dims, RopeStyle style) {
  const int64_t T = x.dim(0), H = x.dim(1);
  const int half = rot_dims / 2;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      float* v = x.as<float>() + t * x.stride[0] + h * x.stride[1];
      for (int i = 0; i < half; ++i) {
        // Like HF: the angle is computed in f32, then cos/sin.
        const float angle = static_cast<float>(pos[t]) * inv_freq[i];
        const double c = std::cos(angle), s = std::sin(angle);
        const int a = style == RopeStyle::kNeox ? i : 2 * i;
        const int b = style == RopeStyle::kNeox ? i + half : 2 * i + 1;
        const double x0 = v[a], x1 = v[b];
        v[a] = static_cast<float>(x0 * c - x1 * s);
        v[b] = static_cast<float>(x1 * c + x0 * s);
      }
    }
  }
}

void GatedActivation(TensorView out, TensorView gate, TensorView up, Activation act) {
  const int64_t F = gate.dim(-1);
  for (int64_t t = 0; t < gate.dim(0); ++t) {
    for (int64_t i = 0; i < F; ++i) {
      const double g = gate.row<float>(t)[i];
      const double a = act == Activation::kGeluTanh ? GeluTanh(g) : Silu(g);
      out.row<float>(t)[i] = static_cast<float>(a * up.row<float>(t)[i]);
    }
  }
}

void Embedding(TensorView out, TensorView table, const int32_t* ids, float scale) {
  for (int64_t t = 0; t < out.dim(0); ++t) {
    const std::vector<float> row = DequantRow(table, ids[t]);
    for (int64_t i = 0; i < out.dim(1); ++i) out.row<float>(t)[i] = row[i] * scale;
  }
}

void Add(TensorView out, TensorView a, TensorView b) {
  for (int64_t r = 0; r < a.dim(0); ++r) {
    for (int64_t i = 0; i < a.dim(-1); ++i) {
      out.row<float>(r)[i] = a.row<float>(r)[i] + b.row<float>(r)[i];
    }
  }
}

void Attention(TensorView out, TensorView q, TensorView k, TensorView v, const int32_t* q_pos,
               const int32_t* k_pos, const AttentionParams& params) {
  const int64_t Tq = q.dim(0), Hq = q.dim(1), D = q.dim(2), Tk = k.dim(0), Hkv = k.dim(1);
  const int64_t group = Hq / Hkv;
  std::vector<double> s(Tk);
  for (int64_t i = 0; i < Tq; ++i) {
    for (int64_t h = 0; h < Hq; ++h) {
      const float* qr = q.as<float>() + i * q.stride[0] + h * q.stride[1];
      const int64_t kh = h / group;
      double mx = -INFINITY;
      for (int64_t j = 0; j < Tk; ++j) {
        const bool visible = k_pos[j] <= q_pos[i] &&
                             (params.window == 0 || k_pos[j] > q_pos[i] - params.window);
        s[j] = -INFINITY;
        if (!visible) continue;
        const float* kr = k.as<float>() + j * k.stride[0] + kh * k.stride[1];
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(qr[d]) * kr[d];
        s[j] = dot * params.scale;
        mx = std::max(mx, s[j]);
      }
      float* o = out.as<float>() + i * out.stride[0] + h * out.stride[1];
      std::vector<double> acc(D, 0.0);
      double sum = 0;
      if (mx != -INFINITY) {
        for (int64_t j = 0; j < Tk; ++j) {
          if (s[j] == -INFINITY) continue;
          const double p = std::exp(s[j] - mx);
          sum += p;
          const float* vr = v.as<float>() + j * v.stride[0] + kh * v.stride[1];
          for (int64_t d = 0; d < D; ++d) acc[d] += p * vr[d];
        }
      }
      for (int64_t d = 0; d < D; ++d) o[d] = sum > 0 ? static_cast<float>(acc[d] / sum) : 0.0f;
    }
  }
}

}  // namespace uniprefill::ops::reference
