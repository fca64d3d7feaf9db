// Small f32 Gated DeltaNet and MoE blocks with random weights the test owns, for the block tests
// (tests/model/blocks_test.cc) and the tensor-parallel cuts of them (tests/dist/).
#pragma once

#include <algorithm>
#include <cmath>
#include <deque>
#include <random>
#include <vector>

#include "core/buffer.h"
#include "kv/linear_state.h"
#include "model/blocks/gated_deltanet.h"
#include "model/blocks/moe.h"
#include "ops/ops.h"

namespace uniprefill::testing {

inline std::vector<float> Uniform(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// v as f32 [rows, cols].
inline TensorView View(std::vector<float>& v, int64_t rows, int64_t cols) {
  return TensorView::Contiguous(v.data(), DType::kF32, {rows, cols});
}

// f32 weights the tests own: LinearWeight parts point into `storage`.
class WeightFactory {
 public:
  explicit WeightFactory(uint32_t seed) : rng_(seed) {}
  std::mt19937& rng() { return rng_; }

  // W f32 [out, in], uniform in +-1/sqrt(in); with_f32: also the dequantised copy (sgemm path).
  ops::LinearWeight Linear(int64_t out, int64_t in, bool with_f32 = true) {
    const float a = 1.0f / std::sqrt(static_cast<float>(in));
    storage_.push_back(Uniform(rng_, out * in, -a, a));
    std::vector<float>& d = storage_.back();
    ops::LinearWeight w;
    w.parts.push_back(TensorView::Contiguous(d.data(), DType::kF32, {out, in}));
    w.out_features = out;
    w.in_features = in;
    if (with_f32) {
      w.f32 = Buffer(sizeof(float) * out * in);
      std::copy(d.begin(), d.end(), w.f32.as<float>());
    }
    return w;
  }
  // The stored values of a weight made by Linear().
  static const float* Data(const ops::LinearWeight& w) { return w.parts[0].as<float>(); }

 private:
  std::mt19937 rng_;
  std::deque<std::vector<float>> storage_;
};

struct DeltaNetCase {
  int hidden = 48, n_k = 2, n_v = 6, d_k = 13, d_v = 11, kernel = 4;
};

inline GatedDeltaNetWeights MakeDeltaNet(WeightFactory& f, const DeltaNetCase& c) {
  GatedDeltaNetWeights w;
  w.n_k_heads = c.n_k;
  w.n_v_heads = c.n_v;
  w.d_k = c.d_k;
  w.d_v = c.d_v;
  w.conv_kernel = c.kernel;
  w.eps = 1e-6f;
  w.in_proj_qkvz = f.Linear(2 * w.key_dim() + 2 * w.value_dim(), c.hidden);
  w.in_proj_ba = f.Linear(2 * c.n_v, c.hidden);
  w.out_proj = f.Linear(c.hidden, w.value_dim());
  w.conv_weight = Uniform(f.rng(), static_cast<size_t>(w.conv_dim()) * c.kernel, -0.6f, 0.6f);
  w.dt_bias = Uniform(f.rng(), c.n_v, -1.0f, 1.0f);
  w.a_log = Uniform(f.rng(), c.n_v, -1.0f, 1.5f);  // A in [0.37, 4.5]
  w.norm = Uniform(f.rng(), c.d_v, 0.5f, 1.5f);
  return w;
}

inline std::vector<LinearAttentionState> NewStates(const GatedDeltaNetWeights& w, size_t n) {
  std::vector<LinearAttentionState> s;
  for (size_t i = 0; i < n; ++i) {
    s.emplace_back(w.conv_dim(), w.conv_kernel, w.n_v_heads, w.d_k, w.d_v);
  }
  return s;
}

inline std::vector<LinearAttentionState*> Pointers(std::vector<LinearAttentionState>& s) {
  std::vector<LinearAttentionState*> p;
  for (auto& x : s) p.push_back(&x);
  return p;
}

struct MoeCase {
  int hidden = 40, n_experts = 7, top_k = 3, inter = 24, shared_inter = 20;
  bool norm_topk_prob = true;
};

inline MoeWeights MakeMoe(WeightFactory& f, const MoeCase& c, bool with_f32 = true) {
  MoeWeights w;
  w.n_experts = c.n_experts;
  w.top_k = c.top_k;
  w.norm_topk_prob = c.norm_topk_prob;
  w.router = f.Linear(c.n_experts, c.hidden, with_f32);
  for (int e = 0; e < c.n_experts; ++e) {
    w.expert_gate_up.push_back(f.Linear(2 * c.inter, c.hidden, with_f32));
    w.expert_down.push_back(f.Linear(c.hidden, c.inter, with_f32));
  }
  w.shared_gate_up = f.Linear(2 * c.shared_inter, c.hidden, with_f32);
  w.shared_down = f.Linear(c.hidden, c.shared_inter, with_f32);
  w.shared_expert_gate = f.Linear(1, c.hidden, with_f32);
  return w;
}

}  // namespace uniprefill::testing
