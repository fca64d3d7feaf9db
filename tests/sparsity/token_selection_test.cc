#include "sparsity/token_selection.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <tuple>

#include "testing/selection_reference.h"

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

// An independent, literal transcription of docs/design.md section 1, steps 4-7.
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

SelectionParams FixedRatio(int G, int S, int n, float ratio) {
  SelectionParams sp = Params(G, S, n, 0.99f);
  sp.mode = SelectionMode::kFixedRatio;
  sp.keep_ratio = ratio;
  return sp;
}

// The engine's kept blocks, ascending (SelectBlocks returns them in rank order).
std::vector<int64_t> SortedBlocks(const std::vector<double>& scores, const SelectionParams& p) {
  std::vector<int64_t> kept = SelectBlocks(scores, p);
  std::sort(kept.begin(), kept.end());
  return kept;
}

std::string Describe(const SelectionParams& p, size_t n_tokens) {
  return "N " + std::to_string(n_tokens) + " G " + std::to_string(p.block_size) + " S " +
         std::to_string(p.sink) + " n " + std::to_string(p.last_n) +
         (p.mode == SelectionMode::kTopP ? " top-p " + std::to_string(p.top_p)
                                         : " ratio " + std::to_string(p.keep_ratio));
}

// Random selection parameters: small blocks (so many of them), N often just above S + n (the
// smallest selecting prefill) or at/below it (keep everything), and p / ratio often values exact
// in binary so that boundaries are hit.
SelectionParams RandomParams(std::mt19937& rng, int* n_tokens) {
  const int G = rng() % 4 == 0 ? 1 + static_cast<int>(rng() % 70) : 1 + static_cast<int>(rng() % 9);
  const int S = static_cast<int>(rng() % 20), n = 1 + static_cast<int>(rng() % 20);
  switch (rng() % 4) {
    case 0: *n_tokens = S + n + 1 + static_cast<int>(rng() % 3); break;
    case 1: *n_tokens = std::max(1, S + n - static_cast<int>(rng() % 3)); break;
    default: *n_tokens = 1 + static_cast<int>(rng() % 400); break;
  }
  const float exact[] = {0.125f, 0.25f, 0.5f, 0.75f, 0.875f, 1.0f};
  const float value = rng() % 2 == 0 ? exact[rng() % 6]
                                     : std::uniform_real_distribution<float>(0.01f, 1.0f)(rng);
  if (rng() % 2 == 0) return Params(G, S, n, value);
  const float ratios[] = {0.1f, 0.3f, 0.5f, 0.7f, 0.75f, 1.0f};
  return FixedRatio(G, S, n, rng() % 2 == 0 ? ratios[rng() % 6] : value);
}

TEST(TokenSelectionTest, MatchesIndependentReferenceOnRandomSkewedImportance) {
  std::mt19937 rng(11);
  std::exponential_distribution<float> heavy(1.0f);
  for (int trial = 0; trial < 2000; ++trial) {
    int N = 0;
    const SelectionParams p = RandomParams(rng, &N);
    std::vector<float> a(N);
    for (float& x : a) x = std::pow(heavy(rng), 4.0f);  // skewed, like attention mass
    ASSERT_EQ(SelectTokens(a, p), testing::ReferenceKeptTokens(a, p)) << Describe(p, a.size());
  }
}

TEST(TokenSelectionTest, MatchesIndependentReferenceWithTiedBlockScores) {
  // Integer importances in 0..2: many equal block scores, and exact cumulative masses that land
  // on p exactly.
  std::mt19937 rng(12);
  for (int trial = 0; trial < 3000; ++trial) {
    int N = 0;
    const SelectionParams p = RandomParams(rng, &N);
    std::vector<float> a(N);
    for (float& x : a) x = static_cast<float>(rng() % 3);
    if (trial % 50 == 0) std::fill(a.begin(), a.end(), 0.0f);  // no mass at all
    ASSERT_EQ(SelectTokens(a, p), testing::ReferenceKeptTokens(a, p)) << Describe(p, a.size());
    const std::vector<double> b = BlockScores(a, p.block_size);
    ASSERT_EQ(SortedBlocks(b, p), testing::ReferenceKeptBlocks(b, p)) << Describe(p, a.size());
  }
}

