// ops::AttentionImportance (the UniPrefill scorer) against the scalar TokenImportanceReference, and
// the full selection built on it against selection from the reference scores: GQA, a partial last
// block, N just above S + n, and a long N.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "ops/ops.h"
#include "sparsity/token_selection.h"

namespace uniprefill {
namespace {

struct Case {
  int n_tokens, n_heads, n_kv_heads, head_dim, last_n;
};

class ImportanceTest : public ::testing::TestWithParam<Case> {};

TEST_P(ImportanceTest, MatchesScalarReferenceAndSelectsTheSameTokens) {
  const Case c = GetParam();
  std::mt19937 rng(c.n_tokens * 7 + c.n_heads);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(size_t(c.n_tokens) * c.n_heads * c.head_dim),
      k(size_t(c.n_tokens) * c.n_kv_heads * c.head_dim);
  for (float& x : q) x = normal(rng);
  for (float& x : k) x = normal(rng);
  std::vector<int32_t> pos(c.n_tokens);
  for (int i = 0; i < c.n_tokens; ++i) pos[i] = i;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const std::vector<float> want = sparsity::TokenImportanceReference(
      q.data(), k.data(), pos.data(), c.n_tokens, c.n_heads, c.n_kv_heads, c.head_dim, c.last_n,
      scale);

  const int n_obs = std::min(c.last_n, c.n_tokens);
  for (int threads : {1, 2}) {
    auto ctx = DeviceContext::Cpu(threads);
    std::vector<float> got(c.n_tokens, 0.0f);
    TensorView qv = TensorView::Contiguous(
        q.data() + size_t(c.n_tokens - n_obs) * c.n_heads * c.head_dim, DType::kF32,
        {n_obs, c.n_heads, c.head_dim});
    TensorView kv =
        TensorView::Contiguous(k.data(), DType::kF32, {c.n_tokens, c.n_kv_heads, c.head_dim});
    ops::AttentionImportance(*ctx, got.data(), qv, kv, pos.data() + c.n_tokens - n_obs,
                             pos.data(), scale);
    double total = 0;
    for (int i = 0; i < c.n_tokens; ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-4f * std::max(1.0f, want[i])) << "token " << i;
      total += got[i];
    }
    // Each (query, head) distributes probability 1.
    EXPECT_NEAR(total, double(n_obs) * c.n_heads, 1e-3 * n_obs * c.n_heads);
    for (auto mode : {sparsity::SelectionMode::kTopP, sparsity::SelectionMode::kFixedRatio}) {
      sparsity::SelectionParams p;
      p.mode = mode;
      p.top_p = 0.9f;
      p.keep_ratio = 0.3f;
      EXPECT_EQ(sparsity::SelectTokens(got, p), sparsity::SelectTokens(want, p));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ImportanceTest,
    ::testing::Values(Case{1, 2, 1, 8, 128},        // a single token
                      Case{257, 4, 2, 16, 128},     // N just above S + n (GQA)
                      Case{300, 8, 2, 32, 128},     // partial last block (300 = 4 * 64 + 44)
                      Case{1000, 3, 3, 24, 77},     // odd sizes, MHA, odd window
                      Case{6000, 4, 1, 64, 128}));  // long N, MQA

}  // namespace
}  // namespace uniprefill
