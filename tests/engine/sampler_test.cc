#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace uniprefill {
namespace {

SamplerConfig Config(float temperature, int top_k, float top_p, uint64_t seed) {
  return SamplerConfig{temperature, top_k, top_p, seed};
}

// Logits whose softmax at temperature 1 is exactly `probs`.
std::vector<float> LogitsOf(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

std::map<int32_t, double> AsMap(const std::vector<TokenProb>& d) {
  std::map<int32_t, double> m;
  for (const TokenProb& t : d) m[t.id] = t.prob;
  return m;
}

// Draws n tokens and checks that only `expected` ids appear, with a loose chi-square bound on the
// counts (the seed is fixed, so this is deterministic; the bound only guards the sampler's math).
void ExpectDrawsFollow(Sampler& s, const std::vector<float>& logits,
                       const std::map<int32_t, double>& expected, int n = 20000) {
  std::map<int32_t, int> seen;
  for (int i = 0; i < n; ++i) seen[s.Sample(logits)]++;
  double chi2 = 0;
  for (const auto& [id, count] : seen) {
    ASSERT_TRUE(expected.count(id)) << "token " << id << " is outside the kept set";
  }
  for (const auto& [id, p] : expected) {
    const double e = p * n;
    const double d = seen[id] - e;
    chi2 += d * d / e;
  }
  // The 99.99% quantile of chi-square with <= 5 degrees of freedom is below 26.
  EXPECT_LT(chi2, 26.0);
}

TEST(SamplerTest, GreedyPicksTheLargestLogitLowestIdOnTies) {
  Sampler s(Config(0.0f, 40, 0.95f, 1));
  std::vector<float> logits = {0.1f, 3.0f, -1.0f, 3.0f};
  EXPECT_EQ(s.Sample(logits), 1);
  EXPECT_EQ(ArgMax(logits), 1);
}

// The vectorised ArgMax against std::max_element: every length's vector body and tail, the
// maximum anywhere, ties, -0 / +0, infinities, and NaNs (the scalar search's answer).
TEST(SamplerTest, ArgMaxIsTheFirstLargestElementAsMaxElementFindsIt) {
  std::mt19937 rng(2222);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int n = 1; n <= 40; ++n) {
    for (int trial = 0; trial < 30; ++trial) {
      std::vector<float> x(n);
      for (float& v : x) v = u(rng);
      const int a = static_cast<int>(rng() % n), b = static_cast<int>(rng() % n);
      switch (trial % 6) {
        case 1: x[a] = x[b] = 9.0f; break;                     // a tie
        case 2: x.assign(n, -inf); break;                      // nothing above -inf
        case 3: x.assign(n, 0.0f), x[a] = -0.0f; break;        // -0 == +0
        case 4: x[a] = nan; break;                             // NaN: the scalar answer
        case 5: x[a] = inf, x[b] = inf; break;
        default: break;
      }
      const auto want = static_cast<int32_t>(std::max_element(x.begin(), x.end()) - x.begin());
      EXPECT_EQ(ArgMax(x), want) << "n " << n << " trial " << trial;
    }
  }
}

TEST(SamplerTest, GreedyIsTheArgMaxAfterPenalties) {
  SamplerConfig c = Config(0.0f, 0, 1.0f, 1);
  c.presence_penalty = 0.5f;
  Sampler s(c);
  std::vector<float> logits = {2.0f, 1.9f, 0.0f};
  EXPECT_EQ(s.Sample(logits), 0);
  s.Accept(0);
  EXPECT_EQ(s.Sample(logits), 1);  // 2.0 - 0.5 < 1.9
}

TEST(SamplerTest, TopKOneIsGreedyAtAnyTemperature) {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(257);
  for (float& l : logits) l = normal(gen);
  logits[200] = logits[100] = 20.0f;  // a tie at the top: the lower id wins
  for (float t : {0.01f, 0.7f, 1.0f, 2.0f, 100.0f}) {
    Sampler s(Config(t, 1, 1.0f, 3));
    for (int i = 0; i < 50; ++i) ASSERT_EQ(s.Sample(logits), 100) << "temperature " << t;
  }
}

TEST(SamplerTest, TopKKeepsTheKLargest) {
  Sampler s(Config(1.0f, 2, 1.0f, 3));
  const auto d = AsMap(s.Distribution(LogitsOf({0.1, 0.4, 0.2, 0.3})));
  ASSERT_EQ(d.size(), 2u);
  EXPECT_NEAR(d.at(1), 0.4 / 0.7, 1e-6);
  EXPECT_NEAR(d.at(3), 0.3 / 0.7, 1e-6);
}

TEST(SamplerTest, TopPKeepsTheSmallestSetReachingP) {
  // Descending: id 1 (0.5), 3 (0.2), 4 (0.15) reach 0.85 >= 0.8; ids 0 and 2 are cut.
  const std::vector<float> logits = LogitsOf({0.1, 0.5, 0.05, 0.2, 0.15});
  Sampler s(Config(1.0f, 0, 0.8f, 9));
  const std::map<int32_t, double> expected = {{1, 0.5 / 0.85}, {3, 0.2 / 0.85}, {4, 0.15 / 0.85}};
  const auto d = AsMap(s.Distribution(logits));
  ASSERT_EQ(d.size(), 3u);
  for (const auto& [id, p] : expected) EXPECT_NEAR(d.at(id), p, 1e-6) << id;
  ExpectDrawsFollow(s, logits, expected);
}

TEST(SamplerTest, TopPKeepsOnlyTheNucleus) {
  // Probabilities ~ {0.64, 0.24, 0.09, 0.03}: top_p 0.8 keeps ids 0 and 1 only.
  std::vector<float> logits = {3.0f, 2.0f, 1.0f, 0.0f};
  Sampler s(Config(1.0f, 0, 0.8f, 9));
  std::map<int, int> seen;
  for (int i = 0; i < 2000; ++i) seen[s.Sample(logits)]++;
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[1], 0);
  EXPECT_EQ(seen.count(2), 0u);
  EXPECT_EQ(seen.count(3), 0u);
}

