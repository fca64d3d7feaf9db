// The tensor-parallel cuts of a Gated DeltaNet and a MoE block (dist/shard_layers.h), by the math
// tensor parallelism relies on: the N shards' pieces reassemble the layer's weights, and the N
// shards' forwards on the same input, summed (the walk's all-reduce), equal the whole block's, in
// a prefill and then decode rows that carry each shard's own (locally sized) recurrent state.
#include "dist/shard_layers.h"

#include <gtest/gtest.h>

#include <vector>

#include "testing/block_weights.h"
#include "testing/compare.h"

namespace uniprefill::dist {
namespace {

using ::uniprefill::testing::DeltaNetCase;
using ::uniprefill::testing::MakeDeltaNet;
using ::uniprefill::testing::MakeMoe;
using ::uniprefill::testing::MaxErrorOverRms;
using ::uniprefill::testing::MoeCase;
using ::uniprefill::testing::NewStates;
using ::uniprefill::testing::Pointers;
using ::uniprefill::testing::Uniform;
using ::uniprefill::testing::View;
using ::uniprefill::testing::WeightFactory;

constexpr uint32_t kSeed = 41;

// The plan's DeltaNet and MoE ranges for `rank` of `world` (the rest is unused here); every
// count must divide by `world`.
ShardPlan Plan(int rank, int world, int n_k, int n_v, int experts, int shared_inter) {
  ShardPlan p;
  p.rank = rank;
  p.world = world;
  p.linear_k_heads = *EvenShare(n_k, rank, world, "k");
  p.linear_v_heads = *EvenShare(n_v, rank, world, "v");
  p.experts = *EvenShare(experts, rank, world, "experts");
  p.shared_ffn = *EvenShare(shared_inter, rank, world, "shared");
  return p;
}

// Row r of an f32 weight, over its parts.
std::vector<float> Row(const ops::LinearWeight& w, int64_t r) {
  for (const TensorView& p : w.parts) {
    if (r < p.dim(0)) {
      const float* d = static_cast<const float*>(p.data) + r * p.stride[0];
      return std::vector<float>(d, d + w.in_features);
    }
    r -= p.dim(0);
  }
  return {};
}

// Every element of an f32 weight, row by row.
std::vector<float> Values(const ops::LinearWeight& w) {
  std::vector<float> v;
  for (int64_t r = 0; r < w.out_features; ++r) {
    const std::vector<float> row = Row(w, r);
    v.insert(v.end(), row.begin(), row.end());
  }
  return v;
}

// The N shards' weights side by side: rows stacked (column-parallel) or columns (row-parallel).
std::vector<float> StackRows(const std::vector<const ops::LinearWeight*>& shards) {
  std::vector<float> v;
  for (const ops::LinearWeight* w : shards) {
    const std::vector<float> s = Values(*w);
    v.insert(v.end(), s.begin(), s.end());
  }
  return v;
}
std::vector<float> JoinColumns(const std::vector<const ops::LinearWeight*>& shards) {
  std::vector<float> v;
  for (int64_t r = 0; r < shards[0]->out_features; ++r) {
    for (const ops::LinearWeight* w : shards) {
      const std::vector<float> s = Row(*w, r);
      v.insert(v.end(), s.begin(), s.end());
    }
  }
  return v;
}

// Shards of a DeltaNet made from the same seed as `full`'s (weights are move-only).
struct DeltaShards {
  std::vector<WeightFactory> factories;
  std::vector<GatedDeltaNetWeights> w;
  std::vector<Buffer> storage;
};

DeltaShards ShardDelta(const DeltaNetCase& c, int world) {
  DeltaShards s;
  s.factories.reserve(world);
  for (int r = 0; r < world; ++r) {
    s.factories.emplace_back(kSeed);
    s.w.push_back(MakeDeltaNet(s.factories.back(), c));
    const ShardPlan plan = Plan(r, world, c.n_k, c.n_v, world, world);
    const Status st = ShardGatedDeltaNet(s.w.back(), plan, &s.storage);
    EXPECT_TRUE(st.ok()) << st.message();
  }
  return s;
}

TEST(ShardLayersTest, DeltaNetShardsReassembleTheLayersWeights) {
  DeltaNetCase c;
  c.n_k = 4;
  c.n_v = 8;
  for (int world : {2, 4}) {
    WeightFactory f(kSeed);
    const GatedDeltaNetWeights full = MakeDeltaNet(f, c);
    DeltaShards s = ShardDelta(c, world);
    std::vector<const ops::LinearWeight*> qkvz, ba, out;
    std::vector<float> q, k, v, dt_bias, a_log;
    for (const GatedDeltaNetWeights& w : s.w) {
      EXPECT_EQ(w.n_k_heads, c.n_k / world);
      EXPECT_EQ(w.n_v_heads, c.n_v / world);
      qkvz.push_back(&w.in_proj_qkvz);
      ba.push_back(&w.in_proj_ba);
      out.push_back(&w.out_proj);
      // The local conv channels: [q of its key heads | k of them | v of its value heads].
      const int64_t K = c.kernel, kd = w.key_dim() * K, vd = w.value_dim() * K;
      ASSERT_EQ(static_cast<int64_t>(w.conv_weight.size()), 2 * kd + vd);
      q.insert(q.end(), w.conv_weight.begin(), w.conv_weight.begin() + kd);
      k.insert(k.end(), w.conv_weight.begin() + kd, w.conv_weight.begin() + 2 * kd);
      v.insert(v.end(), w.conv_weight.begin() + 2 * kd, w.conv_weight.end());
      dt_bias.insert(dt_bias.end(), w.dt_bias.begin(), w.dt_bias.end());
      a_log.insert(a_log.end(), w.a_log.begin(), w.a_log.end());
      EXPECT_EQ(w.norm, full.norm);  // per head, the same weight for every head
    }
    EXPECT_EQ(StackRows(qkvz), Values(full.in_proj_qkvz)) << "world " << world;
    EXPECT_EQ(StackRows(ba), Values(full.in_proj_ba)) << "world " << world;
    EXPECT_EQ(JoinColumns(out), Values(full.out_proj)) << "world " << world;
    std::vector<float> conv = q;
    conv.insert(conv.end(), k.begin(), k.end());
    conv.insert(conv.end(), v.begin(), v.end());
    EXPECT_EQ(conv, full.conv_weight) << "world " << world;
    EXPECT_EQ(dt_bias, full.dt_bias);
    EXPECT_EQ(a_log, full.a_log);
  }
}

TEST(ShardLayersTest, DeltaNetShardsSumToTheLayerThroughPrefillAndDecode) {
  auto ctx = DeviceContext::Cpu(2);
  DeltaNetCase c;
  c.n_k = 4;
  c.n_v = 12;
  const int T = 29, H = c.hidden, kDecode = 3;
  for (int world : {2, 4}) {
    WeightFactory f(kSeed);
    const GatedDeltaNetWeights full = MakeDeltaNet(f, c);
    DeltaShards s = ShardDelta(c, world);
    std::vector<float> x = Uniform(f.rng(), (T + kDecode) * H, -1, 1);
    std::vector<LinearAttentionState> full_state = NewStates(full, 1);
    std::vector<std::vector<LinearAttentionState>> states;
    for (const GatedDeltaNetWeights& w : s.w) states.push_back(NewStates(w, 1));
    // The prefill's rows, then one decode row at a time.
    std::vector<SequenceRows> calls = {{0, T}};
    for (int i = 0; i < kDecode; ++i) calls.push_back({T + i, T + i + 1});
    for (const SequenceRows& call : calls) {
      const int n = static_cast<int>(call.size());
      std::vector<float> xs(x.begin() + call.begin * H, x.begin() + call.end * H);
      std::vector<float> want(n * H), sum(n * H, 0.0f), part(n * H);
      const std::vector<SequenceRows> seq = {{0, n}};
      std::vector<LinearAttentionState*> p = Pointers(full_state);
      GatedDeltaNetForward(*ctx, full, View(xs, n, H), seq, p, View(want, n, H));
      for (int r = 0; r < world; ++r) {
        std::vector<LinearAttentionState*> pr = Pointers(states[r]);
        GatedDeltaNetForward(*ctx, s.w[r], View(xs, n, H), seq, pr, View(part, n, H));
        for (int64_t i = 0; i < n * H; ++i) sum[i] += part[i];
      }
      // Only out_proj's partial sums add in another order: f32 rounding.
      EXPECT_LT(MaxErrorOverRms(sum, want), 1e-5) << "world " << world << " rows " << n;
    }
  }
}

TEST(ShardLayersTest, MoeShardsHoldTheirExpertsWholeAndSumToTheBlock) {
  auto ctx = DeviceContext::Cpu(2);
  for (bool norm : {true, false}) {
    MoeCase c;
    c.n_experts = 8;
    c.top_k = 3;
    c.norm_topk_prob = norm;
    const int T = 37, H = c.hidden;
    for (int world : {2, 4}) {
      WeightFactory f(kSeed);
      const MoeWeights full = MakeMoe(f, c);
      std::vector<float> x = Uniform(f.rng(), T * H, -2, 2), want(T * H), sum(T * H, 0.0f);
      MoeForward(*ctx, full, View(x, T, H), View(want, T, H));
      for (int r = 0; r < world; ++r) {
        WeightFactory fr(kSeed);
        MoeWeights w = MakeMoe(fr, c);
        std::vector<Buffer> storage;
        const ShardPlan plan = Plan(r, world, world, world, c.n_experts, c.shared_inter);
        ASSERT_TRUE(ShardMoe(w, plan, &storage).ok());
        const int per = c.n_experts / world;
        EXPECT_EQ(w.first_expert, per * r);
        ASSERT_EQ(static_cast<int>(w.expert_gate_up.size()), per);
        ASSERT_EQ(static_cast<int>(w.expert_down.size()), per);
        EXPECT_EQ(w.n_experts, c.n_experts);  // the router stays whole
        EXPECT_EQ(w.router.out_features, c.n_experts);
        EXPECT_EQ(w.shared_gate_up.out_features, 2 * c.shared_inter / world);
        EXPECT_EQ(w.shared_down.in_features, c.shared_inter / world);
        for (int e = 0; e < per; ++e) {
          EXPECT_EQ(Values(w.expert_gate_up[e]), Values(full.expert_gate_up[per * r + e]));
          EXPECT_EQ(Values(w.expert_down[e]), Values(full.expert_down[per * r + e]));
        }
        std::vector<float> part(T * H);
        MoeForward(*ctx, w, View(x, T, H), View(part, T, H));
        for (int64_t i = 0; i < T * H; ++i) sum[i] += part[i];
      }
      // Routing is computed from the whole router on every rank; the rank outputs only add in
      // another order.
      EXPECT_LT(MaxErrorOverRms(sum, want), 1e-5) << "world " << world << " norm " << norm;
    }
  }
}

TEST(ShardLayersTest, DeltaNetHeadsThatAreNotOneGroupAreRefused) {
  WeightFactory f(kSeed);
  GatedDeltaNetWeights w = MakeDeltaNet(f, DeltaNetCase{});  // 2 key heads, 6 value heads
  ShardPlan p;
  p.world = 2;
  p.linear_k_heads = {0, 1};
  p.linear_v_heads = {0, 2};  // key head 0's value heads are 0..2
  std::vector<Buffer> storage;
  const Status st = ShardGatedDeltaNet(w, p, &storage);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("not one group"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace uniprefill::dist
