// The Gated DeltaNet and MoE blocks: a packed batch of sequences equals each sequence alone, state
// carries across calls (prefill, then 1-row decodes), and both match straightforward per-token
// scalar implementations written here from transformers' Qwen3-Next (modeling_qwen3_next.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "kv/linear_state.h"
#include "model/blocks/gated_deltanet.h"
#include "model/blocks/moe.h"
#include "ops/ops.h"
#include "testing/block_weights.h"
#include "testing/compare.h"

namespace uniprefill {
namespace {

using testing::DeltaNetCase;
using testing::MakeDeltaNet;
using testing::MakeMoe;
using testing::MaxErrorOverRms;  // max |a - b| / rms(b), infinite on NaN or Inf
using testing::MoeCase;
using testing::NewStates;
using testing::Pointers;
using testing::Uniform;
using testing::View;
using testing::WeightFactory;

// y[o] = sum_i W[o][i] x[i] in double.
std::vector<double> MatVec(const ops::LinearWeight& w, const std::vector<double>& x) {
  const float* d = WeightFactory::Data(w);
  std::vector<double> y(w.out_features, 0.0);
  for (int64_t o = 0; o < w.out_features; ++o) {
    for (int64_t i = 0; i < w.in_features; ++i) y[o] += d[o * w.in_features + i] * x[i];
  }
  return y;
}

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double Silu(double x) { return x * Sigmoid(x); }

// ---- Gated DeltaNet ---------------------------------------------------------------------------

// The mixer for one sequence, token by token, in double: transformers' Qwen3NextGatedDeltaNet
// forward with the recurrent (decode) gated delta rule, written out without any of the block's
// helpers.
class ScalarDeltaNet {
 public:
  explicit ScalarDeltaNet(const GatedDeltaNetWeights& w)
      : w_(w),
        history_(w.conv_kernel - 1, std::vector<double>(w.conv_dim(), 0.0)),
        S_(static_cast<size_t>(w.n_v_heads) * w.d_k * w.d_v, 0.0) {}

  std::vector<double> Step(const float* x_row, int hidden) {
    const int hk = w_.n_k_heads, hv = w_.n_v_heads, dk = w_.d_k, dv = w_.d_v, r = hv / hk;
    const int kd = w_.key_dim(), K = w_.conv_kernel;
    const std::vector<double> x(x_row, x_row + hidden);
    const std::vector<double> qkvz = MatVec(w_.in_proj_qkvz, x), ba = MatVec(w_.in_proj_ba, x);
    // fix_query_key_value_ordering: view [n_k, 2 d_k + 2 r d_v], split [d_k, d_k, r d_v, r d_v];
    // ba: view [n_k, 2 r], split [r, r].
    std::vector<double> mixed(w_.conv_dim()), z(w_.value_dim()), b(hv), a(hv);
    const int group = 2 * dk + 2 * r * dv;
    for (int g = 0; g < hk; ++g) {
      for (int i = 0; i < dk; ++i) mixed[g * dk + i] = qkvz[g * group + i];
      for (int i = 0; i < dk; ++i) mixed[kd + g * dk + i] = qkvz[g * group + dk + i];
      for (int i = 0; i < r * dv; ++i)
        mixed[2 * kd + g * r * dv + i] = qkvz[g * group + 2 * dk + i];
      for (int i = 0; i < r * dv; ++i) z[g * r * dv + i] = qkvz[g * group + 2 * dk + r * dv + i];
      for (int i = 0; i < r; ++i) b[g * r + i] = ba[g * 2 * r + i];
      for (int i = 0; i < r; ++i) a[g * r + i] = ba[g * 2 * r + r + i];
    }
    // Depthwise causal conv over [history..., current], then SiLU.
    std::vector<double> conv(w_.conv_dim());
    for (int c = 0; c < w_.conv_dim(); ++c) {
      double acc = w_.conv_weight[c * K + K - 1] * mixed[c];
      for (int j = 0; j < K - 1; ++j) acc += w_.conv_weight[c * K + j] * history_[j][c];
      conv[c] = Silu(acc);
    }
    if (K > 1) {
      history_.erase(history_.begin());
      history_.push_back(mixed);
    }
    auto l2 = [](double* p, int n, double scale) {
      double ss = 0;
      for (int i = 0; i < n; ++i) ss += p[i] * p[i];
      for (int i = 0; i < n; ++i) p[i] *= scale / std::sqrt(ss + 1e-6);
    };
    for (int g = 0; g < hk; ++g) {
      l2(&conv[g * dk], dk, 1.0 / std::sqrt(static_cast<double>(dk)));
      l2(&conv[kd + g * dk], dk, 1.0);
    }
    std::vector<double> o_all(w_.value_dim());
    for (int h = 0; h < hv; ++h) {
      const double* q = &conv[(h / r) * dk];
      const double* k = &conv[kd + (h / r) * dk];
      const double* v = &conv[2 * kd + h * dv];
      const double beta = Sigmoid(b[h]);
      const double sp = a[h] + w_.dt_bias[h] > 20 ? a[h] + w_.dt_bias[h]
                                                  : std::log1p(std::exp(a[h] + w_.dt_bias[h]));
      const double g = -std::exp(static_cast<double>(w_.a_log[h])) * sp;
      double* S = &S_[static_cast<size_t>(h) * dk * dv];
      for (int i = 0; i < dk * dv; ++i) S[i] *= std::exp(g);
      for (int j = 0; j < dv; ++j) {
        double u = 0;
        for (int i = 0; i < dk; ++i) u += S[i * dv + j] * k[i];
        const double delta = beta * (v[j] - u);
        for (int i = 0; i < dk; ++i) S[i * dv + j] += k[i] * delta;
      }
      double* o = &o_all[h * dv];
      for (int j = 0; j < dv; ++j) {
        o[j] = 0;
        for (int i = 0; i < dk; ++i) o[j] += S[i * dv + j] * q[i];
      }
      // Qwen3NextRMSNormGated: weight * o / sqrt(mean(o^2) + eps) * silu(z).
      double ss = 0;
      for (int j = 0; j < dv; ++j) ss += o[j] * o[j];
      const double inv = 1.0 / std::sqrt(ss / dv + w_.eps);
      for (int j = 0; j < dv; ++j) o[j] = o[j] * inv * w_.norm[j] * Silu(z[h * dv + j]);
    }
    return MatVec(w_.out_proj, o_all);
  }