TEST(SamplerTest, TopPChoosesTheSetBeforeTemperatureReshapesIt) {
  // At temperature 2 the set is still {1, 3, 4} (top-p looks at temperature 1), and inside it the
  // probabilities are proportional to p^(1/2). Applying the temperature first would keep 4 tokens.
  const std::vector<float> logits = LogitsOf({0.1, 0.5, 0.05, 0.2, 0.15});
  Sampler s(Config(2.0f, 0, 0.8f, 9));
  const double z = std::sqrt(0.5) + std::sqrt(0.2) + std::sqrt(0.15);
  const std::map<int32_t, double> expected = {
      {1, std::sqrt(0.5) / z}, {3, std::sqrt(0.2) / z}, {4, std::sqrt(0.15) / z}};
  const auto d = AsMap(s.Distribution(logits));
  ASSERT_EQ(d.size(), 3u);
  for (const auto& [id, p] : expected) EXPECT_NEAR(d.at(id), p, 1e-6) << id;
  ExpectDrawsFollow(s, logits, expected);
}

TEST(SamplerTest, MinPExcludesTokensBelowMinPTimesTheMax) {
  // p_max = 0.4, min_p = 0.3: threshold 0.12 keeps ids 0 (0.4), 1 (0.3), 2 (0.15).
  const std::vector<float> logits = LogitsOf({0.4, 0.3, 0.15, 0.1, 0.05});
  SamplerConfig c = Config(1.0f, 0, 1.0f, 11);
  c.min_p = 0.3f;
  Sampler s(c);
  const std::map<int32_t, double> expected = {{0, 0.4 / 0.85}, {1, 0.3 / 0.85}, {2, 0.15 / 0.85}};
  const auto d = AsMap(s.Distribution(logits));
  ASSERT_EQ(d.size(), 3u);
  for (const auto& [id, p] : expected) EXPECT_NEAR(d.at(id), p, 1e-6) << id;
  ExpectDrawsFollow(s, logits, expected);
}

