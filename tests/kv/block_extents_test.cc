// BlockExtents (kv/block_extents.h): runs by best fit, single ids from the lowest, merging on
// free, refusals that change nothing, and a randomized run against a plain bitmap model.
#include "kv/block_extents.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace uniprefill {
namespace {

TEST(BlockExtentsTest, RunsComeFromTheSmallestExtentThatHoldsThem) {
  BlockExtents e(100);
  EXPECT_EQ(e.TakeRun(10), 0);  // one extent: its start
  EXPECT_EQ(e.TakeRun(5), 10);
  ASSERT_TRUE(e.Free(2, 3).ok());  // free: [2, 5) and [15, 100)
  EXPECT_EQ(e.free_count(), 3 + 85);
  EXPECT_EQ(e.longest_run(), 85);
  EXPECT_EQ(e.TakeRun(3), 2);  // fits [2, 5) exactly: the long extent stays whole
  EXPECT_EQ(e.longest_run(), 85);
  EXPECT_EQ(e.TakeRun(86), -1);  // nothing that long: nothing taken
  EXPECT_EQ(e.free_count(), 85);
  EXPECT_EQ(e.TakeRun(85), 15);
  EXPECT_EQ(e.free_count(), 0);
  EXPECT_EQ(e.TakeOne(), -1);
  EXPECT_EQ(e.TakeRun(1), -1);
}

TEST(BlockExtentsTest, SingleIdsComeFromTheLowestAndFreedIdsMerge) {
  BlockExtents e(8);
  for (int want = 0; want < 8; ++want) EXPECT_EQ(e.TakeOne(), want);
  ASSERT_TRUE(e.Free(5).ok());
  ASSERT_TRUE(e.Free(3).ok());
  EXPECT_EQ(e.longest_run(), 1);
  ASSERT_TRUE(e.Free(4).ok());  // joins 3 and 5
  EXPECT_EQ(e.longest_run(), 3);
  EXPECT_EQ(e.TakeRun(3), 3);
  ASSERT_TRUE(e.Free(3, 3).ok());
  EXPECT_EQ(e.TakeOne(), 3);
}

TEST(BlockExtentsTest, GrowingJoinsAFreeTail) {
  BlockExtents e(4);
  EXPECT_EQ(e.TakeRun(2), 0);
  e.Grow(10);
  EXPECT_EQ(e.num_blocks(), 10);
  EXPECT_EQ(e.longest_run(), 8);  // [2, 4) and the new [4, 10) in one extent
  EXPECT_EQ(e.TakeRun(8), 2);
  e.Grow(10);  // not larger: no change
  EXPECT_EQ(e.free_count(), 0);
}

TEST(BlockExtentsTest, FreeingWhatIsFreeOrOutOfRangeIsRefusedAndChangesNothing) {
  BlockExtents e(10);
  ASSERT_EQ(e.TakeRun(6), 0);  // used: [0, 6)
  EXPECT_FALSE(e.Free(6).ok());       // free already
  EXPECT_FALSE(e.Free(4, 3).ok());    // overlaps the free 6
  EXPECT_FALSE(e.Free(-1).ok());
  EXPECT_FALSE(e.Free(9, 2).ok());    // past the end
  EXPECT_FALSE(e.Free(2, 0).ok());
  EXPECT_EQ(e.free_count(), 4);
  EXPECT_EQ(e.longest_run(), 4);
  EXPECT_TRUE(e.Free(0, 6).ok());
  EXPECT_EQ(e.longest_run(), 10);
}

// Random takes and frees against a bitmap: the same free count, every run taken is free in the
// model and is the smallest fitting extent's start, every single id the lowest free.
TEST(BlockExtentsTest, RandomOperationsAgreeWithABitmap) {
  constexpr int kBlocks = 300;
  BlockExtents e(kBlocks);
  std::vector<bool> used(kBlocks, false);
  std::vector<std::pair<int, int>> held;  // (first, count)
  std::mt19937 rng(3);
  const auto extents = [&] {
    std::vector<std::pair<int, int>> out;  // (first, length) of free runs
    for (int i = 0; i < kBlocks;) {
      if (used[i]) {
        ++i;
        continue;
      }
      int j = i;
      while (j < kBlocks && !used[j]) ++j;
      out.push_back({i, j - i});
      i = j;
    }
    return out;
  };
  for (int step = 0; step < 4000; ++step) {
    const int op = static_cast<int>(rng() % 3);
    if (op == 0 || held.empty()) {
      const int count = 1 + static_cast<int>(rng() % 24);
      int want = -1, best = kBlocks + 1;
      for (const auto& [first, length] : extents()) {
        if (length >= count && length < best) best = length, want = first;
      }
      const int got = e.TakeRun(count);
      ASSERT_EQ(got, want) << "step " << step;
      if (got >= 0) {
        for (int i = got; i < got + count; ++i) used[i] = true;
        held.push_back({got, count});
      }
    } else if (op == 1) {
      const int want = static_cast<int>(std::find(used.begin(), used.end(), false) - used.begin());
      const int got = e.TakeOne();
      ASSERT_EQ(got, want == kBlocks ? -1 : want) << "step " << step;
      if (got >= 0) {
        used[got] = true;
        held.push_back({got, 1});
      }
    } else {
      const size_t k = rng() % held.size();
      const auto [first, count] = held[k];
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
      ASSERT_TRUE(e.Free(first, count).ok()) << "step " << step;
      for (int i = first; i < first + count; ++i) used[i] = false;
    }
    ASSERT_EQ(e.free_count(), static_cast<int>(std::count(used.begin(), used.end(), false)));
    int longest = 0;
    for (const auto& x : extents()) longest = std::max(longest, x.second);
    ASSERT_EQ(e.longest_run(), longest) << "step " << step;
  }
}

}  // namespace
}  // namespace uniprefill
