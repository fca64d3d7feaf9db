// PlanKeySplits / ModelledSplitLaunch (src/ops/attention_split_plan.h): the modelled launch time
// against closed forms where every CTA does the same work, the fill rule a single request uses
// (CudaBackend::WgmmaSplitsFor) on the 130K prompt's served chunks, and the mixed-depth launch
// the rule got wrong on the H200.
#include "ops/attention_split_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

namespace uniprefill::ops {
namespace {

SplitPlanShape H200Shape() {
  SplitPlanShape s;
  s.heads = 32;
  s.sms = 132;
  s.max_splits = 16;
  return s;
}

// The fill rule of a single request (cuda_backend_split_kv.cc): the fewest splits whose last wave
// fills at least 90% of the SMs, else the best fill.
int FillRule(int q_rows, int heads, int sms, int most) {
  const int64_t tiles = int64_t{(q_rows + 127) / 128} * heads;
  const auto fill = [&](int s) {
    const int64_t ctas = tiles * s, waves = (ctas + sms - 1) / sms;
    return static_cast<double>(ctas) / static_cast<double>(waves * sms);
  };
  int best = 1;
  for (int s = 2; s <= most && fill(best) < 0.9; ++s) {
    if (fill(s) > fill(best)) best = s;
  }
  return best;
}

TEST(AttentionSplitPlanTest, EqualCtasTakeWholeWaves) {
  // Chunks of one query tile over no prefix of their own... a prefix of 128 x T keys: every CTA of
  // one split walks T + 1 key tiles (the prefix's and its own diagonal one).
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    SplitPlanShape s;
    s.heads = 1 + static_cast<int>(rng() % 40);
    s.sms = 1 + static_cast<int>(rng() % 140);
    s.cta_overhead = static_cast<double>(rng() % 4);
    const int requests = 1 + static_cast<int>(rng() % 4);
    const int64_t t = 1 + rng() % 300;
    std::vector<SplitPlanChunk> chunks(requests, SplitPlanChunk{128, 128 * t + 128});
    const int64_t ctas = int64_t{requests} * s.heads;
    const int64_t waves = (ctas + s.sms - 1) / s.sms;
    EXPECT_DOUBLE_EQ(ModelledSplitLaunch(chunks, s, 1),
                     static_cast<double>(waves) * (static_cast<double>(t + 1) + s.cta_overhead))
        << "heads " << s.heads << " sms " << s.sms << " requests " << requests << " t " << t;
  }
}

TEST(AttentionSplitPlanTest, SplitsShareEachCtasTilesWithoutLosingAny) {
  // With one SM, the launch is the sum of all CTAs' work: every split count walks the same tiles,
  // plus an overhead per CTA.
  SplitPlanShape s;
  s.heads = 3;
  s.sms = 1;
  s.cta_overhead = 0.5;
  s.merge_steps_per_byte = 0;
  s.merge_launch = 0;
  const std::vector<SplitPlanChunk> chunks = {{300, 5000}, {77, 77}, {129, 1500}};
  double tiles = 0;
  int ctas = 0;
  for (const SplitPlanChunk& c : chunks) {
    for (int64_t q0 = 0; q0 < c.q_rows; q0 += 128) {
      const int64_t seen = std::min<int64_t>(c.keys - c.q_rows + q0 + 128, c.keys);
      tiles += static_cast<double>((seen + 127) / 128) * s.heads;
      ctas += s.heads;
    }
  }
  for (int splits = 1; splits <= 8; ++splits) {
    EXPECT_DOUBLE_EQ(ModelledSplitLaunch(chunks, s, splits), tiles + splits * ctas * 0.5)
        << splits << " splits";
  }
}

TEST(AttentionSplitPlanTest, OneDeepChunkAgreesWithTheFillRule) {
  // The dense 130K prompt's served chunks (23rd session's trace) and a few more: where one request
  // is alone, the model and the rule it would replace pick the same count.
  const SplitPlanShape s = H200Shape();
  for (const auto& [rows, prefix] : std::vector<std::pair<int, int>>{
           {256, 103808}, {384, 80256}, {512, 60160}, {1024, 16384}, {128, 100000}}) {
    const int planned = PlanKeySplits({{rows, int64_t{prefix} + rows}}, s);
    std::printf("c%d@%d: planned %d splits, fill rule %d\n", rows, prefix, planned,
                FillRule(rows, s.heads, s.sms, s.max_splits));
    EXPECT_EQ(planned, FillRule(rows, s.heads, s.sms, s.max_splits)) << rows << " rows";
  }
}

TEST(AttentionSplitPlanTest, ChunksOfDifferentDepthsInOneLaunchSplitTheDeepOne) {
  // c768@16384 + c256@2048 in one launch: 256 CTAs fill 97% of two waves unsplit, so the fill rule
  // keeps one split; the 192 deep CTAs then take two whole waves. The model splits them.
  const SplitPlanShape s = H200Shape();
  const std::vector<SplitPlanChunk> mix = {{768, 16384 + 768}, {256, 2048 + 256}};
  const int planned = PlanKeySplits(mix, s);
  const double one = ModelledSplitLaunch(mix, s, 1), best = ModelledSplitLaunch(mix, s, planned);
  std::printf("c768@16384 + c256@2048: %d splits, modelled %.0f steps against %.0f unsplit\n",
              planned, best, one);
  EXPECT_EQ(FillRule(768 + 256, s.heads, s.sms, s.max_splits), 1);
  EXPECT_GT(planned, 1);
  EXPECT_LT(best, 0.85 * one);
  // The deep chunk alone, as a launch of its own splits it: the launch of both should not be
  // modelled slower than the deep one alone plus the shallow one alone.
  const double deep = ModelledSplitLaunch({mix[0]}, s, PlanKeySplits({mix[0]}, s));
  const double shallow = ModelledSplitLaunch({mix[1]}, s, PlanKeySplits({mix[1]}, s));
  EXPECT_LE(best, deep + shallow);
}

TEST(AttentionSplitPlanTest, TheMeasuredTwoPromptMixesSplitTheirDeepChunk) {
  // The three two-prompt mixes `bench step` timed in one launch on the H200 (23rd session; the
  // fill rule gave each one split): a chunk over 16K keys beside one over 2K. The 960-row one's
  // 240 deep CTAs fill no whole number of waves at any split count (11 splits: 20 waves of ~12
  // steps plus the overheads): it stays unsplit, as its launch measured no better or worse
  // (44.99 ms against 45.15 a launch each).
  const SplitPlanShape s = H200Shape();
  for (const auto& [deep, shallow] : std::vector<std::pair<int, int>>{{896, 128}, {960, 64},
                                                                       {768, 256}}) {
    const std::vector<SplitPlanChunk> mix = {{deep, 16384 + deep}, {shallow, 2048 + shallow}};
    const int planned = PlanKeySplits(mix, s);
    std::printf("c%d@16384 + c%d@2048: fill rule %d, planned %d, modelled %.0f -> %.0f steps\n",
                deep, shallow, FillRule(deep + shallow, s.heads, s.sms, s.max_splits), planned,
                ModelledSplitLaunch(mix, s, 1), ModelledSplitLaunch(mix, s, planned));
    if (deep == 960) {
      EXPECT_EQ(planned, 1);
    } else {
      EXPECT_GT(planned, 1);
    }
  }
}

TEST(AttentionSplitPlanTest, FullWavesOfEqualCtasStayUnsplit) {
  SplitPlanShape s = H200Shape();
  s.heads = 132;  // one wave of one query tile each
  EXPECT_EQ(PlanKeySplits({{128, 50000}}, s), 1);
  EXPECT_EQ(PlanKeySplits({}, s), 1);
}

}  // namespace
}  // namespace uniprefill::ops
