// BatchEngine::CalibrateStepBudget and its arithmetic (StepBudgetFromTimings): serve's CPU step
// budget from the machine's measured pace. The arithmetic is checked on exact numbers; the
// calibration on the tiny Gemma 3, by what it must hold whatever the machine's speed (no timed
// assertions: the budget it picks is the arithmetic's on the times it measured).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>

#include "testing/tiny_gemma3.h"
#include "uniprefill/batch_engine.h"
#include "uniprefill/engine.h"

namespace uniprefill {
namespace {

TEST(StepBudgetFromTimingsTest, TheBudgetWhoseStepTakesTheTargetOnTheLineThroughBothForwards) {
  // 32 rows in 50 ms, 160 in 150 ms: 0.78125 ms a row after 25 ms; 485 / 0.78125 = 620.8 rows,
  // 608 as a multiple of 16. (Targets are chosen so that no result lies on a multiple of 16.)
  EXPECT_EQ(StepBudgetFromTimings(32, 0.050, 160, 0.150, 0.51, 8192), 608);
  // Rounded down to a multiple of 16: 2 ms a row after 10 ms, (0.5 - 0.01) / 0.002 = 245 -> 240.
  EXPECT_EQ(StepBudgetFromTimings(32, 0.074, 64, 0.138, 0.5, 8192), 240);
  // A target twice as long, about twice the rows (the fixed part counted once): 1260.8.
  EXPECT_EQ(StepBudgetFromTimings(32, 0.050, 160, 0.150, 1.01, 8192), 1248);
}

TEST(StepBudgetFromTimingsTest, HeldWithinThirtyTwoAndTheCap) {
  EXPECT_EQ(StepBudgetFromTimings(32, 0.050, 160, 0.150, 0.5, 256), 256);  // the cap
  EXPECT_EQ(StepBudgetFromTimings(32, 0.001, 64, 0.002, 10.0, 8192), 8192);
  // A fixed part longer than the target: the smallest budget, never 0 or negative.
  EXPECT_EQ(StepBudgetFromTimings(32, 0.900, 64, 1.000, 0.5, 8192), 32);
  EXPECT_EQ(StepBudgetFromTimings(32, 5.0, 64, 10.0, 0.5, 8192), 32);
  EXPECT_EQ(StepBudgetFromTimings(32, 0.05, 64, 0.1, 0.5, 16), 32);  // a cap below 32 reads 32
}

TEST(StepBudgetFromTimingsTest, NoiseAndOnePointReadAsTheLargerForwardsTimePerRow) {
  // The larger forward faster than the small one: 100 ms / 128 rows, no fixed part: 652.8.
  EXPECT_EQ(StepBudgetFromTimings(32, 0.120, 128, 0.100, 0.51, 8192), 640);
  // A line starting below 0 s (32 rows in 10 ms, 128 in 110 ms: -23 ms fixed) is read the same
  // way: 110 ms / 128 rows -> 581 -> 576.
  EXPECT_EQ(StepBudgetFromTimings(32, 0.010, 128, 0.110, 0.5, 8192), 576);
  // One point (the calibration's first guess): 32 rows in 40 ms -> 408 rows -> 400.
  EXPECT_EQ(StepBudgetFromTimings(32, 0.040, 32, 0.040, 0.51, 8192), 400);
}

TEST(AttentionSlowdownFromTimingsTest, TheExcessOverTheAttentionsFlopsAtTheLinearRate) {
  // 0.3 s over the line for attention worth 100 rows at 1 ms a row: 3x.
  EXPECT_DOUBLE_EQ(AttentionSlowdownFromTimings(0.3, 100, 0.001), 3.0);
  EXPECT_DOUBLE_EQ(AttentionSlowdownFromTimings(0.075, 100, 0.001), 0.75);
  // Held within [0.5, 8]: noise (the deep forwards no slower than the line) and disturbance.
  EXPECT_DOUBLE_EQ(AttentionSlowdownFromTimings(-0.01, 100, 0.001), 0.5);
  EXPECT_DOUBLE_EQ(AttentionSlowdownFromTimings(0.01, 100, 0.001), 0.5);
  EXPECT_DOUBLE_EQ(AttentionSlowdownFromTimings(5.0, 100, 0.001), 8.0);
  // Nothing measured: by FLOPs.
  EXPECT_DOUBLE_EQ(AttentionSlowdownFromTimings(0.3, 0, 0.001), 1.0);
  EXPECT_DOUBLE_EQ(AttentionSlowdownFromTimings(0.3, 100, 0), 1.0);
  EXPECT_DOUBLE_EQ(AttentionSlowdownFromTimings(0.3, -5, 0.001), 1.0);
}

std::unique_ptr<Engine> LoadTiny(int context = 512) {
  EngineOptions o;
  o.model_path =
      testing::WriteTempFile("step_budget_calibration_tiny.gguf", testing::BuildTinyGemma3());
  o.threads = 1;
  o.context_size = context;
  auto engine = Engine::Load(o);
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  return engine.ok() ? std::move(*engine) : nullptr;
}

TEST(CalibrateStepBudgetTest, PicksTheArithmeticsBudgetOnTheTimesItMeasured) {
  std::unique_ptr<Engine> engine = LoadTiny();
  ASSERT_NE(engine, nullptr);
  for (double target : {0.002, 0.5}) {
    SCOPED_TRACE(target);
    auto c = BatchEngine::CalibrateStepBudget(*engine, target, 8192);
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_EQ(c->small_rows, 32);
    EXPECT_GT(c->small_s, 0);
    EXPECT_GE(c->large_rows, c->small_rows);
    EXPECT_LT(c->large_rows, 512);  // fresh caches of the forward's rows, within the context
    if (c->large_rows > c->small_rows) {
      EXPECT_GE(c->large_rows, 2 * c->small_rows);
      EXPECT_GT(c->large_s, 0);
    } else {
      EXPECT_EQ(c->large_s, c->small_s);  // the small forward took a good part of the target
    }
    EXPECT_EQ(c->max_batched_tokens, StepBudgetFromTimings(c->small_rows, c->small_s, c->large_rows,
                                                           c->large_s, target, 8192));
    EXPECT_GE(c->max_batched_tokens, 32);
    EXPECT_LE(c->max_batched_tokens, 8192);
    EXPECT_EQ(c->max_batched_tokens % 16, 0);
    EXPECT_GE(c->seconds, c->small_s);
    if (c->max_batched_tokens > 32 && c->max_batched_tokens < 8192) {
      EXPECT_NEAR(c->predicted_step_s, target, target / 4);  // rounding down costs < 16 rows
    }
  }
  // A cap: never more.
  auto capped = BatchEngine::CalibrateStepBudget(*engine, 60.0, 96);
  ASSERT_TRUE(capped.ok()) << capped.status().message();
  EXPECT_LE(capped->max_batched_tokens, 96);
  EXPECT_GE(capped->max_batched_tokens, 32);
}

// The attention's price: two forwards over a cached prefix about four target steps deep (a
// multiple of 16, at least their rows, at most 4096, within the context beside them), their
// slowdown within its bounds; no room in the context or not asked for: not measured, 1.
TEST(CalibrateStepBudgetTest, PricesTheAttentionOverACachedPrefixWhereTheContextHasRoom) {
  std::unique_ptr<Engine> engine = LoadTiny(2048);  // the tiny model's trained context
  ASSERT_NE(engine, nullptr);
  for (double target : {0.05, 0.5}) {  // a prefix of >= 32 rows even on a loaded machine
    SCOPED_TRACE(target);
    auto c = BatchEngine::CalibrateStepBudget(*engine, target, 8192);
    ASSERT_TRUE(c.ok()) << c.status().message();
    ASSERT_GT(c->deep_prefix, 0);
    EXPECT_EQ(c->deep_prefix % 16, 0);
    EXPECT_GE(c->deep_rows, 16);
    EXPECT_LE(c->deep_rows, std::min(c->large_rows, 2047 / 4));
    EXPECT_GE(c->deep_prefix, c->deep_rows);
    EXPECT_LE(c->deep_prefix + 2 * c->deep_rows, 2047);
    EXPECT_LE(c->deep_prefix, 4096);
    EXPECT_GT(c->deep_s, 0);
    EXPECT_GE(c->attention_slowdown, 0.5);
    EXPECT_LE(c->attention_slowdown, 8.0);
    EXPECT_GE(c->seconds, c->small_s + c->deep_s);
    // The line through the two timed sizes (where it rises from a fixed part of at least 0)...
    if (c->large_rows > c->small_rows && c->large_s > c->small_s) {
      const double slope = (c->large_s - c->small_s) / (c->large_rows - c->small_rows);
      if (c->small_s - slope * c->small_rows >= 0) {
        EXPECT_NEAR(c->line_s_per_row, slope, 1e-12);
        EXPECT_NEAR(c->line_fixed_s, c->small_s - slope * c->small_rows, 1e-12);
      }
    }
    // ... less two of its forwards of the deep rows is the attention's time, over its FLOPs
    // (in rows of the linear layers' FLOPs) at the line's rate.
    EXPECT_NEAR(c->deep_excess_s,
                c->deep_s - 2 * (c->line_fixed_s + c->line_s_per_row * c->deep_rows), 1e-12);
    EXPECT_GT(c->attention_rows, 0);
    EXPECT_DOUBLE_EQ(c->attention_slowdown,
                     AttentionSlowdownFromTimings(c->deep_excess_s, c->attention_rows,
                                                  c->line_s_per_row));
  }
  auto budget_only = BatchEngine::CalibrateStepBudget(*engine, 0.5, 8192, false);
  ASSERT_TRUE(budget_only.ok()) << budget_only.status().message();
  EXPECT_EQ(budget_only->deep_prefix, 0);
  EXPECT_EQ(budget_only->deep_s, 0);
  EXPECT_EQ(budget_only->attention_slowdown, 1.0);
  // A context of 40: a quarter of it (9 rows) is too few forwards' rows to time.
  std::unique_ptr<Engine> small = LoadTiny(40);
  ASSERT_NE(small, nullptr);
  auto no_room = BatchEngine::CalibrateStepBudget(*small, 0.5, 8192);
  ASSERT_TRUE(no_room.ok()) << no_room.status().message();
  EXPECT_EQ(no_room->deep_prefix, 0);
  EXPECT_EQ(no_room->attention_slowdown, 1.0);
}

TEST(CalibrateStepBudgetTest, BadTargetsAndCapsAreClearErrors) {
  std::unique_ptr<Engine> engine = LoadTiny();
  ASSERT_NE(engine, nullptr);
  for (double target : {0.0, -1.0, 61.0}) {
    auto c = BatchEngine::CalibrateStepBudget(*engine, target, 8192);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find("step time target"), std::string::npos)
        << c.status().message();
  }
  auto c = BatchEngine::CalibrateStepBudget(*engine, 0.5, 16);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("at least 32"), std::string::npos) << c.status().message();
}

}  // namespace
}  // namespace uniprefill
