#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
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

TEST(ThreadPoolTest, DynamicChunksCoverEveryIndexExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {1, 2, 5, 64, 100, 1001}) {
    for (int64_t chunk : {1, 7, 32, 5000}) {
      std::vector<std::atomic<int>> hits(n);
      std::atomic<int> calls{0};
      pool.ParallelForDynamic(n, chunk, [&](int64_t b, int64_t e, int t) {
        ASSERT_EQ(b % chunk, 0) << "chunks start at multiples of the chunk length";
        ASSERT_LE(e - b, chunk);
        ASSERT_GE(t, 0);
        ASSERT_LT(t, 3);
        for (int64_t i = b; i < e; ++i) hits[i]++;
        calls++;
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
      EXPECT_EQ(calls.load(), (n + chunk - 1) / chunk) << "n=" << n << " chunk=" << chunk;
    }
  }
}

// The point of dynamic chunks: a slowed thread gets fewer of them. Thread 0 (the caller) sleeps
// in its first chunk; the others take what is left meanwhile.
TEST(ThreadPoolTest, DynamicChunksGoToTheFreeThreads) {
  ThreadPool pool(2);
  std::vector<std::atomic<int>> by_thread(2);
  std::atomic<bool> slept{false};
  pool.ParallelForDynamic(64, 1, [&](int64_t, int64_t, int t) {
    if (t == 0 && !slept.exchange(true)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    by_thread[t]++;
  });
  EXPECT_EQ(by_thread[0] + by_thread[1], 64);
  EXPECT_GT(by_thread[1].load(), 32) << "the free thread took more than a static half";
}

TEST(ThreadPoolTest, DynamicLoopNestedInAStaticOneRunsInline) {
  ThreadPool pool(2);
  std::atomic<int> total{0};
  pool.ParallelFor(4, 1, [&](int64_t, int64_t, int) {
    pool.ParallelForDynamic(10, 3, [&](int64_t b, int64_t e, int t) {
      EXPECT_EQ(b, 0);
      EXPECT_EQ(e, 10);
      (void)t;
      total += int(e - b);
    });
  });
  EXPECT_EQ(total.load(), 20);
}

}  // namespace
}  // namespace uniprefill
