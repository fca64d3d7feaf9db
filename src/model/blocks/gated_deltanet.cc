#include "model/blocks/gated_deltanet.h"

#include <cassert>
#include <cmath>
#include <cstring>

#include "core/buffer.h"
#include "ops/linear_attention_ops.h"

namespace uniprefill {
namespace {

// The q/k l2norm epsilon of transformers' l2norm (and FLA's kernel), independent of config eps.
constexpr float kL2NormEps = 1e-6f;

// torch.nn.functional.softplus (beta 1, threshold 20).
float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// A view of rows of a 2-D f32 buffer: [rows, cols] at column `col`, row stride `stride`.
TensorView Columns(const Buffer& b, int64_t rows, int64_t stride, int64_t col, int64_t cols) {
  TensorView v = TensorView::Contiguous(b.as<float>() + col, DType::kF32, {rows, cols});
  v.stride[0] = stride;
  return v;
}

// The same as [rows, heads, dim] (heads contiguous inside a row).
TensorView Heads(const Buffer& b, int64_t rows, int64_t stride, int64_t col, int64_t heads,
                 int64_t dim) {
  TensorView v = TensorView::Contiguous(b.as<float>() + col, DType::kF32, {rows, heads, dim});
  v.stride[0] = stride;
  return v;
}

// Undoes the per-key-head grouping (transformers' fix_query_key_value_ordering):
//   qkvz f32 [T, n_k (2 d_k + 2 r d_v)] -> mixed f32 [T, conv_dim] = [q | k | v],
//                                          z f32 [T, n_v d_v];
//   ba f32 [T, n_k 2 r] -> beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias),
//                          both f32 [T, n_v].
void Regroup(DeviceContext& ctx, const GatedDeltaNetWeights& w, int64_t T, const Buffer& qkvz,
             const Buffer& ba, Buffer& mixed, Buffer& z, Buffer& g, Buffer& beta) {
  const int64_t hk = w.n_k_heads, hv = w.n_v_heads, dk = w.d_k, dv = w.d_v, r = hv / hk;
  const int64_t group = 2 * dk + 2 * r * dv, qkvz_row = hk * group, conv_dim = w.conv_dim();
  const int64_t key_dim = w.key_dim(), value_dim = w.value_dim();
  ctx.pool().ParallelFor(
      T, std::max<int64_t>(1, 4096 / qkvz_row), [&](int64_t t0, int64_t t1, int) {
        for (int64_t t = t0; t < t1; ++t) {
          const float* src = qkvz.as<float>() + t * qkvz_row;
          float* m = mixed.as<float>() + t * conv_dim;
          float* zr = z.as<float>() + t * value_dim;
          for (int64_t kh = 0; kh < hk; ++kh) {
            const float* s = src + kh * group;
            std::memcpy(m + kh * dk, s, dk * sizeof(float));
            std::memcpy(m + key_dim + kh * dk, s + dk, dk * sizeof(float));
            std::memcpy(m + 2 * key_dim + kh * r * dv, s + 2 * dk, r * dv * sizeof(float));
            std::memcpy(zr + kh * r * dv, s + 2 * dk + r * dv, r * dv * sizeof(float));
          }
          const float* bar = ba.as<float>() + t * 2 * hv;
          for (int64_t h = 0; h < hv; ++h) {
            const int64_t kh = h / r, i = h % r;
            const float b = bar[kh * 2 * r + i], a = bar[kh * 2 * r + r + i];
            beta.as<float>()[t * hv + h] = 1.0f / (1.0f + std::exp(-b));
            g.as<float>()[t * hv + h] = -std::exp(w.a_log[h]) * Softplus(a + w.dt_bias[h]);
          }
        }
      });
}

}  // namespace

void GatedDeltaNetForward(DeviceContext& ctx, const GatedDeltaNetWeights& w, TensorView x,
                          std::span<const SequenceRows> seqs,
                          std::span<LinearAttentionState*> states, TensorView out) {
  const int64_t T = x.dim(0), hk = w.n_k_heads, hv = w.n_v_heads, dk = w.d_k, dv = w.d_v;
  const int64_t key_dim = w.key_dim(), value_dim = w.value_dim(), conv_dim = w.conv_dim();
  const int64_t K = w.conv_kernel;
  assert(hk > 0 && hv % hk == 0 && seqs.size() == states.size());
  assert(w.in_proj_qkvz.out_features == 2 * key_dim + 2 * value_dim);
  assert(w.in_proj_ba.out_features == 2 * hv && w.out_proj.in_features == value_dim);
  assert(static_cast<int64_t>(w.conv_weight.size()) == conv_dim * K);
  assert(out.dim(0) == T && out.data != x.data);
  if (T == 0) return;

  Buffer qkvz(sizeof(float) * T * (2 * key_dim + 2 * value_dim));  // f32 [T, 2 kd + 2 vd]
  Buffer ba(sizeof(float) * T * 2 * hv);                           // f32 [T, 2 n_v]
  ops::Linear(ctx, qkvz.View(DType::kF32, {T, 2 * key_dim + 2 * value_dim}), x, w.in_proj_qkvz);
  ops::Linear(ctx, ba.View(DType::kF32, {T, 2 * hv}), x, w.in_proj_ba);

  Buffer mixed(sizeof(float) * T * conv_dim);  // f32 [T, conv_dim]: [q | k | v] before the conv
  Buffer z(sizeof(float) * T * value_dim);     // f32 [T, n_v, d_v]
  Buffer g(sizeof(float) * T * hv), beta(sizeof(float) * T * hv);  // f32 [T, n_v]
  Regroup(ctx, w, T, qkvz, ba, mixed, z, g, beta);
  qkvz = Buffer();

  Buffer conv(sizeof(float) * T * conv_dim);  // f32 [T, conv_dim]: silu(conv([q | k | v]))
  const TensorView conv_w =
      TensorView::Contiguous(const_cast<float*>(w.conv_weight.data()), DType::kF32, {conv_dim, K});
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int64_t b = seqs[s].begin, n = seqs[s].size();
    assert(b >= 0 && n >= 0 && b + n <= T);
    assert(states[s]->conv_dim == conv_dim && states[s]->kernel == K);
    ops::CausalConv1dSilu(ctx, Columns(conv, T, conv_dim, 0, conv_dim).Slice0(b, n),
                          Columns(mixed, T, conv_dim, 0, conv_dim).Slice0(b, n), conv_w,
                          states[s]->conv_data());
  }
  mixed = Buffer();