 private:
  const GatedDeltaNetWeights& w_;
  std::vector<std::vector<double>> history_;  // the last K-1 conv inputs, oldest first
  std::vector<double> S_;                     // [n_v, d_k, d_v]
};

TEST(DeltaNetBlockTest, PackedBatchEqualsEachSequenceAloneThroughPrefillAndDecode) {
  auto ctx = DeviceContext::Cpu(2);
  WeightFactory f(21);
  const DeltaNetCase c;
  const GatedDeltaNetWeights w = MakeDeltaNet(f, c);
  const std::vector<int> lens = {37, 1, 20};
  const std::vector<SequenceRows> seqs = {{0, 37}, {37, 38}, {38, 58}};
  const int T = 58, H = c.hidden;
  std::vector<float> x = Uniform(f.rng(), T * H, -1, 1), packed(T * H);
  std::vector<LinearAttentionState> packed_states = NewStates(w, 3);
  std::vector<LinearAttentionState*> ptrs = Pointers(packed_states);
  GatedDeltaNetForward(*ctx, w, View(x, T, H), seqs, ptrs, View(packed, T, H));
  // Then one decode row per sequence, packed.
  std::vector<float> xd = Uniform(f.rng(), 3 * H, -1, 1), packed_d(3 * H);
  const std::vector<SequenceRows> dseqs = {{0, 1}, {1, 2}, {2, 3}};
  GatedDeltaNetForward(*ctx, w, View(xd, 3, H), dseqs, ptrs, View(packed_d, 3, H));

  for (int s = 0; s < 3; ++s) {
    std::vector<LinearAttentionState> alone_state = NewStates(w, 1);
    std::vector<LinearAttentionState*> p = Pointers(alone_state);
    const int n = lens[s];
    std::vector<float> xs(x.begin() + seqs[s].begin * H, x.begin() + seqs[s].end * H), ys(n * H);
    const std::vector<SequenceRows> one = {{0, n}};
    GatedDeltaNetForward(*ctx, w, View(xs, n, H), one, p, View(ys, n, H));
    const std::vector<float> want(packed.begin() + seqs[s].begin * H,
                                  packed.begin() + seqs[s].end * H);
    // The GEMMs pick sgemm or the matvec by row count: rounding-level differences only.
    EXPECT_LT(MaxErrorOverRms(ys, want), 1e-5) << "sequence " << s;
    std::vector<float> xds(xd.begin() + s * H, xd.begin() + (s + 1) * H), yd(H);
    const std::vector<SequenceRows> row = {{0, 1}};
    GatedDeltaNetForward(*ctx, w, View(xds, 1, H), row, p, View(yd, 1, H));
    const std::vector<float> want_d(packed_d.begin() + s * H, packed_d.begin() + (s + 1) * H);
    EXPECT_LT(MaxErrorOverRms(yd, want_d), 1e-5) << "decode of sequence " << s;
    const float* a = alone_state[0].recurrent_data();
    const float* b = packed_states[s].recurrent_data();
    const size_t n_rec = alone_state[0].recurrent.size() / sizeof(float);
    EXPECT_LT(MaxErrorOverRms(std::vector<float>(a, a + n_rec), std::vector<float>(b, b + n_rec)),
              1e-5);
  }
}

TEST(DeltaNetBlockTest, MatchesPerTokenScalarImplementation) {
  auto ctx = DeviceContext::Cpu(2);
  for (const DeltaNetCase& c :
       {DeltaNetCase{}, DeltaNetCase{40, 3, 3, 8, 16, 3}, DeltaNetCase{32, 1, 4, 16, 8, 4}}) {
    WeightFactory f(22);
    const GatedDeltaNetWeights w = MakeDeltaNet(f, c);
    // Two sequences: a prefill of 70 and 9 rows, then three decode steps of one row each.
    const int H = c.hidden;
    const std::vector<int> prefill = {70, 9};
    const int steps = 3;
    std::vector<LinearAttentionState> states = NewStates(w, 2);
    std::vector<LinearAttentionState*> ptrs = Pointers(states);
    std::vector<std::vector<float>> inputs(2), outputs(2);
    for (int s = 0; s < 2; ++s) inputs[s] = Uniform(f.rng(), (prefill[s] + steps) * H, -1, 1);
    {
      std::vector<float> x, y((prefill[0] + prefill[1]) * H);
      x.insert(x.end(), inputs[0].begin(), inputs[0].begin() + prefill[0] * H);
      x.insert(x.end(), inputs[1].begin(), inputs[1].begin() + prefill[1] * H);
      const int T = prefill[0] + prefill[1];
      const std::vector<SequenceRows> seqs = {{0, prefill[0]}, {prefill[0], T}};
      GatedDeltaNetForward(*ctx, w, View(x, T, H), seqs, ptrs, View(y, T, H));
      outputs[0].assign(y.begin(), y.begin() + prefill[0] * H);
      outputs[1].assign(y.begin() + prefill[0] * H, y.end());
    }
    for (int step = 0; step < steps; ++step) {
      std::vector<float> x, y(2 * H);
      for (int s = 0; s < 2; ++s) {
        const auto row = inputs[s].begin() + (prefill[s] + step) * H;
        x.insert(x.end(), row, row + H);
      }
      const std::vector<SequenceRows> seqs = {{0, 1}, {1, 2}};
      GatedDeltaNetForward(*ctx, w, View(x, 2, H), seqs, ptrs, View(y, 2, H));
      for (int s = 0; s < 2; ++s)
        outputs[s].insert(outputs[s].end(), y.begin() + s * H, y.begin() + (s + 1) * H);
    }
    for (int s = 0; s < 2; ++s) {
      ScalarDeltaNet ref(w);
      std::vector<float> want;
      for (int t = 0; t < prefill[s] + steps; ++t) {
        for (double v : ref.Step(inputs[s].data() + t * H, H))
          want.push_back(static_cast<float>(v));
      }
      // f32 GEMMs, conv and recurrence against double throughout (seen: up to 3e-6).
      EXPECT_LT(MaxErrorOverRms(outputs[s], want), 2e-5)
          << "sequence " << s << " n_k " << c.n_k << " n_v " << c.n_v << " d_k " << c.d_k;
    }
  }
}

// ---- MoE --------------------------------------------------------------------------------------

// down(silu(gate x) * up x) in double; gate_up rows are [gate; up].
std::vector<double> SwiGluRef(const ops::LinearWeight& gate_up, const ops::LinearWeight& down,
                              const std::vector<double>& x) {
  const std::vector<double> gu = MatVec(gate_up, x);
  const size_t inter = gu.size() / 2;
  std::vector<double> h(inter);
  for (size_t i = 0; i < inter; ++i) h[i] = Silu(gu[i]) * gu[inter + i];
  return MatVec(down, h);
}

// Qwen3NextSparseMoeBlock for one row, densely: every expert is evaluated and weighted by its
// routing weight (zero when not in the top k).
std::vector<double> DenseMoeRow(const MoeWeights& w, const float* x_row, int hidden) {
  const std::vector<double> x(x_row, x_row + hidden);
  const std::vector<double> logits = MatVec(w.router, x);
  const double mx = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(w.n_experts);
  double sum = 0;
  for (int e = 0; e < w.n_experts; ++e) sum += p[e] = std::exp(logits[e] - mx);
  for (double& v : p) v /= sum;
  std::vector<int> order(w.n_experts);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
  std::vector<double> weight(w.n_experts, 0.0);
  double top_sum = 0;
  for (int i = 0; i < w.top_k; ++i) top_sum += p[order[i]];
  for (int i = 0; i < w.top_k; ++i) {
    weight[order[i]] = w.norm_topk_prob ? p[order[i]] / top_sum : p[order[i]];
  }
  std::vector<double> y(hidden, 0.0);
  for (int e = 0; e < w.n_experts; ++e) {
    const std::vector<double> ye = SwiGluRef(w.expert_gate_up[e], w.expert_down[e], x);
    for (int d = 0; d < hidden; ++d) y[d] += weight[e] * ye[d];
  }
  const double gate = Sigmoid(MatVec(w.shared_expert_gate, x)[0]);
  const std::vector<double> sh = SwiGluRef(w.shared_gate_up, w.shared_down, x);
  for (int d = 0; d < hidden; ++d) y[d] += gate * sh[d];
  return y;
}

TEST(MoeTest, MatchesDenseScalarLoopOverAllExperts) {
  auto ctx = DeviceContext::Cpu(2);
  for (bool norm : {true, false}) {
    for (bool with_f32 : {true, false}) {
      MoeCase c;
      c.norm_topk_prob = norm;
      WeightFactory f(31);
      const MoeWeights w = MakeMoe(f, c, with_f32);
      const int T = 50, H = c.hidden;
      std::vector<float> x = Uniform(f.rng(), T * H, -2, 2), y(T * H), want;
      MoeForward(*ctx, w, View(x, T, H), View(y, T, H));
      for (int t = 0; t < T; ++t) {
        for (double v : DenseMoeRow(w, x.data() + t * H, H)) want.push_back(static_cast<float>(v));
      }
      EXPECT_LT(MaxErrorOverRms(y, want), 1e-5) << "norm " << norm << " f32 " << with_f32;
    }
  }
}

TEST(MoeTest, RowsGiveTheSameResultInAnyBatch) {
  auto ctx = DeviceContext::Cpu(2);
  MoeCase c;
  c.n_experts = 9;
  c.top_k = 2;
  WeightFactory f(32);
  const MoeWeights w = MakeMoe(f, c);
  const int T = 61, H = c.hidden;
  std::vector<float> x = Uniform(f.rng(), T * H, -2, 2), whole(T * H);
  MoeForward(*ctx, w, View(x, T, H), View(whole, T, H));
  // The same rows as three batches (one of a single row), and in reverse order.
  std::vector<float> parts;
  for (auto [b, e] : {std::pair{0, 30}, {30, 31}, {31, 61}}) {
    std::vector<float> xs(x.begin() + b * H, x.begin() + e * H), ys((e - b) * H);
    MoeForward(*ctx, w, View(xs, e - b, H), View(ys, e - b, H));
    parts.insert(parts.end(), ys.begin(), ys.end());
  }
  EXPECT_LT(MaxErrorOverRms(parts, whole), 5e-6);
  std::vector<float> xr(T * H), yr(T * H), back(T * H);
  for (int t = 0; t < T; ++t) std::copy_n(x.begin() + t * H, H, xr.begin() + (T - 1 - t) * H);
  MoeForward(*ctx, w, View(xr, T, H), View(yr, T, H));
  for (int t = 0; t < T; ++t) std::copy_n(yr.begin() + (T - 1 - t) * H, H, back.begin() + t * H);
  // Per-row summation order is fixed; only the GEMM kernels' rounding differs with a row's
  // position and its expert group's size.
  EXPECT_LT(MaxErrorOverRms(back, whole), 5e-6);
}

TEST(MoeTest, RouteRowBreaksTiesTowardsTheLowerExpertIndex) {
  const std::vector<float> equal(6, 0.25f);
  const std::vector<ExpertChoice> a = RouteRow(equal.data(), 6, 3, /*norm_topk_prob=*/true);
  ASSERT_EQ(a.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a[i].expert, i);
    EXPECT_FLOAT_EQ(a[i].weight, 1.0f / 3.0f);
  }
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 0.0f, 3.0f};
  const std::vector<ExpertChoice> b = RouteRow(logits.data(), 5, 2, /*norm_topk_prob=*/false);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].expert, 1);
  EXPECT_EQ(b[1].expert, 2);
  // Without renormalisation the weights are the softmax probabilities over all experts.
  const double z = std::exp(-2.0) + 3.0 + std::exp(-3.0);
  EXPECT_NEAR(b[0].weight, 1.0 / z, 1e-6);
}

TEST(MoeTest, RouteRowListsExpertsInAscendingIndexWithRenormalisedWeights) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.5f, 0.7f};
  const std::vector<ExpertChoice> r = RouteRow(logits.data(), 5, 3, /*norm_topk_prob=*/true);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].expert, 1);
  EXPECT_EQ(r[1].expert, 3);
  EXPECT_EQ(r[2].expert, 4);
  const double e1 = std::exp(2.0), e3 = std::exp(1.5), e4 = std::exp(0.7);
  EXPECT_NEAR(r[0].weight, e1 / (e1 + e3 + e4), 1e-6);
  EXPECT_NEAR(r[0].weight + r[1].weight + r[2].weight, 1.0, 1e-6);
}

}  // namespace
}  // namespace uniprefill
