#include "sparsity/token_selection.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>

namespace uniprefill::sparsity {
namespace {

SelectionParams Params(int G, int S, int n, float p) {
  SelectionParams sp;
  sp.block_size = G;
  sp.sink = S;
  sp.last_n = n;
  sp.top_p = p;
  return sp;
}

TEST(TokenSelectionTest, BlockScoresSumBlocksAndTheLastBlockMayBeShort) {
  const std::vector<float> a = {1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(BlockScores(a, 3), (std::vector<double>{6, 15, 7}));
}

TEST(TokenSelectionTest, TopPKeepsTheBlockThatCrossesP) {
  // Normalised scores 0.5, 0.3, 0.15, 0.05. p = 0.7: keep 0 (before 0), 1 (before 0.5),
  // then the mass before block 2 is 0.8 > 0.7: stop. p = 0.8: block 2 too (0.8 <= 0.8).
  const std::vector<double> s = {0.15, 0.5, 0.05, 0.3};
  std::vector<int64_t> kept = SelectBlocks(s, Params(1, 0, 1, 0.7f));
  EXPECT_EQ(kept, (std::vector<int64_t>{1, 3}));
  kept = SelectBlocks(s, Params(1, 0, 1, 0.81f));
  EXPECT_EQ(kept, (std::vector<int64_t>{1, 3, 0}));
}

TEST(TokenSelectionTest, TopBlockIsAlwaysKept) {
  const std::vector<double> s = {0.01, 0.97, 0.02};
  EXPECT_EQ(SelectBlocks(s, Params(1, 0, 1, 0.001f)), (std::vector<int64_t>{1}));
}

TEST(TokenSelectionTest, FixedRatioKeepsTheHighestBlocks) {
  SelectionParams p = Params(4, 0, 1, 0.99f);
  p.mode = SelectionMode::kFixedRatio;
  p.keep_ratio = 0.5f;
  const std::vector<double> s = {5, 1, 4, 2, 3, 0};
  std::vector<int64_t> kept = SelectBlocks(s, p);
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(kept, (std::vector<int64_t>{0, 2, 4}));
  p.keep_ratio = 0.01f;  // at least one block
  EXPECT_EQ(SelectBlocks(s, p), (std::vector<int64_t>{0}));
}

TEST(TokenSelectionTest, SinkAndLastNAreAlwaysKeptAndOrderIsAscending) {
  // 40 tokens, G 4, S 4, n 4; all mass on tokens 20..23 -> block 5 only, plus sink and window.
  std::vector<float> a(40, 0.0f);
  for (int i = 20; i < 24; ++i) a[i] = 1.0f;
  const std::vector<int32_t> kept = SelectTokens(a, Params(4, 4, 4, 0.5f));
  EXPECT_EQ(kept, (std::vector<int32_t>{0, 1, 2, 3, 20, 21, 22, 23, 36, 37, 38, 39}));
}

TEST(TokenSelectionTest, ShortPrefillsAndPOneKeepEverything) {
  std::vector<float> a(10, 0.0f);
  a[3] = 1.0f;
  EXPECT_EQ(SelectTokens(a, Params(2, 4, 6, 0.1f)).size(), 10u);  // N <= S + n
  std::vector<float> b(100, 0.0f);
  b[50] = 1.0f;
  EXPECT_EQ(SelectTokens(b, Params(4, 4, 4, 1.0f)).size(), 100u);  // p = 1
}

// An independent, literal transcription of DESIGN.md steps 4-7.
std::vector<int32_t> Literal(const std::vector<float>& a, int G, int S, int n, double p) {
  const int N = static_cast<int>(a.size());
  if (N <= S + n || p >= 1.0) {
    std::vector<int32_t> all(N);
    std::iota(all.begin(), all.end(), 0);
    return all;
  }
  const int nb = (N + G - 1) / G;
  std::vector<double> b(nb, 0.0);
  for (int i = 0; i < N; ++i) b[i / G] += a[i];
  double total = 0;
  for (double x : b) total += x;
  std::vector<std::pair<double, int>> sorted;
  for (int g = 0; g < nb; ++g) sorted.push_back({-b[g] / total, g});
  std::sort(sorted.begin(), sorted.end());
  std::set<int> kept;
  double cum = 0;
  for (size_t r = 0; r < sorted.size(); ++r) {
    if (r > 0 && cum > p) break;
    const int g = sorted[r].second;
    for (int i = g * G; i < std::min(N, (g + 1) * G); ++i) kept.insert(i);
    cum += -sorted[r].first;
  }
  for (int i = 0; i < S; ++i) kept.insert(i);
  for (int i = N - n; i < N; ++i) kept.insert(i);
  return std::vector<int32_t>(kept.begin(), kept.end());
}

TEST(TokenSelectionTest, MatchesALiteralReferenceOnRandomInputs) {
  std::mt19937 rng(5);
  std::exponential_distribution<float> heavy(1.0f);
  for (int trial = 0; trial < 300; ++trial) {
    const int N = 1 + static_cast<int>(rng() % 700);
    const int G = 1 + static_cast<int>(rng() % 70);
    const int S = static_cast<int>(rng() % 50), n = 1 + static_cast<int>(rng() % 50);
    const float p = std::uniform_real_distribution<float>(0.05f, 1.0f)(rng);
    std::vector<float> a(N);
    for (float& x : a) x = std::pow(heavy(rng), 4.0f);  // skewed, like attention mass
    ASSERT_EQ(SelectTokens(a, Params(G, S, n, p)), Literal(a, G, S, n, p))
        << "N " << N << " G " << G << " S " << S << " n " << n << " p " << p;
  }
}

TEST(TokenSelectionTest, ImportanceSumsToQueriesTimesHeads) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  const int N = 37, Hq = 4, Hkv = 2, D = 8, n = 5;
  std::vector<float> q(N * Hq * D), k(N * Hkv * D);
  for (float& x : q) x = nd(rng);
  for (float& x : k) x = nd(rng);
  std::vector<int32_t> pos(N);
  std::iota(pos.begin(), pos.end(), 100);
  const std::vector<float> a =
      TokenImportanceReference(q.data(), k.data(), pos.data(), N, Hq, Hkv, D, n, 0.35f);
  EXPECT_NEAR(std::accumulate(a.begin(), a.end(), 0.0), double(n * Hq), 1e-4);
  for (float x : a) EXPECT_GE(x, 0.0f);
}

TEST(TokenSelectionTest, ImportanceIsUniformForIdenticalKeysAndCausal) {
  // One head, keys all equal: query j spreads mass 1/(j+1) over keys 0..j.
  const int N = 4, D = 2;
  std::vector<float> q(N * D, 1.0f), k(N * D, 1.0f);
  std::vector<int32_t> pos = {0, 1, 2, 3};
  const std::vector<float> a =
      TokenImportanceReference(q.data(), k.data(), pos.data(), N, 1, 1, D, 2, 1.0f);
  // Queries 2 and 3: keys 0..2 get 1/3 + 1/4, key 3 gets 1/4.
  EXPECT_NEAR(a[0], 1.0f / 3 + 0.25f, 1e-6);
  EXPECT_NEAR(a[2], 1.0f / 3 + 0.25f, 1e-6);
  EXPECT_NEAR(a[3], 0.25f, 1e-6);
}

TEST(TokenSelectionTest, ValidationNamesTheBadValue) {
  SelectionParams p;
  p.top_p = 1.5f;
  EXPECT_NE(ValidateSelectionParams(p).message().find("p must be in (0, 1]"), std::string::npos);
  p = SelectionParams();
  p.block_size = 0;
  EXPECT_NE(ValidateSelectionParams(p).message().find("block size"), std::string::npos);
  EXPECT_TRUE(ValidateSelectionParams(SelectionParams()).ok());
}

}  // namespace
}  // namespace uniprefill::sparsity
