// The host side of a drop (sparsity/drop_plan.h) with exact row ids: who selects, when a forward
// runs sync-free, and the next segment's layouts, exact and bounded.
#include "sparsity/drop_plan.h"

#include <gtest/gtest.h>

#include <vector>

namespace uniprefill {
namespace {

sparsity::SelectionParams Params(sparsity::SelectionMode mode, float keep_ratio = 0.5f) {
  sparsity::SelectionParams p;
  p.block_size = 64;
  p.sink = 128;
  p.last_n = 128;
  p.mode = mode;
  p.keep_ratio = keep_ratio;
  return p;
}

const sparsity::SelectionParams kRatio = Params(sparsity::SelectionMode::kFixedRatio);
const sparsity::SelectionParams kTopP = Params(sparsity::SelectionMode::kTopP);

DropRequest Request(int rows, const sparsity::SelectionParams& p, bool cache_holds_tokens = false,
                    int next_base = 0) {
  DropRequest d;
  d.rows = d.rows_min = rows;
  d.cache_holds_tokens = cache_holds_tokens;
  d.fixed_ratio = p.mode == sparsity::SelectionMode::kFixedRatio;
  d.next_base = next_base;
  d.params = &p;
  return d;
}

TEST(DropPlanTest, ARequestSelectsWhenLongerThanSinkAndWindowAndAllowed) {
  EXPECT_FALSE(Selects(Request(256, kRatio)));  // S + n exactly: keeps everything
  EXPECT_TRUE(Selects(Request(257, kRatio)));
  EXPECT_FALSE(Selects(Request(1, kTopP)));  // a decode
  DropRequest barred = Request(4096, kTopP);
  barred.allow_drop = false;
  EXPECT_FALSE(Selects(barred));
}

TEST(DropPlanTest, SyncFreeOnlyWhenEveryDroppingRequestIsFixedRatioAndFresh) {
  const DropSync only = DropSync::kOnlyWhenNeeded;
  const std::vector<DropRequest> fixed{Request(1000, kRatio), Request(1, kRatio, true)};
  EXPECT_TRUE(PlanSyncFree(fixed, true, only));  // a decode beside it does not matter
  EXPECT_FALSE(PlanSyncFree(fixed, false, only));  // no drop layers
  EXPECT_FALSE(PlanSyncFree(fixed, true, DropSync::kEveryDrop));
  // Nobody selects (decodes, short prompts): the plain path.
  const std::vector<DropRequest> nobody{Request(200, kRatio), Request(1, kRatio, true)};
  EXPECT_FALSE(PlanSyncFree(nobody, true, only));
  // A top-p request that may drop (even a decode): its count is unknown until read back.
  const std::vector<DropRequest> top_p_decode{Request(1000, kRatio), Request(1, kTopP, true)};
  EXPECT_FALSE(PlanSyncFree(top_p_decode, true, only));
  // ... unless it may not drop.
  DropRequest barred = Request(1000, kTopP);
  barred.allow_drop = false;
  EXPECT_TRUE(PlanSyncFree(std::vector<DropRequest>{Request(1000, kRatio), barred}, true, only));
  // A selecting request whose cache holds tokens is scored over its cached keys: synced.
  EXPECT_FALSE(PlanSyncFree(std::vector<DropRequest>{Request(1000, kRatio, true)}, true, only));
}

TEST(DropPlanTest, ExactLayoutGathersKeptRowsAndContinuesEachNextSegment) {
  // Three requests of 5, 1 and 4 rows (rows 0-4, 5, 6-9 of the segment); the first keeps rows 0,
  // 3, 4, the second passes (empty list), the third keeps 1 and 3. Their next segments already
  // hold 0, 7 and 2 entries.
  const std::vector<DropRequest> requests{Request(5, kTopP, false, 0), Request(1, kTopP, true, 7),
                                          Request(4, kTopP, true, 2)};
  const SegmentLayout next = PlanExactSegment(requests, {{0, 3, 4}, {}, {1, 3}});
  EXPECT_EQ(next.total, 6);
  EXPECT_EQ(next.begin, (std::vector<int>{0, 3, 4}));
  EXPECT_EQ(next.rows, (std::vector<int>{3, 1, 2}));
  EXPECT_EQ(next.selected, (std::vector<char>{1, 0, 1}));
  EXPECT_EQ(next.source, (std::vector<int32_t>{0, 3, 4, 5, 7, 9}));
  EXPECT_EQ(next.index, (std::vector<int32_t>{0, 1, 2, 7, 2, 3}));
}

TEST(DropPlanTest, BoundedLayoutGivesSelectingRequestsTheirCapacity) {
  // 1000 rows, G 64, S 128, n 128, ratio 0.5: 16 blocks, 8 kept, so at most 8 * 64 + 256 = 768
  // rows and at least (8 - 1) * 64 + 1 = 449. A 200-row request and a decode pass through.
  const std::vector<DropRequest> requests{Request(1000, kRatio), Request(200, kRatio),
                                          Request(1, kRatio, true)};
  const SegmentLayout next = PlanBoundedSegment(requests);
  EXPECT_EQ(next.rows, (std::vector<int>{768, 200, 1}));
  EXPECT_EQ(next.rows_min, (std::vector<int>{449, 200, 1}));
  EXPECT_EQ(next.begin, (std::vector<int>{0, 768, 968}));
  EXPECT_EQ(next.selected, (std::vector<char>{1, 0, 0}));
  EXPECT_EQ(next.total, 969);
  EXPECT_TRUE(next.source.empty());  // the device compacts: the host knows no rows

  // A second drop from a capacity: 768 rows at most (12 blocks, 6 kept: 6 * 64 + 256 = 640), at
  // least 449 (8 blocks, 4 kept: 3 * 64 + 1 = 193, below S + n = 256: 256).
  DropRequest later = Request(768, kRatio);
  later.rows_min = 449;
  const SegmentLayout after = PlanBoundedSegment(std::vector<DropRequest>{later});
  EXPECT_EQ(after.rows, (std::vector<int>{640}));
  EXPECT_EQ(after.rows_min, (std::vector<int>{256}));
}

}  // namespace
}  // namespace uniprefill
