// Tensor-parallel shard plans (dist/shard_plan.h) on the real models' head counts: every rank's
// query heads use exactly the KV heads it holds, the shares tile the model, replication when KV
// heads are fewer than ranks, and clear errors for sizes that do not divide.
#include "dist/shard_plan.h"

#include <gtest/gtest.h>

namespace uniprefill::dist {
namespace {

ModelConfig Model(int heads, int kv_heads, int ffn, LayerKind kind = LayerKind::kFullAttention) {
  ModelConfig m;
  m.n_layers = 4;
  m.n_heads = heads;
  m.n_kv_heads = kv_heads;
  m.head_dim = 64;
  m.ffn_hidden = ffn;
  m.layer_kinds.assign(4, kind);
  return m;
}

// Every query head of the rank maps (h / group) into the rank's KV heads; shares tile [0, n).
void ExpectConsistent(const ModelConfig& m, int world) {
  const int group = m.n_heads / m.n_kv_heads;
  int64_t next_q = 0, next_ffn = 0;
  for (int r = 0; r < world; ++r) {
    Result<ShardPlan> p = PlanShards(m, r, world);
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_EQ(p->q_heads.begin, next_q);
    EXPECT_EQ(p->ffn.begin, next_ffn);
    next_q = p->q_heads.end;
    next_ffn = p->ffn.end;
    for (int64_t h = p->q_heads.begin; h < p->q_heads.end; ++h) {
      EXPECT_GE(h / group, p->kv_heads.begin) << "rank " << r << " head " << h;
      EXPECT_LT(h / group, p->kv_heads.end) << "rank " << r << " head " << h;
    }
    EXPECT_EQ(p->kv_replicated, m.n_kv_heads < world);
  }
  EXPECT_EQ(next_q, m.n_heads);
  EXPECT_EQ(next_ffn, m.ffn_hidden);
}

TEST(ShardPlanTest, Llama8BSplitsHeadsWithTheirGqaGroups) {
  const ModelConfig m = Model(32, 8, 14336);
  for (int world : {1, 2, 4, 8}) ExpectConsistent(m, world);
  Result<ShardPlan> p = PlanShards(m, 3, 8);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->q_heads, (ShardRange{12, 16}));
  EXPECT_EQ(p->kv_heads, (ShardRange{3, 4}));
  EXPECT_EQ(p->ffn, (ShardRange{5376, 7168}));
}

TEST(ShardPlanTest, OneKvHeadIsReplicated) {
  const ModelConfig gemma270m = Model(4, 1, 2048, LayerKind::kSlidingAttention);
  for (int world : {2, 4}) ExpectConsistent(gemma270m, world);
  Result<ShardPlan> p = PlanShards(gemma270m, 1, 2);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->q_heads, (ShardRange{2, 4}));
  EXPECT_EQ(p->kv_heads, (ShardRange{0, 1}));
  EXPECT_TRUE(p->kv_replicated);
  // Qwen3-Next's attention: 16 query / 2 KV heads at 8 ranks: 2 query heads each, KV 0 or 1.
  const ModelConfig qwen = Model(16, 2, 0);
  ExpectConsistent(qwen, 8);
  EXPECT_EQ(PlanShards(qwen, 5, 8)->kv_heads, (ShardRange{1, 2}));
}

TEST(ShardPlanTest, SizesThatDoNotDivideAreRefusedByName) {
  const ModelConfig smollm2 = Model(9, 3, 1536);
  ExpectConsistent(smollm2, 3);
  Result<ShardPlan> p = PlanShards(smollm2, 0, 2);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("query heads (9)"), std::string::npos);
  p = PlanShards(Model(4, 1, 2048), 0, 8);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("over 8 ranks"), std::string::npos);
  p = PlanShards(Model(12, 3, 1536), 0, 6);  // 6 ranks, 3 KV heads: 2 ranks per KV head, fine
  EXPECT_TRUE(p.ok()) << p.status().message();
  p = PlanShards(Model(32, 8, 14336), 2, 2);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("does not exist"), std::string::npos);
}

TEST(ShardPlanTest, GatedDeltaNetHeadsSplitToo) {
  ModelConfig m = Model(16, 2, 0, LayerKind::kLinearAttention);
  m.layer_kinds[3] = LayerKind::kFullAttention;
  m.linear_k_heads = 16;
  m.linear_v_heads = 32;
  Result<ShardPlan> p = PlanShards(m, 1, 4);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->linear_k_heads, (ShardRange{4, 8}));
  EXPECT_EQ(p->linear_v_heads, (ShardRange{8, 16}));
  m.linear_k_heads = 6;
  EXPECT_FALSE(PlanShards(m, 0, 4).ok());
}

TEST(ShardPlanTest, MoeExpertsSplitWholeAndTheSharedExpertByColumns) {
  // Qwen3-Next-80B-A3B: 512 experts of 512 columns, a shared expert of 512 columns.
  ModelConfig m = Model(16, 2, 512, LayerKind::kLinearAttention);
  m.layer_kinds[3] = LayerKind::kFullAttention;
  m.linear_k_heads = 16;
  m.linear_v_heads = 32;
  m.n_experts = 512;
  m.shared_ffn_hidden = 512;
  int64_t next = 0;
  for (int r = 0; r < 8; ++r) {
    Result<ShardPlan> p = PlanShards(m, r, 8);
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_EQ(p->experts, (ShardRange{next, next + 64}));
    EXPECT_EQ(p->shared_ffn, (ShardRange{64 * r, 64 * (r + 1)}));
    EXPECT_EQ(p->ffn.size(), 0) << "an expert's columns are not split";
    next = p->experts.end;
  }
  EXPECT_EQ(next, 512);
  m.n_experts = 10;  // 10 experts over 4 ranks
  Result<ShardPlan> p = PlanShards(m, 0, 4);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("MoE experts (10)"), std::string::npos)
      << p.status().message();
}

}  // namespace
}  // namespace uniprefill::dist
