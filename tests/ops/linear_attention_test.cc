// CausalConv1dSilu, L2NormalizeHeads and GatedDeltaRule vs their scalar references over odd sizes,
// strided views and 1 / 2 threads, and the state-carry contract: T rows in one call equal the same
// rows split into a prefill and several 1-row decode calls.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

#include "ops/linear_attention_ops.h"
#include "ops/linear_attention_reference.h"
#include "ops_test_util.h"

namespace uniprefill::ops {
namespace {

using testing::MaxErrorOverRms;
using testing::RandomFloats;

constexpr int kThreadCounts[] = {1, 2};

// A [rows, cols] f32 view of v starting at `offset`, with row stride `stride`.
TensorView View2(std::vector<float>& v, int64_t offset, int64_t rows, int64_t cols,
                 int64_t stride) {
  TensorView t = TensorView::Contiguous(v.data() + offset, DType::kF32, {rows, cols});
  t.stride[0] = stride;
  return t;
}

// A [rows, heads, dim] f32 view of v starting at `offset`, with token stride `stride`.
TensorView View3(std::vector<float>& v, int64_t offset, int64_t rows, int64_t heads, int64_t dim,
                 int64_t stride) {
  TensorView t = TensorView::Contiguous(v.data() + offset, DType::kF32, {rows, heads, dim});
  t.stride[0] = stride;
  return t;
}

// ---- CausalConv1dSilu ------------------------------------------------------------------------

TEST(CausalConvTest, MatchesReferenceWithStridedRowsAndNonzeroState) {
  std::mt19937 rng(7);
  for (int threads : kThreadCounts) {
    auto ctx = DeviceContext::Cpu(threads);
    for (int64_t T : {1, 2, 3, 17, 70}) {
      for (int64_t C : {1, 7, 8, 64, 133}) {
        for (int64_t K : {1, 2, 4, 5}) {
          const int64_t xs = C + 3;
          std::vector<float> x = RandomFloats(rng, T * xs, -3, 3);
          std::vector<float> w = RandomFloats(rng, C * K);
          std::vector<float> state = RandomFloats(rng, (K - 1) * C, -3, 3), ref_state = state;
          std::vector<float> out(T * C), ref(T * C);
          const TensorView wv = TensorView::Contiguous(w.data(), DType::kF32, {C, K});
          CausalConv1dSilu(*ctx, View2(out, 0, T, C, C), View2(x, 0, T, C, xs), wv, state.data());
          reference::CausalConv1dSilu(View2(ref, 0, T, C, C), View2(x, 0, T, C, xs), wv,
                                      ref_state.data());
          // f32 taps and a ~1 ulp vector exp in SiLU against double (seen: up to 8e-7).
          EXPECT_LT(MaxErrorOverRms(out, ref), 3e-6) << T << " " << C << " " << K;
          EXPECT_EQ(state, ref_state) << T << " " << C << " " << K;  // a pure copy of inputs
        }
      }
    }
  }
}

TEST(CausalConvTest, OneCallEqualsPrefillThenSingleRowDecodes) {
  std::mt19937 rng(8);
  auto ctx = DeviceContext::Cpu(2);
  const int64_t T = 29, C = 77, K = 4;
  std::vector<float> x = RandomFloats(rng, T * C, -2, 2), w = RandomFloats(rng, C * K);
  const TensorView wv = TensorView::Contiguous(w.data(), DType::kF32, {C, K});
  std::vector<float> whole(T * C), split(T * C);
  std::vector<float> s1((K - 1) * C, 0.0f), s2((K - 1) * C, 0.0f);
  CausalConv1dSilu(*ctx, View2(whole, 0, T, C, C), View2(x, 0, T, C, C), wv, s1.data());
  // A 2-row prefill (shorter than the kernel), a 9-row chunk, then one row at a time.
  int64_t t = 0;
  for (int64_t n : {2, 9}) {
    CausalConv1dSilu(*ctx, View2(split, t * C, n, C, C), View2(x, t * C, n, C, C), wv, s2.data());
    t += n;
  }
  for (; t < T; ++t) {
    CausalConv1dSilu(*ctx, View2(split, t * C, 1, C, C), View2(x, t * C, 1, C, C), wv, s2.data());
  }
  EXPECT_EQ(whole, split);
  EXPECT_EQ(s1, s2);
}

TEST(CausalConvTest, ZeroStateIsLeftZeroPadding) {
  // The first output sees only weight[c][K-1] * x[0][c] (HF's conv1d with padding K-1).
  auto ctx = DeviceContext::Cpu(1);
  const int64_t C = 3, K = 4;
  std::vector<float> x = {1.0f, -2.0f, 0.5f}, w(C * K), state((K - 1) * C, 0.0f), out(C);
  for (int64_t i = 0; i < C * K; ++i) w[i] = 0.1f * static_cast<float>(i + 1);
  CausalConv1dSilu(*ctx, View2(out, 0, 1, C, C), View2(x, 0, 1, C, C),
                   TensorView::Contiguous(w.data(), DType::kF32, {C, K}), state.data());
  for (int64_t c = 0; c < C; ++c) {
    const double a = w[c * K + K - 1] * x[c];
    EXPECT_NEAR(out[c], a / (1 + std::exp(-a)), 1e-6);
    EXPECT_EQ(state[(K - 2) * C + c], x[c]);  // the newest input is the last state row
    EXPECT_EQ(state[c], 0.0f);
  }
}

// ---- L2NormalizeHeads -------------------------------------------------------------------------

TEST(DeltaNetL2NormTest, MatchesReferenceOnStridedHeads) {
  std::mt19937 rng(9);
  for (int threads : kThreadCounts) {
    auto ctx = DeviceContext::Cpu(threads);
    for (auto [T, H, D] : {std::tuple{1, 1, 1}, {3, 2, 7}, {17, 5, 128}, {65, 3, 33}}) {
      const int64_t stride = H * D + 5;
      std::vector<float> x = RandomFloats(rng, T * stride, -2, 2), ref = x;
      L2NormalizeHeads(*ctx, View3(x, 0, T, H, D, stride), 1e-6f, 0.25f);
      reference::L2NormalizeHeads(View3(ref, 0, T, H, D, stride), 1e-6f, 0.25f);
      EXPECT_LT(MaxErrorOverRms(x, ref), 1e-6) << T << " " << H << " " << D;
      // The padding between token rows is untouched.
      for (int64_t t = 0; t < T; ++t) EXPECT_EQ(x[t * stride + H * D], ref[t * stride + H * D]);
    }
  }
}

TEST(DeltaNetL2NormTest, EpsIsAddedToTheSumOfSquares) {
  auto ctx = DeviceContext::Cpu(1);
  std::vector<float> x = {3.0f, 4.0f};
  L2NormalizeHeads(*ctx, View2(x, 0, 1, 2, 2), 11.0f);  // 1 / sqrt(25 + 11) = 1/6
  EXPECT_FLOAT_EQ(x[0], 0.5f);
  EXPECT_FLOAT_EQ(x[1], 4.0f / 6.0f);
}

// ---- GatedDeltaRule ---------------------------------------------------------------------------

// Random inputs of one sequence laid out like the Gated DeltaNet block's: q, k, v are column
// ranges of one [T, 2 Hk Dk + Hv Dv + pad] conv output; g, beta columns of one [T, 2 Hv + pad].
struct DeltaInputs {
  int64_t T, Hk, Hv, Dk, Dv, row, gb_row;
  std::vector<float> qkv, gb, state;

