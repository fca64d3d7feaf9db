// RankPlan (engine/rank_plan.h): what rank 0 broadcasts each serving step under tensor
// parallelism. A plan must arrive exactly as sent (every field: a follower that ran a different
// chunk or selection would leave the ranks out of step), and a malformed one must be refused,
// never read past its end.
#include "engine/rank_plan.h"

#include <gtest/gtest.h>

#include <thread>

#include "dist/thread_communicator.h"

namespace uniprefill {
namespace {

RankPlan SamplePlan() {
  RankPlan plan;
  plan.kind = RankPlanKind::kStep;
  plan.released = {3, 7, int64_t{1} << 40};
  RankPlanRequest decode;
  decode.id = 11;
  decode.tokens = {262143};
  decode.selection_enabled = false;
  RankPlanRequest chunk;
  chunk.id = 12;
  chunk.is_prefill = true;
  chunk.last_chunk = false;
  chunk.allow_drop = true;
  chunk.reserve_tokens = 1500;
  chunk.num_tokens = 4;
  chunk.chunk_begin = 0;
  chunk.segment = 0;
  chunk.segment_rows = 1500;
  chunk.selection = {32, 64, 96, sparsity::SelectionMode::kFixedRatio, 0.9f, 0.25f};
  chunk.tokens = {2, 105, -1, 7};
  RankPlanRequest later_segment;  // a later segment's chunk runs boundary rows: no tokens
  later_segment.id = 13;
  later_segment.is_prefill = true;
  later_segment.allow_drop = true;
  later_segment.num_tokens = 300;
  later_segment.chunk_begin = 200;
  later_segment.segment = 2;
  later_segment.segment_rows = 500;
  plan.requests = {decode, chunk, later_segment};
  return plan;
}

TEST(RankPlanTest, EveryFieldSurvivesTheRoundTrip) {
  const RankPlan plan = SamplePlan();
  Result<RankPlan> back = DecodeRankPlan(EncodeRankPlan(plan));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(*back, plan);
  EXPECT_EQ(back->requests[1].selection.mode, sparsity::SelectionMode::kFixedRatio);
  EXPECT_FALSE(back->requests[1].ends_segment());
  EXPECT_TRUE(back->requests[2].ends_segment());
}

TEST(RankPlanTest, IdleAndShutdownPlansRoundTrip) {
  for (RankPlanKind kind : {RankPlanKind::kIdle, RankPlanKind::kShutdown}) {
    RankPlan plan;
    plan.kind = kind;
    Result<RankPlan> back = DecodeRankPlan(EncodeRankPlan(plan));
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(*back, plan);
  }
}

TEST(RankPlanTest, EveryTruncationIsRefused) {
  const std::vector<uint8_t> bytes = EncodeRankPlan(SamplePlan());
  for (size_t n = 0; n < bytes.size(); ++n) {
    Result<RankPlan> back = DecodeRankPlan(std::vector<uint8_t>(bytes.begin(), bytes.begin() + n));
    ASSERT_FALSE(back.ok()) << "a plan cut to " << n << " of " << bytes.size() << " bytes";
    EXPECT_EQ(back.status().code(), ErrorCode::kDataLoss);
  }
}

TEST(RankPlanTest, TrailingBytesUnknownKindsAndAbsurdCountsAreRefused) {
  std::vector<uint8_t> bytes = EncodeRankPlan(SamplePlan());
  bytes.push_back(0);
  EXPECT_EQ(DecodeRankPlan(bytes).status().code(), ErrorCode::kDataLoss);
  bytes = EncodeRankPlan(RankPlan{});
  bytes[0] = 9;
  EXPECT_EQ(DecodeRankPlan(bytes).status().code(), ErrorCode::kDataLoss);
  bytes = EncodeRankPlan(RankPlan{});
  bytes[1] = 0xff;  // the released list claims 255 ids in a few bytes
  EXPECT_EQ(DecodeRankPlan(bytes).status().code(), ErrorCode::kDataLoss);
}

TEST(RankPlanTest, FollowersReceiveWhatRankZeroSends) {
  auto comms = dist::MakeThreadCommunicators(3, dist::CommOptions{5.0});
  const RankPlan plan = SamplePlan();
  std::vector<RankPlan> got(3);
  std::vector<Status> status(3);
  std::vector<std::thread> ranks;
  for (int r = 1; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      Result<RankPlan> p = ReceiveRankPlan(*comms[r]);
      status[r] = p.status();
      if (p.ok()) got[r] = *p;
    });
  }
  status[0] = SendRankPlan(*comms[0], plan);
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(status[r].ok()) << r << ": " << status[r].message();
  EXPECT_EQ(got[1], plan);
  EXPECT_EQ(got[2], plan);
}

TEST(RankPlanTest, AFollowerWhoseRankZeroIsSilentGetsUnavailable) {
  auto comms = dist::MakeThreadCommunicators(2, dist::CommOptions{0.2});
  Result<RankPlan> p = ReceiveRankPlan(*comms[1]);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), ErrorCode::kUnavailable) << p.status().message();
}

}  // namespace
}  // namespace uniprefill