TEST(TokenSelectionTest, ImportanceMatchesIndependentReference) {
  std::mt19937 rng(13);
  std::normal_distribution<float> nd;
  for (int trial = 0; trial < 60; ++trial) {
    const int Hkv = 1 + static_cast<int>(rng() % 3), Hq = Hkv * (1 + static_cast<int>(rng() % 3));
    const int D = 1 + static_cast<int>(rng() % 16), N = 1 + static_cast<int>(rng() % 60);
    const int last_n = 1 + static_cast<int>(rng() % 70);  // sometimes more than N
    const float scale = std::uniform_real_distribution<float>(0.1f, 1.5f)(rng);
    std::vector<float> q(size_t(N) * Hq * D), k(size_t(N) * Hkv * D);
    for (float& x : q) x = nd(rng);
    for (float& x : k) x = nd(rng);
    std::vector<int32_t> pos(N);
    for (int i = 0; i < N; ++i) pos[i] = (i ? pos[i - 1] : 7) + 1 + static_cast<int>(rng() % 3);
    const std::vector<float> got =
        TokenImportanceReference(q.data(), k.data(), pos.data(), N, Hq, Hkv, D, last_n, scale);
    const std::vector<double> want = testing::ReferenceTokenImportance(
        q.data(), k.data(), pos.data(), N, Hq, Hkv, D, last_n, scale);
    ASSERT_EQ(got.size(), want.size());
    for (int i = 0; i < N; ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-5 * (1.0 + want[i]))
          << "token " << i << " N " << N << " Hq " << Hq << " Hkv " << Hkv << " n " << last_n;
    }
  }
}

TEST(TokenSelectionTest, TopPKeepsTheBlockWhoseMassBeforeIsExactlyP) {
  // Normalised masses 0.5, 0.25, 0.125, 0.125 (exact in binary), ranked 1, 3, 0, 2. With p = 0.75
  // the mass before block 0 is exactly 0.75 <= p: kept; before block 2 it is 0.875 > p.
  const std::vector<double> s = {1, 4, 1, 2};  // total 8
  EXPECT_EQ(SortedBlocks(s, Params(1, 0, 1, 0.75f)), (std::vector<int64_t>{0, 1, 3}));
  EXPECT_EQ(testing::ReferenceKeptBlocks(s, Params(1, 0, 1, 0.75f)),
            (std::vector<int64_t>{0, 1, 3}));
  // p = 0.5: the mass before block 3 is exactly 0.5: kept; before block 0 it is 0.75 > p.
  EXPECT_EQ(SortedBlocks(s, Params(1, 0, 1, 0.5f)), (std::vector<int64_t>{1, 3}));
  // p = 0.25: the mass before block 3 is already 0.5 > p: only the top block.
  EXPECT_EQ(SortedBlocks(s, Params(1, 0, 1, 0.25f)), (std::vector<int64_t>{1}));
}

TEST(TokenSelectionTest, TopPBoundaryAtTokenLevel) {
  // G 2, S 1, n 1, 10 tokens = 5 blocks with masses 1/8, 2/8, 0, 4/8, 1/8 (block 4 is the window
  // block). p = 0.75: blocks 3, 1 and then block 0 (mass before exactly 0.75, and it ties with
  // block 4, so the lower index wins); token 8 is not kept, token 9 is by the window.
  const std::vector<float> a = {0.5f, 0.5f, 1, 1, 0, 0, 2, 2, 0.5f, 0.5f};
  const SelectionParams p = Params(2, 1, 1, 0.75f);
  const std::vector<int32_t> want = {0, 1, 2, 3, 6, 7, 9};
  EXPECT_EQ(SelectTokens(a, p), want);
  EXPECT_EQ(testing::ReferenceKeptTokens(a, p), want);
}

TEST(TokenSelectionTest, FixedRatioFloorsTheBlockCount) {
  // Rounding would give 4 of 7 at 0.5 and 7 of 9 at 0.75.
  for (auto [n_blocks, ratio, want] : {std::tuple{7, 0.5f, 3u}, {9, 0.75f, 6u}, {10, 0.3f, 3u},
                                       {5, 0.5f, 2u}, {3, 0.9f, 2u}}) {
    std::vector<double> s(n_blocks);
    for (int g = 0; g < n_blocks; ++g) s[g] = (g * 37) % 101;  // distinct, shuffled
    const SelectionParams p = FixedRatio(1, 0, 1, ratio);
    EXPECT_EQ(SelectBlocks(s, p).size(), want) << n_blocks << " blocks at " << ratio;
    EXPECT_EQ(SortedBlocks(s, p), testing::ReferenceKeptBlocks(s, p));
  }
}

