#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace uniprefill {
namespace {

TEST(SamplerTest, GreedyPicksTheLargestLogitLowestIdOnTies) {
  Sampler s(SamplerConfig{0.0f, 40, 0.95f, 1});
  std::vector<float> logits = {0.1f, 3.0f, -1.0f, 3.0f};
  EXPECT_EQ(s.Sample(logits), 1);
}

TEST(SamplerTest, SameSeedSameDraws) {
  std::vector<float> logits = {1.0f, 1.1f, 0.9f, 1.05f, 0.2f};
  Sampler a(SamplerConfig{1.0f, 0, 1.0f, 42}), b(SamplerConfig{1.0f, 0, 1.0f, 42});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(a.Sample(logits), b.Sample(logits));
}

TEST(SamplerTest, TopKOneIsGreedy) {
  std::vector<float> logits = {0.0f, 0.5f, 2.0f, 1.0f};
  Sampler s(SamplerConfig{5.0f, 1, 1.0f, 3});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s.Sample(logits), 2);
}

TEST(SamplerTest, TopPKeepsOnlyTheNucleus) {
  // Probabilities ~ {0.64, 0.24, 0.09, 0.03}: top_p 0.8 keeps ids 0 and 1 only.
  std::vector<float> logits = {3.0f, 2.0f, 1.0f, 0.0f};
  Sampler s(SamplerConfig{1.0f, 0, 0.8f, 9});
  std::map<int, int> seen;
  for (int i = 0; i < 2000; ++i) seen[s.Sample(logits)]++;
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[1], 0);
  EXPECT_EQ(seen.count(2), 0u);
  EXPECT_EQ(seen.count(3), 0u);
}

TEST(SamplerTest, TemperatureSamplesFollowTheSoftmax) {
  std::vector<float> logits = {0.0f, std::log(3.0f)};  // p = 0.25, 0.75
  Sampler s(SamplerConfig{1.0f, 0, 1.0f, 5});
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ones += s.Sample(logits);
  EXPECT_NEAR(ones / double(n), 0.75, 0.02);
}

}  // namespace
}  // namespace uniprefill
