// SummarizeGpuActivities: busy time is the union of the intervals (overlaps counted once), gaps
// are the idle stretches between them named by their neighbours, and each name's count, time
// and idle time before it; against a brute-force count of busy nanoseconds on random timelines.
#include "core/gpu_activity_summary.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace uniprefill {
namespace {

TEST(GpuActivitySummaryTest, NoActivitiesIsAllZero) {
  const GpuActivitySummary s = SummarizeGpuActivities({}, 3);
  EXPECT_EQ(s.activities, 0);
  EXPECT_EQ(s.span_ms, 0);
  EXPECT_EQ(s.busy_ms, 0);
  EXPECT_EQ(s.gaps, 0);
  EXPECT_TRUE(s.largest.empty());
}

TEST(GpuActivitySummaryTest, OverlapsCountOnceAndGapsNameTheirNeighbours) {
  // ns: a [0, 1000), b [500, 3000) overlapping a, c [1000, 2000) inside b, gap 3000-5000,
  // d [5000, 6000), gap 6000-6500, e [6500, 7100). Given out of order.
  const GpuActivitySummary s = SummarizeGpuActivities(
      {{6500, 7100, "e"}, {0, 1000, "a"}, {1000, 2000, "c"}, {5000, 6000, "d"},
       {500, 3000, "b"}},
      1);
  EXPECT_EQ(s.activities, 5);
  EXPECT_DOUBLE_EQ(s.span_ms, 7100e-6);
  EXPECT_DOUBLE_EQ(s.busy_ms, (3000 + 1000 + 600) * 1e-6);
  EXPECT_DOUBLE_EQ(s.gap_ms, 2500e-6);
  EXPECT_EQ(s.gaps, 2);
  ASSERT_EQ(s.largest.size(), 1u);  // only the longest asked for
  EXPECT_DOUBLE_EQ(s.largest[0].ms, 2000e-6);
  EXPECT_EQ(s.largest[0].before, "b");  // b's end, not c's, opened it
  EXPECT_EQ(s.largest[0].after, "d");
  // Per name, most time (own + idle before) first: d 1000 + 2000, b 2500, e 600 + 500, then a
  // and c (1000 each, in name order).
  ASSERT_EQ(s.by_name.size(), 5u);
  EXPECT_EQ(s.by_name[0].name, "d");
  EXPECT_DOUBLE_EQ(s.by_name[0].ms, 1000e-6);
  EXPECT_DOUBLE_EQ(s.by_name[0].idle_before_ms, 2000e-6);
  EXPECT_EQ(s.by_name[1].name, "b");
  EXPECT_DOUBLE_EQ(s.by_name[1].ms, 2500e-6);
  EXPECT_EQ(s.by_name[1].idle_before_ms, 0);
  EXPECT_EQ(s.by_name[2].name, "e");
  EXPECT_DOUBLE_EQ(s.by_name[2].idle_before_ms, 500e-6);
  EXPECT_EQ(s.by_name[3].name, "a");
  EXPECT_EQ(s.by_name[4].name, "c");
  EXPECT_EQ(s.by_name[4].count, 1);
}

TEST(GpuActivitySummaryTest, NamesSeenManyTimesAddUp) {
  // Three "gemm" (one zero-length: counted, no time), two "norm"; gaps before norm 100 and 300 ns.
  const GpuActivitySummary s = SummarizeGpuActivities(
      {{0, 1000, "gemm"}, {1100, 1200, "norm"}, {1200, 2200, "gemm"}, {2200, 2200, "gemm"},
       {2500, 2600, "norm"}},
      0);
  ASSERT_EQ(s.by_name.size(), 2u);
  EXPECT_EQ(s.by_name[0].name, "gemm");
  EXPECT_EQ(s.by_name[0].count, 3);
  EXPECT_DOUBLE_EQ(s.by_name[0].ms, 2000e-6);
  EXPECT_EQ(s.by_name[0].idle_before_ms, 0);
  EXPECT_EQ(s.by_name[1].name, "norm");
  EXPECT_EQ(s.by_name[1].count, 2);
  EXPECT_DOUBLE_EQ(s.by_name[1].ms, 200e-6);
  EXPECT_DOUBLE_EQ(s.by_name[1].idle_before_ms, 400e-6);
}

TEST(GpuActivitySummaryTest, RandomTimelinesMatchABruteForceCount) {
  std::mt19937 rng(26);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 40);
    std::vector<GpuActivity> acts;
    std::vector<bool> busy(4000, false);
    for (int i = 0; i < n; ++i) {
      const uint64_t start = rng() % 3800, len = rng() % 200;
      std::string name = "kernel ";  // (one append: GCC 12's -Wrestrict misfires on "k" + s)
      name += std::to_string(i);
      acts.push_back({start, start + len, name});
      for (uint64_t t = start; t < start + len; ++t) busy[t] = true;
    }
    // The span: over the activities that take time (zero-length ones count, take none).
    uint64_t first = UINT64_MAX, last = 0;
    for (const GpuActivity& a : acts) {
      if (a.end_ns == a.start_ns) continue;
      first = std::min(first, a.start_ns);
      last = std::max(last, a.end_ns);
    }
    if (first == UINT64_MAX) first = last = 0;
    int busy_ns = 0, gaps = 0;
    double longest = 0;
    for (uint64_t t = first; t < last; ++t) busy_ns += busy[t] ? 1 : 0;
    // A gap: a run of idle ns between first and last (zero-length activities end no gap).
    for (uint64_t t = first, run = 0; t <= last; ++t) {
      if (t < last && !busy[t]) {
        ++run;
      } else if (run > 0) {
        ++gaps;
        longest = std::max(longest, run * 1e-6);
        run = 0;
      }
    }
    const GpuActivitySummary s = SummarizeGpuActivities(acts, 3);
    SCOPED_TRACE("trial " + std::to_string(trial));
    EXPECT_EQ(s.activities, n);
    EXPECT_NEAR(s.span_ms, (last - first) * 1e-6, 1e-12);
    EXPECT_NEAR(s.busy_ms, busy_ns * 1e-6, 1e-12);
    EXPECT_NEAR(s.gap_ms, (last - first - busy_ns) * 1e-6, 1e-12);
    EXPECT_EQ(s.gaps, gaps);
    ASSERT_EQ(s.largest.size(), static_cast<size_t>(std::min(gaps, 3)));
    if (gaps > 0) {
      EXPECT_NEAR(s.largest[0].ms, longest, 1e-12);
    }
    for (size_t i = 1; i < s.largest.size(); ++i) EXPECT_GE(s.largest[i - 1].ms, s.largest[i].ms);
    // Per name (each activity its own name here): its count, its own time, and the idle time
    // before the names add up to the gaps.
    int counted = 0;
    double idle = 0, own = 0, own_expected = 0;
    for (const GpuActivityName& x : s.by_name) {
      counted += x.count;
      idle += x.idle_before_ms;
      own += x.ms;
    }
    for (const GpuActivity& a : acts) own_expected += (a.end_ns - a.start_ns) * 1e-6;
    EXPECT_EQ(counted, n);
    EXPECT_EQ(s.by_name.size(), static_cast<size_t>(n));
    EXPECT_NEAR(idle, s.gap_ms, 1e-9);
    EXPECT_NEAR(own, own_expected, 1e-9);
  }
}

TEST(GpuActivitySummaryTest, KernelNamesReadAsWritten) {
  // void uniprefill::ops::cuda::(anonymous namespace)::RmsNormKernel<128>(float const*, int)
  EXPECT_EQ(ReadableKernelName("_ZN10uniprefill3ops4cuda12_GLOBAL__N_113RmsNormKernelILi128EEEvPKfi"),
            "RmsNormKernel<128>");
  // void flash::Attention<8, true>(int), no namespace of ours
  EXPECT_EQ(ReadableKernelName("_ZN5flash9AttentionILi8ELb1EEEvi"), "flash::Attention<8, true>");
  EXPECT_EQ(ReadableKernelName("nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopA_TNT"),
            "nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopA_TNT");
  EXPECT_EQ(ReadableKernelName("[memcpy]"), "[memcpy]");
  EXPECT_EQ(ReadableKernelName(""), "");
}

}  // namespace
}  // namespace uniprefill