TEST(TokenSelectionTest, FixedRatioCountsAtFloatPrecision) {
  // 0.7f is 0.69999998...; times 10 it is 7 in float (the engine's product), 6.9999998 in double.
  const std::vector<double> s = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
  const SelectionParams p = FixedRatio(1, 0, 1, 0.7f);
  EXPECT_EQ(SelectBlocks(s, p).size(), 7u);
  EXPECT_EQ(testing::ReferenceKeptBlocks(s, p).size(), 7u);
}

TEST(TokenSelectionTest, FixedRatioKeepsAtLeastOneBlock) {
  const std::vector<double> s = {1, 3, 2};
  const SelectionParams p = FixedRatio(1, 0, 1, 0.25f);  // 0.75 blocks
  EXPECT_EQ(SortedBlocks(s, p), (std::vector<int64_t>{1}));
  EXPECT_EQ(testing::ReferenceKeptBlocks(s, p), (std::vector<int64_t>{1}));
}

TEST(TokenSelectionTest, FixedRatioAtTokenLevelKeepsFloorOfBlocks) {
  // 14 tokens, G 2 = 7 blocks, ratio 0.5: blocks 6, 3, 1 (3 blocks, not 4) plus sink and window.
  std::vector<float> a(14, 0.0f);
  for (auto [token, mass] : {std::pair{13, 9.0f}, {6, 8.0f}, {2, 7.0f}, {10, 6.0f}}) a[token] = mass;
  const SelectionParams p = FixedRatio(2, 1, 1, 0.5f);
  const std::vector<int32_t> want = {0, 2, 3, 6, 7, 12, 13};
  EXPECT_EQ(SelectTokens(a, p), want);
  EXPECT_EQ(testing::ReferenceKeptTokens(a, p), want);
}

TEST(TokenSelectionTest, SinkAndWindowOverlapChosenBlocksAndTheShortLastBlock) {
  // 23 tokens, G 5: blocks of 5 and a short last block 20..22. S 3 lies inside block 0 and the
  // window n 2 inside block 4. Masses: block 4 has 4/7, block 0 has 3/7.
  std::vector<float> a(23, 0.0f);
  a[21] = 4.0f;
  a[1] = 3.0f;
  // p 0.5: block 4 only (the mass before block 0 is 4/7 > p), plus the sink.
  EXPECT_EQ(SelectTokens(a, Params(5, 3, 2, 0.5f)),
            (std::vector<int32_t>{0, 1, 2, 20, 21, 22}));
  // p 0.6: block 0 too; the sink inside it and the window inside block 4 add nothing twice.
  EXPECT_EQ(SelectTokens(a, Params(5, 3, 2, 0.6f)),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 20, 21, 22}));
  for (float p : {0.5f, 0.6f}) {
    EXPECT_EQ(SelectTokens(a, Params(5, 3, 2, p)),
              testing::ReferenceKeptTokens(a, Params(5, 3, 2, p)));
  }
}

TEST(TokenSelectionTest, EqualBlockScoresGoToTheLowerIndex) {
  const std::vector<double> s(6, 1.0);
  // Fixed ratio 0.5 of 6 equal blocks: the first three.
  EXPECT_EQ(SortedBlocks(s, FixedRatio(1, 0, 1, 0.5f)), (std::vector<int64_t>{0, 1, 2}));
  // Top-p 0.25 over masses 1/6 each: blocks 0 and 1 (0.1666 <= p), then 0.333 > p stops.
  EXPECT_EQ(SortedBlocks(s, Params(1, 0, 1, 0.25f)), (std::vector<int64_t>{0, 1}));
  const std::vector<double> t = {1, 2, 1, 2};
  EXPECT_EQ(SortedBlocks(t, FixedRatio(1, 0, 1, 0.75f)), (std::vector<int64_t>{0, 1, 3}));
  EXPECT_EQ(testing::ReferenceKeptBlocks(t, FixedRatio(1, 0, 1, 0.75f)),
            (std::vector<int64_t>{0, 1, 3}));
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
