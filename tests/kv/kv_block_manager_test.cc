#include "kv/kv_block_manager.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kv/sequence_cache.h"

namespace uniprefill {
namespace {

constexpr int X = BlockPool::kNoBlock;  // a released sliding page in expected tables

std::vector<int> Vec(std::span<const int> s) { return {s.begin(), s.end()}; }

KvCacheSpec Spec(std::vector<KvSegmentSpec> segments, int64_t layer_token_bytes = 64) {
  KvCacheSpec spec;
  spec.segments = std::move(segments);
  spec.layer_token_bytes = layer_token_bytes;
  return spec;
}

KvSegmentSpec Full(int layers) { return {layers, 0, 0}; }

KvBlockManager Manager(KvCacheSpec spec, int num_blocks, int block_tokens, int slots = 8) {
  return KvBlockManager(std::move(spec), KvPoolSize{num_blocks, block_tokens, slots});
}

std::vector<int> Range(int begin, int end) {
  std::vector<int> v;
  for (int i = begin; i < end; ++i) v.push_back(i);
  return v;
}

// --- sizing -------------------------------------------------------------------------------------

TEST(KvBlockManagerTest, SizesThePoolFromTheMemoryBudget) {
  struct Case {
    const char* name;
    int linear_layers;
    int64_t state_bytes;
    int64_t memory;
    int max_seqs;
    int expect_blocks;
  };
  // Block = 16 tokens x 1024 bytes = 16 KiB.
  const std::vector<Case> cases = {
      {"attention only", 0, 0, 1 << 20, 4, 64},
      {"linear state comes off the top", 3, 1000, 1 << 20, 4, 63},  // 12000 bytes of state
      {"partial blocks are not counted", 0, 0, (1 << 20) + 16383, 1, 64},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    KvCacheSpec spec = Spec({Full(2), Full(2)}, 1024);
    spec.linear_layers = c.linear_layers;
    spec.linear_state_bytes = c.state_bytes;
    Result<KvPoolSize> size = KvBlockManager::SizePool(spec, {c.memory, 16, c.max_seqs});
    ASSERT_TRUE(size.ok()) << size.status().message();
    EXPECT_EQ(size->num_blocks, c.expect_blocks);
    EXPECT_EQ(size->block_tokens, 16);
    EXPECT_EQ(size->state_slots, c.max_seqs);
  }
}

TEST(KvBlockManagerTest, RejectsBudgetsThatHoldNothing) {
  struct Case {
    const char* name;
    KvCacheConfig config;
    ErrorCode code;
    const char* mentions;
  };
  const std::vector<Case> cases = {
      {"no memory", {0, 16, 4}, ErrorCode::kInvalidArgument, "--kv-cache-memory"},
      {"state eats it all", {12000, 16, 4}, ErrorCode::kResourceExhausted, "--max-num-seqs"},
      {"no whole block", {12000 + 16383, 16, 4}, ErrorCode::kResourceExhausted, "one KV block"},
      {"block of no tokens", {1 << 20, 0, 4}, ErrorCode::kInvalidArgument, "--kv-block-tokens"},
      {"no sequences", {1 << 20, 16, 0}, ErrorCode::kInvalidArgument, "--max-num-seqs"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    KvCacheSpec spec = Spec({Full(2)}, 1024);
    spec.linear_layers = 3;
    spec.linear_state_bytes = 1000;
    Result<KvPoolSize> size = KvBlockManager::SizePool(spec, c.config);
    ASSERT_FALSE(size.ok());
    EXPECT_EQ(size.status().code(), c.code);
    EXPECT_NE(size.status().message().find(c.mentions), std::string::npos)
        << size.status().message();
  }
}

TEST(KvBlockManagerTest, LinearAttentionOnlyNeedsNoBlocks) {
  KvCacheSpec spec = Spec({Full(0)}, 0);
  spec.linear_layers = 2;
  spec.linear_state_bytes = 100;
  Result<KvPoolSize> size = KvBlockManager::SizePool(spec, {1000, 16, 4});
  ASSERT_TRUE(size.ok()) << size.status().message();
  EXPECT_EQ(size->num_blocks, 0);
  EXPECT_EQ(size->state_slots, 4);
}

TEST(KvBlockManagerTest, SpecFromCacheLayoutCountsLayersPerSegment) {
  CacheLayout layout;
  CacheLayerSpec full8{CacheLayerKind::kFullAttention, 8, 0, {}};
  CacheLayerSpec sliding8{CacheLayerKind::kSlidingAttention, 8, 32, {}};
  CacheLayerSpec linear{CacheLayerKind::kLinearAttention, 0, 0, {4, 4, 2, 3, 5}};
  CacheLayerSpec full16{CacheLayerKind::kFullAttention, 16, 0, {}};
  layout.layers = {full8, sliding8, linear, full16};
  layout.segment_of_layer = {0, 0, 1, 1};
  layout.n_segments = 2;
  Result<KvCacheSpec> spec = KvCacheSpec::FromLayout(layout, 4);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  ASSERT_EQ(spec->n_segments(), 2);
  EXPECT_EQ(spec->segments[0].full_layers, 1);
  EXPECT_EQ(spec->segments[0].sliding_layers, 1);
  EXPECT_EQ(spec->segments[0].window, 32);
  EXPECT_EQ(spec->segments[1].full_layers, 1);
  EXPECT_EQ(spec->segments[1].sliding_layers, 0);
  EXPECT_EQ(spec->layer_token_bytes, 2 * 16 * 4);  // the widest layer's K and V in f32
  EXPECT_EQ(spec->linear_layers, 1);
  EXPECT_EQ(spec->linear_state_bytes, 4 * (3 * 4 + 2 * 3 * 5));  // conv history + recurrent S
}

// --- allocation and block tables ----------------------------------------------------------------

TEST(KvBlockManagerTest, DenseAllocationFillsSegmentsInOrder) {
  // Segment 0: two full layers and one sliding layer; segment 1: one full layer. 4 tokens a block.
  KvBlockManager kv = Manager(Spec({{2, 1, 64}, Full(1)}), 32, 4);
  ASSERT_TRUE(kv.Allocate(7, {6, 6}).ok());
  EXPECT_EQ(Vec(kv.FullTable(7, 0)), (std::vector<int>{0, 1, 2, 3}));  // page 0: 0 1, page 1: 2 3
  EXPECT_EQ(Vec(kv.SlidingTable(7, 0)), (std::vector<int>{4, 5}));
  EXPECT_EQ(Vec(kv.FullTable(7, 1)), (std::vector<int>{6, 7}));
  EXPECT_TRUE(kv.SlidingTable(7, 1).empty());
  EXPECT_EQ(kv.BlocksHeld(7), 8);
  EXPECT_EQ(kv.BlocksFor({6, 6}), 8);
  EXPECT_EQ(kv.StateSlot(7), 0);
  EXPECT_EQ(kv.free_blocks(), 24);
  EXPECT_TRUE(kv.CheckInvariants().ok());
}

TEST(KvBlockManagerTest, CommitPrefillShrinksLaterSegmentsToTheirKeptTokens) {
  // Prompt 1000, 16 tokens a block: 63 pages per segment reserved dense; UniPrefill kept 600 in
  // segment 1 (38 pages) and 400 in segment 2 (25 pages).
  KvBlockManager kv = Manager(Spec({Full(1), Full(1), Full(1)}), 200, 16);
  ASSERT_TRUE(kv.Allocate(1, {1000, 1000, 1000}).ok());
  EXPECT_EQ(kv.BlocksHeld(1), 189);
  EXPECT_EQ(Vec(kv.FullTable(1, 2)), Range(126, 189));

  ASSERT_TRUE(kv.CommitPrefill(1, {1000, 600, 400}).ok());
  EXPECT_EQ(Vec(kv.FullTable(1, 0)), Range(0, 63));
  EXPECT_EQ(Vec(kv.FullTable(1, 1)), Range(63, 101));
  EXPECT_EQ(Vec(kv.FullTable(1, 2)), Range(126, 151));
  EXPECT_EQ(kv.segment_tokens(1, 1), 600);
  EXPECT_EQ(kv.segment_tokens(1, 2), 400);
  EXPECT_EQ(kv.BlocksHeld(1), 63 + 38 + 25);
  EXPECT_EQ(kv.free_blocks(), 200 - 126);

  const KvUsage u = kv.Usage();
  EXPECT_EQ(u.used_blocks, 126);
  EXPECT_EQ(u.dense_blocks, 189);
  EXPECT_EQ(u.block_bytes, 16 * 64);
  EXPECT_EQ(u.saved_bytes, int64_t{63} * 16 * 64);

  // Segment 2's tail was freed last-to-first, then segment 1's: the pool hands out 101..125 first.
  ASSERT_TRUE(kv.Allocate(2, {400, 0, 0}).ok());
  EXPECT_EQ(Vec(kv.FullTable(2, 0)), Range(101, 126));
  ASSERT_TRUE(kv.Allocate(3, {16, 0, 0}).ok());
  EXPECT_EQ(Vec(kv.FullTable(3, 0)), (std::vector<int>{151}));
  EXPECT_TRUE(kv.CheckInvariants().ok());
}

TEST(KvBlockManagerTest, DecodeAppendsAcrossABlockBoundary) {
  KvBlockManager kv = Manager(Spec({Full(1), Full(1)}), 8, 4);
  ASSERT_TRUE(kv.Allocate(0, {4, 3}).ok());
  struct Step {
    std::vector<int> seg0, seg1;
    int tokens0, tokens1;
  };
  const std::vector<Step> steps = {
      {{0}, {1}, 4, 3},        // after the prefill
      {{0, 2}, {1}, 5, 4},     // segment 0 crosses into page 1; segment 1 fills page 0
      {{0, 2}, {1, 3}, 6, 5},  // now segment 1 crosses
      {{0, 2}, {1, 3}, 7, 6},
  };
  for (size_t i = 0; i < steps.size(); ++i) {
    SCOPED_TRACE("decode " + std::to_string(i));
    if (i > 0) {
      EXPECT_EQ(kv.CanAppendDecode(0), true);
      ASSERT_TRUE(kv.AppendDecode(0).ok());
    }
    EXPECT_EQ(Vec(kv.FullTable(0, 0)), steps[i].seg0);
    EXPECT_EQ(Vec(kv.FullTable(0, 1)), steps[i].seg1);
    EXPECT_EQ(kv.segment_tokens(0, 0), steps[i].tokens0);
    EXPECT_EQ(kv.segment_tokens(0, 1), steps[i].tokens1);
    EXPECT_TRUE(kv.CheckInvariants().ok());
  }
}

TEST(KvBlockManagerTest, SlidingWindowReleasesPagesThatLeftTheWindow) {
  // One sliding layer, W = 6, 4 tokens a block. Holding T tokens keeps alive indices >= T - 5.
  KvBlockManager kv = Manager(Spec({{0, 1, 6}}), 8, 4);
  ASSERT_TRUE(kv.Allocate(0, {10}).ok());
  EXPECT_EQ(Vec(kv.SlidingTable(0, 0)), (std::vector<int>{0, 1, 2}));  // the whole prompt
  ASSERT_TRUE(kv.CommitPrefill(0, {10}).ok());
  struct Step {
    int tokens;
    std::vector<int> table;
    int used;
  };
  const std::vector<Step> steps = {
      {10, {X, 1, 2}, 2},        // keeps 5..9: page 0 (0..3) released
      {11, {X, 1, 2}, 2},        // keeps 6..10
      {12, {X, 1, 2}, 2},        // keeps 7..11
      {13, {X, X, 2, 0}, 2},     // index 12 opens page 3 (block 0 again, LIFO); page 1 released
      {16, {X, X, 2, 0}, 2},     // keeps 11..15
      {17, {X, X, X, 0, 1}, 2},  // page 4 takes block 1; page 2 (8..11) released
  };
  for (size_t i = 0; i < steps.size(); ++i) {
    SCOPED_TRACE("tokens " + std::to_string(steps[i].tokens));
    while (kv.segment_tokens(0, 0) < steps[i].tokens) {
      ASSERT_TRUE(kv.AppendDecode(0).ok());
      ASSERT_TRUE(kv.ReleaseWindow(0).ok());
    }
    EXPECT_EQ(Vec(kv.SlidingTable(0, 0)), steps[i].table);
    EXPECT_EQ(kv.Usage().used_blocks, steps[i].used);
    EXPECT_TRUE(kv.CheckInvariants().ok());
  }
}

TEST(KvBlockManagerTest, UsageComparesWithADenseCacheUnderTheSameWindow) {
  // Both segments: one full and one sliding layer (W = 8); 4 tokens a block. Prompt 20 (5 pages),
  // segment 1 kept 8 (2 pages). Segment 0's window keeps 13..19: pages 3 and 4.
  KvBlockManager kv = Manager(Spec({{1, 1, 8}, {1, 1, 8}}), 32, 4);
  ASSERT_TRUE(kv.Allocate(0, {20, 20}).ok());
  EXPECT_EQ(kv.Usage().used_blocks, 20);
  EXPECT_EQ(kv.Usage().dense_blocks, 20);
  ASSERT_TRUE(kv.CommitPrefill(0, {20, 8}).ok());
  EXPECT_EQ(Vec(kv.SlidingTable(0, 0)), (std::vector<int>{X, X, X, 8, 9}));
  EXPECT_EQ(Vec(kv.FullTable(0, 1)), (std::vector<int>{10, 11}));
  EXPECT_EQ(Vec(kv.SlidingTable(0, 1)), (std::vector<int>{15, 16}));  // keeps 1..7: both pages
  const KvUsage u = kv.Usage();
  EXPECT_EQ(u.used_blocks, 5 + 2 + 2 + 2);
  EXPECT_EQ(u.dense_blocks, (5 + 2) + (5 + 2));  // a dense segment 1 would mirror segment 0
  EXPECT_EQ(u.saved_bytes, int64_t{3} * 4 * 64);
  EXPECT_EQ(kv.DenseBlocksHeld(0), 14);
}

TEST(KvBlockManagerTest, FreeReturnsEverythingAndTheSameIdsComeBack) {
  KvBlockManager kv = Manager(Spec({{1, 1, 4}, Full(2)}), 40, 4, 2);
  ASSERT_TRUE(kv.Allocate(0, {9, 9}).ok());
  const std::vector<int> full0 = Vec(kv.FullTable(0, 0)), sliding0 = Vec(kv.SlidingTable(0, 0)),
                         full1 = Vec(kv.FullTable(0, 1));
  ASSERT_TRUE(kv.Allocate(1, {3, 3}).ok());
  ASSERT_TRUE(kv.Free(0).ok());
  EXPECT_FALSE(kv.Contains(0));
  EXPECT_EQ(kv.free_state_slots(), 1);
  EXPECT_EQ(kv.Usage().used_blocks, kv.BlocksHeld(1));
  ASSERT_TRUE(kv.Allocate(2, {9, 9}).ok());
  EXPECT_EQ(Vec(kv.FullTable(2, 0)), full0);
  EXPECT_EQ(Vec(kv.SlidingTable(2, 0)), sliding0);
  EXPECT_EQ(Vec(kv.FullTable(2, 1)), full1);
  EXPECT_EQ(kv.StateSlot(2), 0);
  ASSERT_TRUE(kv.Free(1).ok());
  ASSERT_TRUE(kv.Free(2).ok());
  EXPECT_EQ(kv.Usage().used_blocks, 0);
  EXPECT_EQ(kv.free_state_slots(), 2);
  EXPECT_TRUE(kv.CheckInvariants().ok());
}

TEST(KvBlockManagerTest, RunningOutTakesNothing) {
  KvBlockManager kv = Manager(Spec({Full(1), Full(1)}), 5, 4);
  EXPECT_FALSE(kv.CanAllocate({12, 12}));
  EXPECT_EQ(kv.Allocate(0, {12, 12}).code(), ErrorCode::kResourceExhausted);  // 6 blocks > 5
  EXPECT_FALSE(kv.Contains(0));
  EXPECT_EQ(kv.free_blocks(), 5);
  EXPECT_EQ(kv.free_state_slots(), 8);

  ASSERT_TRUE(kv.Allocate(0, {8, 8}).ok());  // 4 blocks
  EXPECT_FALSE(kv.CanAppendDecode(0));       // both segments cross a boundary: 2 > 1 free
  EXPECT_EQ(kv.BlocksToExtend(0, {1, 1}), 2);
  EXPECT_EQ(kv.AppendDecode(0).code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(kv.segment_tokens(0, 0), 8);
  EXPECT_EQ(kv.segment_tokens(0, 1), 8);
  EXPECT_EQ(kv.free_blocks(), 1);
  EXPECT_TRUE(kv.CheckInvariants().ok());
}

TEST(KvBlockManagerTest, StateSlotsLimitConcurrentRequests) {
  KvCacheSpec spec = Spec({Full(0)}, 0);
  spec.linear_layers = 2;
  spec.linear_state_bytes = 100;
  KvBlockManager kv = Manager(spec, 0, 16, 2);
  ASSERT_TRUE(kv.Allocate(10, {500}).ok());
  ASSERT_TRUE(kv.Allocate(11, {70}).ok());
  EXPECT_EQ(kv.StateSlot(10), 0);
  EXPECT_EQ(kv.StateSlot(11), 1);
  EXPECT_FALSE(kv.CanAllocate({1}));
  const Status full = kv.Allocate(12, {1});
  EXPECT_EQ(full.code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(full.message().find("--max-num-seqs"), std::string::npos);
  EXPECT_TRUE(kv.AppendDecode(10).ok());  // linear layers take no blocks
  EXPECT_EQ(kv.Usage().state_bytes, 2 * 2 * 100);
  ASSERT_TRUE(kv.Free(10).ok());
  ASSERT_TRUE(kv.Allocate(12, {1}).ok());
  EXPECT_EQ(kv.StateSlot(12), 0);
}

TEST(KvBlockManagerTest, BadCallsAreErrorsThatChangeNothing) {
  KvBlockManager kv = Manager(Spec({Full(1), Full(1)}), 16, 4);
  ASSERT_TRUE(kv.Allocate(0, {8, 8}).ok());
  EXPECT_EQ(kv.Allocate(0, {4, 4}).code(), ErrorCode::kInvalidArgument);   // id in use
  EXPECT_EQ(kv.Allocate(1, {4}).code(), ErrorCode::kInvalidArgument);      // segment count
  EXPECT_EQ(kv.Allocate(1, {4, -1}).code(), ErrorCode::kInvalidArgument);  // negative
  EXPECT_EQ(kv.CommitPrefill(0, {8, 9}).code(), ErrorCode::kInvalidArgument);  // past reservation
  EXPECT_EQ(kv.CommitPrefill(5, {1, 1}).code(), ErrorCode::kNotFound);
  EXPECT_EQ(kv.AppendDecode(5).code(), ErrorCode::kNotFound);
  EXPECT_EQ(kv.ReleaseWindow(5).code(), ErrorCode::kNotFound);
  EXPECT_EQ(kv.Free(5).code(), ErrorCode::kNotFound);
  EXPECT_EQ(kv.BlocksToExtend(5, {1, 1}), -1);
  EXPECT_EQ(kv.BlocksHeld(0), 4);
  EXPECT_EQ(kv.segment_tokens(0, 1), 8);
  EXPECT_EQ(kv.num_requests(), 1);
  EXPECT_TRUE(kv.CheckInvariants().ok());
}

}  // namespace
}  // namespace uniprefill