TEST(SamplerTest, MinPOneKeepsOnlyTheMax) {
  SamplerConfig c = Config(1.5f, 0, 1.0f, 11);
  c.min_p = 1.0f;
  Sampler s(c);
  const auto d = s.Distribution(std::vector<float>{0.5f, 2.0f, 1.99f});
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].id, 1);
}

TEST(SamplerTest, FiltersApplyInOrderTopKThenTopPThenMinP) {
  // top-k 3 keeps {0.4, 0.3, 0.2} (renormalised 0.444, 0.333, 0.222); top-p 0.7 then keeps the
  // first two (0.778); min-p 0.8 of 0.4/0.7 leaves only id 0 -- min-p after the others.
  const std::vector<float> logits = LogitsOf({0.4, 0.3, 0.2, 0.1});
  SamplerConfig c = Config(1.0f, 3, 0.7f, 1);
  EXPECT_EQ(Sampler(c).Distribution(logits).size(), 2u);
  c.min_p = 0.8f;
  const auto d = Sampler(c).Distribution(logits);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].id, 0);
}

TEST(SamplerTest, TemperatureSamplesFollowTheSoftmax) {
  std::vector<float> logits = {0.0f, std::log(3.0f)};  // p = 0.25, 0.75
  Sampler s(Config(1.0f, 0, 1.0f, 5));
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ones += s.Sample(logits);
  EXPECT_NEAR(ones / double(n), 0.75, 0.02);
}

TEST(SamplerTest, TemperatureDividesTheLogits) {
  const std::vector<float> logits = {0.0f, 1.0f, 3.0f};
  Sampler s(Config(0.5f, 0, 1.0f, 5));
  const double z = 1 + std::exp(2.0) + std::exp(6.0);
  const auto d = AsMap(s.Distribution(logits));
  EXPECT_NEAR(d.at(0), 1 / z, 1e-9);
  EXPECT_NEAR(d.at(1), std::exp(2.0) / z, 1e-9);
  EXPECT_NEAR(d.at(2), std::exp(6.0) / z, 1e-9);
}

TEST(SamplerTest, TemperatureTowardsZeroBecomesGreedy) {
  const std::vector<float> logits = {1.0f, 1.01f, 0.5f, -3.0f};
  for (float t : {1e-3f, 1e-4f, 1e-6f}) {
    Sampler s(Config(t, 0, 1.0f, 5));
    const auto d = AsMap(s.Distribution(logits));
    EXPECT_GT(d.at(1), 1.0 - 1e-4) << "temperature " << t;
    for (int i = 0; i < 200; ++i) ASSERT_EQ(s.Sample(logits), 1) << "temperature " << t;
  }
}

TEST(SamplerTest, DistributionSumsToOne) {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(0.37 * i) * 4;
  SamplerConfig c = Config(0.8f, 200, 0.9f, 5);
  c.min_p = 0.01f;
  double total = 0;
  for (const TokenProb& t : Sampler(c).Distribution(logits)) total += t.prob;
  EXPECT_NEAR(total, 1.0, 1e-9);
}

TEST(SamplerTest, NanAndMinusInfinityLogitsAreNeverDrawn) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {std::nanf(""), 0.0f, -inf, 0.5f};
  Sampler s(Config(1.0f, 0, 1.0f, 5));
  for (int i = 0; i < 500; ++i) {
    const int32_t t = s.Sample(logits);
    ASSERT_TRUE(t == 1 || t == 3) << t;
  }
}

TEST(SamplerTest, EmptyLogitsGiveMinusOne) {
  Sampler s(Config(1.0f, 0, 1.0f, 5));
  EXPECT_EQ(s.Sample({}), -1);
  EXPECT_TRUE(s.Distribution({}).empty());
}

std::vector<int32_t> Draws(uint64_t seed, int n) {
  const std::vector<float> logits = {1.0f, 1.1f, 0.9f, 1.05f, 0.2f};
  Sampler s(Config(1.0f, 0, 1.0f, seed));
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(s.Sample(logits));
  return out;
}

TEST(SamplerTest, SameSeedSameDraws) {
  EXPECT_EQ(Draws(42, 200), Draws(42, 200));
  EXPECT_EQ(Draws(0, 200), Draws(0, 200));  // 0 is an ordinary seed, not "random"
}

