#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace uniprefill {
namespace {

TEST(ThreadPoolTest, CoversEveryIndexExactlyOnce) {
  ThreadPool pool(4);
  for (int64_t n : {1, 2, 3, 7, 100, 1001}) {
    std::vector<std::atomic<int>> hits(n);
    pool.ParallelFor(n, 1, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPoolTest, UsesSeveralThreadsForLargeLoops) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> by_thread(3);
  pool.ParallelFor(300, 1, [&](int64_t, int64_t, int t) { by_thread[t]++; });
  EXPECT_EQ(by_thread[0] + by_thread[1] + by_thread[2], 3);
}

TEST(ThreadPoolTest, NestedLoopRunsInline) {
  ThreadPool pool(2);
  std::atomic<int> total{0};
  pool.ParallelFor(4, 1, [&](int64_t b, int64_t e, int) {
    pool.ParallelFor(10, 1, [&](int64_t b2, int64_t e2, int) { total += int(e2 - b2); });
    (void)b; (void)e;
  });
  EXPECT_EQ(total.load(), 20);
}

TEST(ThreadPoolTest, ManyBackToBackLoops) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int it = 0; it < 2000; ++it) {
    pool.ParallelFor(8, 1, [&](int64_t b, int64_t e, int) { sum += e - b; });
  }
  EXPECT_EQ(sum.load(), 16000);
}

}  // namespace
}  // namespace uniprefill
