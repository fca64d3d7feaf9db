// ops::GemmTuneBucket / GemmTuneBuckets / PickGemmCandidate (ops/gemm_tune_plan.h): the rows a
// GEMM tuner times and the algorithm it keeps.
#include "ops/gemm_tune_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace uniprefill::ops {
namespace {

TEST(GemmTunePlanTest, RowsTakeTheirBucketsTopUpToTheLimit) {
  const GemmTuneRows tune{64, 2000};
  EXPECT_EQ(GemmTuneBucket(1, tune), 64);
  EXPECT_EQ(GemmTuneBucket(64, tune), 64);
  EXPECT_EQ(GemmTuneBucket(65, tune), 128);
  EXPECT_EQ(GemmTuneBucket(1990, tune), 2048);  // within the limit: the bucket past it is timed
  EXPECT_EQ(GemmTuneBucket(2000, tune), 2048);
  EXPECT_EQ(GemmTuneBucket(2001, tune), 0);     // a whole prefill keeps the heuristic's choice
  EXPECT_EQ(GemmTuneBucket(0, tune), 0);
  EXPECT_EQ(GemmTuneBucket(-3, tune), 0);
  EXPECT_EQ(GemmTuneBucket(10, GemmTuneRows{0, 2000}), 0);
  EXPECT_EQ(GemmTuneBucket(10, GemmTuneRows{64, 0}), 0);
}

TEST(GemmTunePlanTest, BucketsCoverEveryRowCountTheLimitAllows) {
  const std::vector<int64_t> want = {64, 128, 192};
  EXPECT_EQ(GemmTuneBuckets(GemmTuneRows{64, 192}), want);
  EXPECT_EQ(GemmTuneBuckets(GemmTuneRows{64, 130}), want);
  EXPECT_TRUE(GemmTuneBuckets(GemmTuneRows{64, 0}).empty());
  EXPECT_TRUE(GemmTuneBuckets(GemmTuneRows{0, 100}).empty());
  // Randomized: every row count within the limit maps to a listed bucket, the smallest one that
  // holds it.
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const GemmTuneRows tune{std::uniform_int_distribution<int64_t>(1, 300)(rng),
                            std::uniform_int_distribution<int64_t>(1, 5000)(rng)};
    const std::vector<int64_t> buckets = GemmTuneBuckets(tune);
    ASSERT_FALSE(buckets.empty());
    const int64_t rows = std::uniform_int_distribution<int64_t>(1, tune.max_rows)(rng);
    const int64_t b = GemmTuneBucket(rows, tune);
    ASSERT_GE(b, rows);
    ASSERT_LT(b - rows, tune.step);
    ASSERT_NE(std::find(buckets.begin(), buckets.end(), b), buckets.end());
    EXPECT_EQ(buckets.back(), GemmTuneBucket(tune.max_rows, tune));
  }
}

TEST(GemmTunePlanTest, TheFastestWinsOnlyByMoreThanTheMargin) {
  EXPECT_EQ(PickGemmCandidate({1.00, 0.90, 0.95}, 0.02), 1);
  EXPECT_EQ(PickGemmCandidate({1.00, 0.99, 1.20}, 0.02), 0);  // 1% is noise
  EXPECT_EQ(PickGemmCandidate({1.00, 0.97}, 0.02), 1);
  EXPECT_EQ(PickGemmCandidate({0.80, 0.90}, 0.0), 0);
  EXPECT_EQ(PickGemmCandidate({1.00}, 0.02), 0);
  EXPECT_EQ(PickGemmCandidate({}, 0.02), 0);
}

TEST(GemmTunePlanTest, FailedTimingsNeverWin) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(PickGemmCandidate({1.0, 0.0, 0.9}, 0.02), 2);
  EXPECT_EQ(PickGemmCandidate({1.0, -1.0, nan, inf}, 0.02), 0);
  EXPECT_EQ(PickGemmCandidate({nan, 0.5}, 0.02), 1);  // the first failed: any usable one
  EXPECT_EQ(PickGemmCandidate({nan, nan}, 0.02), 0);
}

}  // namespace
}  // namespace uniprefill::ops