TEST(SamplerTest, DifferentSeedsDifferentDraws) {
  EXPECT_NE(Draws(1, 100), Draws(2, 100));
  EXPECT_NE(Draws(0, 100), Draws(42, 100));
}

TEST(SamplerTest, SeededDrawsAreFixedAcrossPlatforms) {
  // mt19937_64 and our inverse-CDF draw are fully specified: these ids hold on every platform.
  // Changing the draw changes every seeded run users have recorded; update only on purpose.
  EXPECT_EQ(Draws(42, 16), (std::vector<int32_t>{3, 2, 3, 0, 4, 0, 2, 1, 1, 1, 0, 2, 3, 2, 3, 4}));
}

// --- penalties ---

TEST(SamplerTest, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  SamplerConfig c;
  c.repetition_penalty = 2.0f;
  Sampler s(c);
  s.SetPrompt(std::vector<int32_t>{0, 1, 0, 4});  // id 0 twice: still penalised once
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, 0.0f};
  s.ApplyPenalties(logits);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -2.0f, 0.5f, 3.0f, 0.0f}));
}

TEST(SamplerTest, RepetitionPenaltyCoversPromptAndGeneratedTokensInTheLastN) {
  SamplerConfig c;
  c.repetition_penalty = 2.0f;
  c.penalty_last_n = 2;
  Sampler s(c);
  s.SetPrompt(std::vector<int32_t>{0, 1, 2});  // window {1, 2}
  s.Accept(3);                                 // window {2, 3}
  std::vector<float> logits = {4.0f, 4.0f, 4.0f, 4.0f};
  s.ApplyPenalties(logits);
  EXPECT_EQ(logits, (std::vector<float>{4.0f, 4.0f, 2.0f, 2.0f}));
}

TEST(SamplerTest, PenaltyLastNZeroIsNoWindowAndMinusOneIsEverything) {
  SamplerConfig c;
  c.repetition_penalty = 2.0f;
  c.penalty_last_n = 0;
  Sampler none(c);
  none.SetPrompt(std::vector<int32_t>{0});
  none.Accept(1);
  std::vector<float> logits = {4.0f, 4.0f, 4.0f};
  none.ApplyPenalties(logits);
  EXPECT_EQ(logits, (std::vector<float>{4.0f, 4.0f, 4.0f}));

  c.penalty_last_n = -1;
  Sampler all(c);
  all.SetPrompt(std::vector<int32_t>(1000, 1));
  all.SetPrompt(std::vector<int32_t>{0});  // a new prompt forgets the old one
  for (int i = 0; i < 500; ++i) all.Accept(2);
  logits = {4.0f, 4.0f, 4.0f};
  all.ApplyPenalties(logits);
  EXPECT_EQ(logits, (std::vector<float>{2.0f, 4.0f, 2.0f}));
}

TEST(SamplerTest, PresenceAndFrequencyPenaltiesCountGeneratedTokensOnly) {
  SamplerConfig c;
  c.presence_penalty = 0.5f;
  c.frequency_penalty = 0.25f;
  Sampler s(c);
  s.SetPrompt(std::vector<int32_t>{3, 3, 3});  // the prompt does not count
  s.Accept(0);
  s.Accept(0);
  s.Accept(1);
  std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  s.ApplyPenalties(logits);
  // id 0: 1 - 0.5 - 2 * 0.25; id 1: 1 - 0.5 - 0.25.
  EXPECT_EQ(logits, (std::vector<float>{0.0f, 0.25f, 1.0f, 1.0f}));
}

TEST(SamplerTest, NegativePresencePenaltyEncouragesRepeats) {
  SamplerConfig c;
  c.presence_penalty = -1.5f;
  Sampler s(c);
  s.Accept(1);
  s.Accept(1);
  std::vector<float> logits = {0.0f, 0.0f};
  s.ApplyPenalties(logits);
  EXPECT_EQ(logits, (std::vector<float>{0.0f, 1.5f}));
}