  DeltaInputs(std::mt19937& rng, int64_t t, int64_t hk, int64_t hv, int64_t dk, int64_t dv,
              float g_lo = -2.0f)
      : T(t), Hk(hk), Hv(hv), Dk(dk), Dv(dv), row(2 * hk * dk + hv * dv + 3), gb_row(2 * hv + 1) {
    qkv = RandomFloats(rng, T * row, -1, 1);
    gb.resize(T * gb_row);
    std::uniform_real_distribution<float> gd(g_lo, 0.0f), bd(0.0f, 1.0f);
    for (int64_t i = 0; i < T; ++i) {
      for (int64_t h = 0; h < Hv; ++h) {
        gb[i * gb_row + h] = gd(rng);
        gb[i * gb_row + Hv + h] = bd(rng);
      }
    }
    state = RandomFloats(rng, Hv * Dk * Dv, -0.5f, 0.5f);
    reference::L2NormalizeHeads(q(0, T), 1e-6f, 1.0f / std::sqrt(static_cast<float>(Dk)));
    reference::L2NormalizeHeads(k(0, T), 1e-6f);
  }
  TensorView q(int64_t t0, int64_t n) { return View3(qkv, t0 * row, n, Hk, Dk, row); }
  TensorView k(int64_t t0, int64_t n) { return View3(qkv, t0 * row + Hk * Dk, n, Hk, Dk, row); }
  TensorView v(int64_t t0, int64_t n) { return View3(qkv, t0 * row + 2 * Hk * Dk, n, Hv, Dv, row); }
  TensorView g(int64_t t0, int64_t n) { return View2(gb, t0 * gb_row, n, Hv, gb_row); }
  TensorView beta(int64_t t0, int64_t n) { return View2(gb, t0 * gb_row + Hv, n, Hv, gb_row); }
};

TEST(DeltaNetRuleTest, MatchesReferenceOverOddSizes) {
  std::mt19937 rng(10);
  for (int threads : kThreadCounts) {
    auto ctx = DeviceContext::Cpu(threads);
    for (auto [Hk, Hv, Dk, Dv] : {std::tuple{1, 1, 1, 1},
                                  {2, 6, 7, 9},
                                  {1, 3, 16, 16},
                                  {2, 4, 33, 40},
                                  {1, 2, 128, 128},
                                  {3, 3, 5, 17}}) {
      for (int64_t T : {1, 2, 5, 64, 65, 150}) {
        DeltaInputs in(rng, T, Hk, Hv, Dk, Dv);
        std::vector<float> state = in.state, ref_state = in.state;
        std::vector<float> out(T * Hv * Dv), ref(T * Hv * Dv);
        auto ov = [&](std::vector<float>& o) { return View3(o, 0, T, Hv, Dv, Hv * Dv); };
        GatedDeltaRule(*ctx, ov(out), in.q(0, T), in.k(0, T), in.v(0, T), in.g(0, T), in.beta(0, T),
                       state.data());
        reference::GatedDeltaRule(ov(ref), in.q(0, T), in.k(0, T), in.v(0, T), in.g(0, T),
                                  in.beta(0, T), ref_state.data());
        // f32 state and sums over Dk terms per token, against double (seen: up to 6e-6).
        EXPECT_LT(MaxErrorOverRms(out, ref), 2e-5)
            << Hk << " " << Hv << " " << Dk << " " << Dv << " T " << T << " thr " << threads;
        EXPECT_LT(MaxErrorOverRms(state, ref_state), 2e-5)
            << Hk << " " << Hv << " " << Dk << " " << Dv << " T " << T << " thr " << threads;
      }
    }
  }
}

TEST(DeltaNetRuleTest, StrongAndVanishingDecaysMatchReference) {
  // g down to -100 makes exp(g) underflow towards 0 (the state is wiped); g in [-0.2, 0] over 300
  // tokens decays by ~e^-30, taking the kernel's lazy state scale below its renormalisation
  // threshold (1e-6) a couple of times within one call.
  std::mt19937 rng(11);
  auto ctx = DeviceContext::Cpu(2);
  for (float g_lo : {-100.0f, -0.2f}) {
    const int64_t T = 300, Hk = 2, Hv = 4, Dk = 32, Dv = 48;
    DeltaInputs in(rng, T, Hk, Hv, Dk, Dv, g_lo);
    std::vector<float> state = in.state, ref_state = in.state;
    std::vector<float> out(T * Hv * Dv), ref(T * Hv * Dv);
    auto ov = [&](std::vector<float>& o) { return View3(o, 0, T, Hv, Dv, Hv * Dv); };
    GatedDeltaRule(*ctx, ov(out), in.q(0, T), in.k(0, T), in.v(0, T), in.g(0, T), in.beta(0, T),
                   state.data());
    reference::GatedDeltaRule(ov(ref), in.q(0, T), in.k(0, T), in.v(0, T), in.g(0, T),
                              in.beta(0, T), ref_state.data());
    EXPECT_LT(MaxErrorOverRms(out, ref), 2e-5) << g_lo;
    EXPECT_LT(MaxErrorOverRms(state, ref_state), 2e-5) << g_lo;
  }
}

TEST(DeltaNetRuleTest, OneCallEqualsPrefillThenSingleRowDecodes) {
  std::mt19937 rng(12);
  auto ctx = DeviceContext::Cpu(2);
  for (auto [Hk, Hv, Dk, Dv] : {std::tuple{2, 4, 32, 32}, {1, 3, 9, 21}}) {
    const int64_t T = 140;
    DeltaInputs in(rng, T, Hk, Hv, Dk, Dv);
    std::vector<float> s1 = in.state, s2 = in.state;
    std::vector<float> whole(T * Hv * Dv), split(T * Hv * Dv);
    auto ov = [&](std::vector<float>& o, int64_t t0, int64_t n) {
      return View3(o, t0 * Hv * Dv, n, Hv, Dv, Hv * Dv);
    };
    GatedDeltaRule(*ctx, ov(whole, 0, T), in.q(0, T), in.k(0, T), in.v(0, T), in.g(0, T),
                   in.beta(0, T), s1.data());
    // A 100-row prefill (two chunks), a 3-row step (the in-place path), then 1-row decodes.
    int64_t t = 0;
    for (int64_t n : {100, 3}) {
      GatedDeltaRule(*ctx, ov(split, t, n), in.q(t, n), in.k(t, n), in.v(t, n), in.g(t, n),
                     in.beta(t, n), s2.data());
      t += n;
    }
    for (; t < T; ++t) {
      GatedDeltaRule(*ctx, ov(split, t, 1), in.q(t, 1), in.k(t, 1), in.v(t, 1), in.g(t, 1),
                     in.beta(t, 1), s2.data());
    }
    // Splitting changes where the kernel renormalises its lazy scale: rounding-level differences.
    EXPECT_LT(MaxErrorOverRms(split, whole), 1e-5) << Dk << " " << Dv;
    EXPECT_LT(MaxErrorOverRms(s2, s1), 1e-5) << Dk << " " << Dv;
  }
}

TEST(DeltaNetRuleTest, SingleTokenFromZeroStateIsBetaVTimesKDotQ) {
  // S = 0: u = 0, S = beta k v^T, o = beta (k.q) v.
  auto ctx = DeviceContext::Cpu(1);
  std::vector<float> q = {0.6f, 0.8f}, k = {1.0f, 0.0f}, v = {2.0f, -1.0f, 4.0f};
  std::vector<float> g = {-0.5f}, beta = {0.25f}, state(2 * 3, 0.0f), out(3);
  GatedDeltaRule(*ctx, View3(out, 0, 1, 1, 3, 3), View3(q, 0, 1, 1, 2, 2), View3(k, 0, 1, 1, 2, 2),
                 View3(v, 0, 1, 1, 3, 3), View2(g, 0, 1, 1, 1), View2(beta, 0, 1, 1, 1),
                 state.data());
  for (int j = 0; j < 3; ++j) {
    EXPECT_FLOAT_EQ(out[j], 0.25f * 0.6f * v[j]);
    EXPECT_FLOAT_EQ(state[j], 0.25f * v[j]);  // row i = 0 (k[0] = 1)
    EXPECT_EQ(state[3 + j], 0.0f);            // row i = 1 (k[1] = 0)
  }
}

}  // namespace
}  // namespace uniprefill::ops
