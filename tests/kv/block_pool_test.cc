#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace uniprefill {
namespace {

std::vector<int> AllocateN(BlockPool& pool, int n) {
  std::vector<int> ids;
  for (int i = 0; i < n; ++i) ids.push_back(pool.Allocate().value());
  return ids;
}

TEST(BlockPoolTest, FreshPoolHandsOutIdsInAscendingOrder) {
  BlockPool pool(4);
  EXPECT_EQ(AllocateN(pool, 4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(pool.free_count(), 0);
  EXPECT_EQ(pool.used_count(), 4);
}

TEST(BlockPoolTest, ExhaustedPoolReturnsNothing) {
  BlockPool pool(2);
  AllocateN(pool, 2);
  EXPECT_EQ(pool.Allocate(), std::nullopt);
  EXPECT_EQ(pool.used_count(), 2);
}

TEST(BlockPoolTest, FreeListIsLifo) {
  // Table: the ids freed, in order -> the ids the next allocations return.
  struct Case {
    std::vector<int> freed;
    std::vector<int> next;
  };
  const std::vector<Case> cases = {
      {{2}, {2, 5}},           // the freed block first, then the untouched tail
      {{1, 3}, {3, 1, 5}},     // last freed, first reused
      {{3, 2, 1}, {1, 2, 3}},  // freeing in reverse hands the run out in its old order
  };
  for (const Case& c : cases) {
    BlockPool pool(6);
    AllocateN(pool, 5);  // 0..4 used, 5 free
    for (int b : c.freed) ASSERT_TRUE(pool.Free(b).ok());
    EXPECT_EQ(AllocateN(pool, static_cast<int>(c.next.size())), c.next);
  }
}

TEST(BlockPoolTest, DoubleFreeIsAnErrorAndChangesNothing) {
  BlockPool pool(3);
  AllocateN(pool, 2);
  ASSERT_TRUE(pool.Free(1).ok());
  const Status st = pool.Free(1);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("double free"), std::string::npos);
  EXPECT_EQ(pool.free_count(), 2);
  EXPECT_EQ(AllocateN(pool, 2), (std::vector<int>{1, 2}));
}

TEST(BlockPoolTest, FreeingUnknownIdsIsAnError) {
  BlockPool pool(3);
  EXPECT_EQ(pool.Free(-1).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(pool.Free(3).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(pool.Free(0).code(), ErrorCode::kInvalidArgument);  // never allocated
  EXPECT_EQ(pool.free_count(), 3);
}

TEST(BlockPoolTest, IsUsedTracksEachBlock) {
  BlockPool pool(2);
  EXPECT_FALSE(pool.is_used(0));
  ASSERT_EQ(pool.Allocate(), 0);
  EXPECT_TRUE(pool.is_used(0));
  EXPECT_FALSE(pool.is_used(1));
  EXPECT_FALSE(pool.is_used(7));
}

TEST(BlockPoolTest, EmptyPoolIsValid) {
  BlockPool pool(0);
  EXPECT_EQ(pool.Allocate(), std::nullopt);
  EXPECT_EQ(pool.num_blocks(), 0);
}

}  // namespace
}  // namespace uniprefill