TEST(SamplerTest, RepetitionPenaltyComesBeforePresenceAndFrequency) {
  SamplerConfig c;
  c.repetition_penalty = 2.0f;
  c.presence_penalty = 0.5f;
  Sampler s(c);
  s.Accept(0);
  std::vector<float> logits = {2.0f};
  s.ApplyPenalties(logits);
  EXPECT_EQ(logits[0], 0.5f);  // 2 / 2 - 0.5, not (2 - 0.5) / 2
}

TEST(SamplerTest, PenaltiesIgnoreIdsOutsideTheLogits) {
  SamplerConfig c;
  c.repetition_penalty = 2.0f;
  c.frequency_penalty = 1.0f;
  Sampler s(c);
  s.Accept(100);
  s.Accept(-5);
  std::vector<float> logits = {1.0f, 1.0f};
  s.ApplyPenalties(logits);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, 1.0f}));
}

TEST(SamplerTest, SampleAppliesPenaltiesBeforeFiltering) {
  // Token 0 dominates until a frequency penalty of 2 per use pushes it out of top-k 1.
  SamplerConfig c = Config(1.0f, 1, 1.0f, 1);
  c.frequency_penalty = 2.0f;
  Sampler s(c);
  const std::vector<float> logits = {3.0f, 1.5f, 0.0f};
  EXPECT_EQ(s.Sample(logits), 0);
  s.Accept(0);
  EXPECT_EQ(s.Sample(logits), 1);
}

// --- validation ---

TEST(SamplerTest, DefaultAndBoundaryConfigsAreValid) {
  EXPECT_TRUE(ValidateSamplerConfig(SamplerConfig{}).ok());
  SamplerConfig c = Config(2.0f, -1, 1.0f, 0);
  c.min_p = 1.0f;
  c.presence_penalty = -2.0f;
  c.frequency_penalty = 2.0f;
  c.repetition_penalty = 0.01f;
  c.penalty_last_n = -1;
  EXPECT_TRUE(ValidateSamplerConfig(c).ok());
}

TEST(SamplerTest, ValidationNamesTheFieldAndTheValue) {
  struct Case {
    std::function<void(SamplerConfig&)> set;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](SamplerConfig& c) { c.temperature = 2.5f; },
       "temperature must be in [0, 2] (0 = greedy), got 2.5"},
      {[](SamplerConfig& c) { c.temperature = -0.1f; },
       "temperature must be in [0, 2] (0 = greedy), got -0.1"},
      {[](SamplerConfig& c) { c.temperature = std::nanf(""); },
       "temperature must be in [0, 2] (0 = greedy), got nan"},
      {[](SamplerConfig& c) { c.top_p = 0.0f; }, "top_p must be in (0, 1] (1 = off), got 0"},
      {[](SamplerConfig& c) { c.top_p = 1.5f; }, "top_p must be in (0, 1] (1 = off), got 1.5"},
      {[](SamplerConfig& c) { c.min_p = -0.5f; }, "min_p must be in [0, 1] (0 = off), got -0.5"},
      {[](SamplerConfig& c) { c.top_k = -2; }, "top_k must be >= 0 (0 or -1 = off), got -2"},
      {[](SamplerConfig& c) { c.presence_penalty = 2.5f; },
       "presence_penalty must be in [-2, 2] (0 = off), got 2.5"},
      {[](SamplerConfig& c) { c.frequency_penalty = -3.0f; },
       "frequency_penalty must be in [-2, 2] (0 = off), got -3"},
      {[](SamplerConfig& c) { c.repetition_penalty = 0.0f; },
       "repetition_penalty must be a finite number > 0 (1 = off), got 0"},
      {[](SamplerConfig& c) { c.penalty_last_n = -2; },
       "penalty_last_n must be >= -1 (0 = no window, -1 = all tokens), got -2"},
  };
  for (const Case& k : cases) {
    SamplerConfig c;
    k.set(c);
    const Status st = ValidateSamplerConfig(c);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << k.message;
    EXPECT_EQ(st.message(), k.message);
  }
}

}  // namespace
}  // namespace uniprefill