  const TensorView q = Heads(conv, T, conv_dim, 0, hk, dk);            // f32 [T, n_k, d_k]
  const TensorView k = Heads(conv, T, conv_dim, key_dim, hk, dk);      // f32 [T, n_k, d_k]
  const TensorView v = Heads(conv, T, conv_dim, 2 * key_dim, hv, dv);  // f32 [T, n_v, d_v]
  ops::L2NormalizeHeads(ctx, q, kL2NormEps, 1.0f / std::sqrt(static_cast<float>(dk)));
  ops::L2NormalizeHeads(ctx, k, kL2NormEps);

  Buffer core(sizeof(float) * T * value_dim);  // f32 [T, n_v, d_v]
  const TensorView core_v = Heads(core, T, value_dim, 0, hv, dv);
  const TensorView g_v = Columns(g, T, hv, 0, hv), beta_v = Columns(beta, T, hv, 0, hv);
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int64_t b = seqs[s].begin, n = seqs[s].size();
    LinearAttentionState& st = *states[s];
    assert(st.n_v_heads == hv && st.d_k == dk && st.d_v == dv);
    ops::GatedDeltaRule(ctx, core_v.Slice0(b, n), q.Slice0(b, n), k.Slice0(b, n), v.Slice0(b, n),
                        g_v.Slice0(b, n), beta_v.Slice0(b, n), st.recurrent_data());
  }

  // Gated RMSNorm per value head: norm(o) * weight * silu(z), written over z.
  const TensorView core_rows = core.View(DType::kF32, {T * hv, dv});
  const TensorView z_rows = z.View(DType::kF32, {T * hv, dv});
  ops::RmsNorm(ctx, core_rows, core_rows, w.norm.data(), w.eps);
  ops::GatedActivation(ctx, z_rows, z_rows, core_rows, ops::Activation::kSilu);
  ops::Linear(ctx, out, z.View(DType::kF32, {T, value_dim}), w.out_proj);
}

}  // namespace uniprefill
