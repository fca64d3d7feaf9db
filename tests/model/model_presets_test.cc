// Random-weight presets (model/model_presets.h), on the CPU:
// - parameter and FLOP counts equal those of the GPU benchmark's former SyntheticShape of the same
//   name (recorded from it before it was removed), and the Qwen3-Next layer mix and per-token
//   FLOPs match the hand count of the former synthetic-model test;
// - the configs are the families' (drop layers from DefaultUniPrefillConfig are the references);
// - an unknown preset names the known ones; an expert count applies to MoE presets only;
// - fewer layers keep the first layers' weights; materialised weights are RandomBf16Bits exactly,
//   with f32 copies of the same values, and carry the seeds the CUDA model fills from;
// - the tiny presets run on the CPU model with finite logits, with and without a drop;
// - segment prices split the model at its drop layers and carry what its backend measured.
#include "model/model_presets.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/random_bf16.h"
#include "model/layer_backend.h"
#include "model/llama.h"
#include "model/transformer_model.h"
#include "sparsity/uniprefill_config.h"
#include "testing/compare.h"
#include "testing/stub_layer_backend.h"

namespace uniprefill {
namespace {

// The seed of a weight's first random part (a stacked weight's first tensor).
uint64_t SeedOf(const ops::LinearWeight& w) {
  return w.random_parts.empty() ? 0 : w.random_parts[0].seed;
}

ModelDefinition Preset(const std::string& name, RandomModelOptions o = {}) {
  Result<ModelDefinition> d = RandomModelDefinition(name, o);
  EXPECT_TRUE(d.ok()) << d.status().message();
  return std::move(d).value();
}

float Bf16(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Recorded from SyntheticShape (src/model/cuda/synthetic_transformer.cc) at commit 958894e, just
// before the presets replaced it: Parameters(), LinearPrefillFlops(1) and DensePrefillFlops(n).
struct OldShapeCounts {
  const char* preset;
  int64_t parameters;
  double linear_1, dense_1000, dense_8192, dense_131072;
};
constexpr OldShapeCounts kOldCounts[] = {
    {"llama-3.1-8b", 7504658432, 13958643712.0, 14221049856000.0, 131943542816768.0,
     6333221335728128.0},
    {"gemma-3-12b", 11765268480, 21516779520.0, 21910388736000.0, 185818337509376.0,
     4033773490405376.0},
    {"qwen3-next-80b-a3b", 40683143168, 6567690240.0, 6666092544000.0, 60400393519104.0,
     2549703040303104.0},
    {"tiny", 2615296, 4718592.0, 6768640000.0, 176110436352.0, 35803115814912.0},
    {"tiny-hybrid", 5935104, 7229440.0, 8254464000.0, 127951437824.0, 18539897421824.0},
};

TEST(ModelPresetTest, CountsEqualTheFormerSyntheticShapes) {
  for (const OldShapeCounts& old : kOldCounts) {
    SCOPED_TRACE(old.preset);
    const ModelDefinition d = Preset(old.preset);
    EXPECT_EQ(ParameterCount(d), old.parameters);
    EXPECT_DOUBLE_EQ(LinearPrefillFlops(d, 1), old.linear_1);
    EXPECT_DOUBLE_EQ(DensePrefillFlops(d, 1000), old.dense_1000);
    EXPECT_DOUBLE_EQ(DensePrefillFlops(d, 8192), old.dense_8192);
    EXPECT_DOUBLE_EQ(DensePrefillFlops(d, 131072), old.dense_131072);
  }
}

// Ported from CudaSyntheticTransformerTest.HybridShapeCountsAndLayerKinds.
TEST(ModelPresetTest, QwenNextLayerMixAndPerTokenFlops) {
  const ModelDefinition q = Preset("qwen3-next-80b-a3b");
  const ModelConfig& c = q.config;
  int full = 0;
  for (int l = 0; l < c.n_layers; ++l) full += c.layer_kinds[l] == LayerKind::kFullAttention;
  EXPECT_EQ(full, 12);
  EXPECT_EQ(c.layer_kinds[3], LayerKind::kFullAttention);
  EXPECT_EQ(c.layer_kinds[0], LayerKind::kLinearAttention);
  EXPECT_EQ(c.layer_kinds[46], LayerKind::kLinearAttention);
  EXPECT_TRUE(q.layers[3].attention && q.layers[0].delta && q.layers[46].delta);
  for (int d : DefaultUniPrefillConfig(c).drop_layers) {
    EXPECT_EQ(c.layer_kinds[d], LayerKind::kFullAttention) << d;
  }
  // Per token: 36 DeltaNet layers, 12 attention layers, 48 MoE layers (router over the 256
  // experts kept, top-10 experts + shared of 3 * 2048 * 512 each), delta rule and conv included.
  const double gdn = 2.0 * (2048.0 * (2 * 2048 + 2 * 4096 + 64) + 4096.0 * 2048) +
                     2.0 * 4 * 8192 + 6.0 * 32 * 128 * 128;
  const double attn = 2.0 * (2048.0 * (2 * 4096 + 2 * 512) + 4096.0 * 2048);
  const double moe = 2.0 * (2048.0 * 256 + 11 * 3 * 2048.0 * 512 + 2048);
  EXPECT_NEAR(LinearPrefillFlops(q, 1), 36 * gdn + 12 * attn + 48 * moe, 1.0);
  // Attention: the 12 full layers only.
  EXPECT_NEAR(DensePrefillFlops(q, 1000) - LinearPrefillFlops(q, 1000),
              12 * 4.0 * 16 * 256 * (1000.0 * 1001 / 2), 1e3);
}

TEST(ModelPresetTest, DropLayersAreTheModelsOwnDefaults) {
  struct Case {
    const char* preset;
    std::vector<int> drops;
    const char* origin;
  };
  const Case cases[] = {
      {"llama-3.1-8b", {7, 11, 15, 19, 23, 27}, "reference default for Llama-3.1-8B"},
      {"gemma-3-12b", {29, 35, 41}, "reference default for Gemma-3-12B"},
      {"qwen3-next-80b-a3b", {7, 11, 15, 19, 23, 27, 31, 35, 39, 43},
       "reference default for Qwen3-Next-80B"},
      {"tiny-hybrid", {3}, "default rule (docs/uniprefill.md)"},
  };
  for (const Case& k : cases) {
    const UniPrefillConfig up = DefaultUniPrefillConfig(Preset(k.preset).config);
    EXPECT_EQ(up.drop_layers, k.drops) << k.preset;
    EXPECT_EQ(up.origin, k.origin) << k.preset;
  }
}

TEST(ModelPresetTest, LlamaIsBuiltAsTheLlamaLoaderBuildsIt) {
  const ModelDefinition d = Preset("llama-3.1-8b");
  const ModelConfig& c = d.config;
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.rms_eps, 1e-5f);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(SeedOf(d.head), SeedOf(d.token_embedding));
  const LayerDefinition& L = d.layers[0];
  ASSERT_TRUE(L.attention && L.ffn);
  EXPECT_TRUE(L.post_mixer_norm.empty() && L.post_ffn_norm.empty());
  EXPECT_EQ(L.attention->rope_inv_freq, Llama3RopeInvFreq(500000.0, 128, 8.0, 1.0, 4.0, 8192));
  EXPECT_EQ(L.attention->rope_style, ops::RopeStyle::kNeox);
  EXPECT_EQ(L.attention->rot_dims, 128);
  EXPECT_EQ(L.attention->window, 0);
  EXPECT_TRUE(L.attention->q_norm.empty());
  EXPECT_EQ(L.attention->q.out_features, 4096);
  EXPECT_EQ(L.attention->k.out_features, 1024);
  EXPECT_EQ(L.ffn->gate_up.out_features, 2 * 14336);
  EXPECT_EQ(L.ffn->activation, ops::Activation::kSilu);
  EXPECT_FLOAT_EQ(L.attention->scale, 1.0f / std::sqrt(128.0f));
}

TEST(ModelPresetTest, GemmaIsBuiltAsTheGemmaLoaderBuildsIt) {
  const ModelDefinition d = Preset("gemma-3-12b");
  const ModelConfig& c = d.config;
  EXPECT_EQ(c.architecture, "gemma3");
  EXPECT_FLOAT_EQ(c.embedding_scale, std::sqrt(3840.0f));
  EXPECT_EQ(c.sliding_window, 1024);
  const LayerDefinition& sliding = d.layers[0];
  const LayerDefinition& full = d.layers[5];
  EXPECT_EQ(c.layer_kinds[0], LayerKind::kSlidingAttention);
  EXPECT_EQ(c.layer_kinds[5], LayerKind::kFullAttention);
  ASSERT_TRUE(sliding.attention && full.attention && full.ffn);
  EXPECT_EQ(sliding.attention->window, 1024);
  EXPECT_EQ(full.attention->window, 0);
  EXPECT_EQ(sliding.attention->rope_inv_freq, ops::RopeInvFreq(1e4, 256));
  std::vector<float> global = ops::RopeInvFreq(1e6, 256);
  for (float& f : global) f /= 8.0f;  // Gemma-3-12B's linear rope scaling on full layers
  EXPECT_EQ(full.attention->rope_inv_freq, global);
  EXPECT_EQ(full.attention->q_norm.size(), 256u);
  EXPECT_EQ(full.attention->k_norm.size(), 256u);
  EXPECT_EQ(full.post_mixer_norm.size(), 3840u);
  EXPECT_EQ(full.post_ffn_norm.size(), 3840u);
  EXPECT_EQ(full.ffn->activation, ops::Activation::kGeluTanh);
}

TEST(ModelPresetTest, QwenNextIsBuiltAsTheQwenNextLoaderBuildsIt) {
  const ModelDefinition d = Preset("qwen3-next-80b-a3b");
  EXPECT_EQ(d.config.architecture, "qwen3_next");
  const LayerDefinition& attn = d.layers[3];
  const LayerDefinition& lin = d.layers[0];
  ASSERT_TRUE(attn.attention && attn.moe && lin.delta && lin.moe);
  EXPECT_TRUE(attn.attention->gated_output);
  EXPECT_EQ(attn.attention->rot_dims, 64);
  EXPECT_EQ(attn.attention->rope_inv_freq, ops::RopeInvFreq(1e7, 64));
  EXPECT_EQ(attn.attention->q.out_features, 2 * 16 * 256);
  EXPECT_EQ(attn.attention->q_norm.size(), 256u);
  const GatedDeltaNetWeights& g = *lin.delta;
  EXPECT_EQ(g.n_k_heads, 16);
  EXPECT_EQ(g.n_v_heads, 32);
  EXPECT_EQ(g.in_proj_qkvz.out_features, 2 * 16 * 128 + 2 * 32 * 128);
  EXPECT_EQ(g.in_proj_ba.out_features, 64);
  EXPECT_EQ(g.conv_weight.size(), static_cast<size_t>(g.conv_dim()) * 4);
  EXPECT_EQ(g.a_log.size(), 32u);
  EXPECT_EQ(g.norm.size(), 128u);
  const MoeWeights& m = *lin.moe;
  EXPECT_EQ(m.n_experts, 256);
  EXPECT_EQ(m.top_k, 10);
  EXPECT_TRUE(m.norm_topk_prob);
  EXPECT_EQ(m.expert_gate_up.size(), 256u);
  EXPECT_EQ(m.shared_expert_gate.out_features, 1);
  EXPECT_NE(RandomModelPresetNote("qwen3-next-80b-a3b").find("256 of the 512 experts"),
            std::string::npos);
}

TEST(ModelPresetTest, UnknownPresetListsTheKnownOnes) {
  Result<ModelDefinition> d = RandomModelDefinition("llama-70b", {});
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("llama-70b"), std::string::npos);
  for (const std::string& name : RandomModelPresets()) {
    EXPECT_NE(d.status().message().find(name), std::string::npos) << name;
  }
  EXPECT_EQ(RandomModelPresets().size(), 6u);
}

TEST(ModelPresetTest, AWindowAppliesToPresetsWithSlidingLayersOnly) {
  RandomModelOptions o;
  o.sliding_window = 5;
  o.n_layers = 2;
  Result<ModelDefinition> g = RandomModelDefinition("tiny-gemma3", o);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->config.sliding_window, 5);
  EXPECT_EQ(g->layers[0].attention->window, 5);
  Result<ModelDefinition> l = RandomModelDefinition("tiny", o);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(l.status().message().find("no sliding layers"), std::string::npos);
  o.sliding_window = -1;
  EXPECT_FALSE(RandomModelDefinition("tiny-gemma3", o).ok());
}

TEST(ModelPresetTest, ExpertCountAppliesToMoePresetsOnly) {
  RandomModelOptions o;
  o.n_experts = 4;
  const ModelDefinition d = Preset("tiny-hybrid", o);
  EXPECT_EQ(d.layers[0].moe->n_experts, 4);
  EXPECT_EQ(d.layers[0].moe->expert_down.size(), 4u);
  EXPECT_EQ(d.layers[0].moe->top_k, 2);
  o.n_experts = 1;
  EXPECT_EQ(Preset("tiny-hybrid", o).layers[0].moe->top_k, 1);  // top-k capped at the experts
  o.n_experts = 4;
  Result<ModelDefinition> dense = RandomModelDefinition("tiny", o);
  ASSERT_FALSE(dense.ok());
  EXPECT_NE(dense.status().message().find("MoE"), std::string::npos);
}

TEST(ModelPresetTest, FewerLayersKeepTheFirstLayersWeights) {
  RandomModelOptions o;
  o.n_layers = 2;
  const ModelDefinition short_model = Preset("llama-3.1-8b", o);
  const ModelDefinition full = Preset("llama-3.1-8b");
  EXPECT_EQ(short_model.config.n_layers, 2);
  ASSERT_EQ(short_model.layers.size(), 2u);
  EXPECT_EQ(SeedOf(short_model.token_embedding), SeedOf(full.token_embedding));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(SeedOf(short_model.layers[i].attention->q), SeedOf(full.layers[i].attention->q));
    EXPECT_EQ(SeedOf(short_model.layers[i].ffn->down), SeedOf(full.layers[i].ffn->down));
    EXPECT_EQ(short_model.layers[i].mixer_norm, full.layers[i].mixer_norm);
  }
  // A different seed gives different weights.
  o.seed = 2;
  EXPECT_NE(SeedOf(Preset("llama-3.1-8b", o).layers[0].attention->q),
            SeedOf(full.layers[0].attention->q));
}

TEST(ModelPresetTest, MaterialisedWeightsAreTheSeededValuesExactly) {
  RandomModelOptions o;
  o.seed = 7;
  const ModelDefinition seeded = Preset("tiny-hybrid", o);
  o.materialize = true;
  const ModelDefinition host = Preset("tiny-hybrid", o);
  EXPECT_TRUE(seeded.token_embedding.is_random());
  EXPECT_TRUE(seeded.token_embedding.parts.empty());
  EXPECT_EQ(seeded.host_copy_bytes, 0u);

  size_t f32_bytes = 0, gemm_operands_on_call = 0;
  auto check = [&](const ops::LinearWeight& s, const ops::LinearWeight& h, const char* what) {
    SCOPED_TRACE(what);
    EXPECT_TRUE(s.is_random());
    EXPECT_FALSE(h.is_random());
    // Part by part (stacked weights: gate then up), the values the CUDA model fills from the
    // same seeds.
    ASSERT_EQ(h.parts.size(), s.random_parts.size());
    EXPECT_EQ(h.out_features, s.out_features);
    EXPECT_EQ(h.in_features, s.in_features);
    std::vector<uint16_t> all;
    for (size_t p = 0; p < h.parts.size(); ++p) {
      const ops::LinearWeight::RandomPart& rp = s.random_parts[p];
      ASSERT_EQ(h.parts[p].dtype, DType::kBF16);
      ASSERT_EQ(h.parts[p].dim(0), rp.rows);
      ASSERT_EQ(h.parts[p].dim(1), s.in_features);
      const auto* part_bits = h.parts[p].as<const uint16_t>();
      for (int64_t i = 0; i < rp.rows * s.in_features; ++i) {
        ASSERT_EQ(part_bits[i], RandomBf16Bits(rp.seed, i, rp.scale)) << "part " << p << " " << i;
      }
      all.insert(all.end(), part_bits, part_bits + rp.rows * s.in_features);
    }
    const uint16_t* bits = all.data();
    const int64_t n = s.out_features * s.in_features;
    if (h.f32.size() > 0) {
      ASSERT_EQ(h.f32.size(), static_cast<size_t>(n) * 4);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(h.f32.as<float>()[i], Bf16(bits[i])) << i;
      f32_bytes += h.f32.size();
    }
    // No copy kept: the GEMM dequantises the bf16 parts per call (AVX-512 CPUs).
    if (h.f32_on_call) gemm_operands_on_call += 1;
  };
  check(seeded.token_embedding, host.token_embedding, "embedding");
  EXPECT_EQ(host.head.parts[0].data, host.token_embedding.parts[0].data);  // tied: one tensor
  EXPECT_EQ(host.token_embedding.f32.size(), 0u);
  check(seeded.layers[0].delta->in_proj_qkvz, host.layers[0].delta->in_proj_qkvz, "qkvz");
  check(seeded.layers[3].attention->q, host.layers[3].attention->q, "gated q");
  check(seeded.layers[3].moe->expert_gate_up[5], host.layers[3].moe->expert_gate_up[5], "expert");
  check(seeded.layers[3].moe->shared_expert_gate, host.layers[3].moe->shared_expert_gate, "gate");
  EXPECT_GT(f32_bytes + gemm_operands_on_call, 0u) << "no f32 GEMM operand, kept or per call";
  EXPECT_GE(host.host_copy_bytes, f32_bytes);
  // Small vectors are the same host values in both.
  EXPECT_EQ(host.layers[0].delta->conv_weight, seeded.layers[0].delta->conv_weight);
  EXPECT_EQ(host.layers[3].attention->q_norm, seeded.layers[3].attention->q_norm);
  EXPECT_EQ(host.output_norm, seeded.output_norm);
  for (float w : host.output_norm) EXPECT_NEAR(w, 1.0f, 0.1f);

  o.f32_prefill_weights = false;
  const ModelDefinition bf16_only = Preset("tiny-hybrid", o);
  EXPECT_EQ(bf16_only.host_copy_bytes, 0u);
  EXPECT_EQ(bf16_only.layers[3].attention->q.f32.size(), 0u);
}

TEST(ModelPresetTest, CpuModelNeedsMaterialisedWeights) {
  auto ctx = DeviceContext::Cpu(2);
  Result<std::unique_ptr<Model>> m = MakeModel(Preset("tiny"), *ctx);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("materialised"), std::string::npos) << m.status().message();
}

std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = dist(rng);
  return ids;
}

// On-device sampling is a device model's: a host model refuses it before touching any cache.
TEST(ModelPresetTest, CpuModelRefusesOnDeviceSampling) {
  auto ctx = DeviceContext::Cpu(2);
  RandomModelOptions o;
  o.materialize = true;
  Result<std::unique_ptr<Model>> made = MakeModel(Preset("tiny", o), *ctx);
  ASSERT_TRUE(made.ok()) << made.status().message();
  auto cache = (*made)->NewCache(16);
  const std::vector<int32_t> prompt = {1, 2, 3};
  int32_t token = -1;
  StepSampling greedy;
  greedy.token = &token;
  SequenceStep s{cache.get(), prompt, nullptr};
  s.sampling = &greedy;
  UniPrefillConfig dense;
  dense.enabled = false;
  Status st = (*made)->ForwardBatch(*ctx, {&s, 1}, dense);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("CUDA model"), std::string::npos) << st.message();
  EXPECT_EQ(cache->length(), 0);
  EXPECT_EQ(token, -1);
}

TEST(ModelPresetTest, TinyPresetsRunOnTheCpuWithFiniteLogits) {
  auto ctx = DeviceContext::Cpu(2);
  for (const char* name : {"tiny", "tiny-hybrid"}) {
    SCOPED_TRACE(name);
    RandomModelOptions o;
    o.materialize = true;
    Result<std::unique_ptr<Model>> made = MakeModel(Preset(name, o), *ctx);
    ASSERT_TRUE(made.ok()) << made.status().message();
    Model& m = **made;
    const int V = m.config().vocab_size;
    UniPrefillConfig dense;
    dense.enabled = false;
    UniPrefillConfig drop = DefaultUniPrefillConfig(m.config());
    drop.selection.mode = SelectionMode::kFixedRatio;
    drop.selection.keep_ratio = 0.5f;
    for (const UniPrefillConfig* up : {&dense, &drop}) {
      const std::vector<std::vector<int32_t>> prompts = {RandomTokens(600, V, 1),
                                                         RandomTokens(90, V, 2)};
      std::vector<std::unique_ptr<SequenceCache>> caches;
      std::vector<std::vector<float>> logits(2, std::vector<float>(V));
      std::vector<std::vector<KeptTokens>> kept(2);
      std::vector<SequenceStep> steps;
      for (int r = 0; r < 2; ++r) {
        caches.push_back(m.NewCache(600, up->active_drop_layers()));
        steps.push_back({caches[r].get(), prompts[r], logits[r].data(), &kept[r]});
      }
      Status st = m.ForwardBatch(*ctx, steps, *up);
      ASSERT_TRUE(st.ok()) << st.message();
      for (int r = 0; r < 2; ++r) {
        EXPECT_TRUE(std::isfinite(testing::MaxAbs(logits[r]))) << "request " << r;
        EXPECT_GT(testing::MaxAbs(logits[r]), 0.0) << "request " << r;
      }
      EXPECT_TRUE(kept[1].empty());  // 90 tokens <= S + n: never selects
      if (up->enabled) {
        ASSERT_FALSE(kept[0].empty());
        EXPECT_LT(kept[0][0].kept, 600);  // the first drop dropped
      } else {
        EXPECT_TRUE(kept[0].empty());
      }
    }
  }
}

// SegmentCosts: the 8B shape with its drop layers {7, 11, 15, 19, 23, 27}. Segment 0 holds
// layers 0-6 and layer 7's attention (8 attention layers), segments 1-5 a drop layer's FFN, three
// layers and the next drop layer's attention (4 each), segment 6 layer 27's FFN and layers 28-31.
TEST(ModelPresetTest, SegmentCostsSplitTheModelAtItsDropLayers) {
  const ModelDefinition d = Preset("llama-3.1-8b");
  const std::vector<int> drops = {7, 11, 15, 19, 23, 27};
  const std::vector<SegmentCost> costs = SegmentCosts(d, drops);
  ASSERT_EQ(costs.size(), 7u);
  const double mixer = 2.0 * 4096 * (4096 + 1024 + 1024 + 4096), ffn = 2.0 * 3 * 4096 * 14336;
  const double per_row = 32 * (mixer + ffn), per_key = 4.0 * 32 * 128;
  EXPECT_DOUBLE_EQ(per_row, LinearPrefillFlops(d, 1));
  const double want_share[7] = {(7 * (mixer + ffn) + mixer) / per_row,
                                4 * (mixer + ffn) / per_row, 4 * (mixer + ffn) / per_row,
                                4 * (mixer + ffn) / per_row, 4 * (mixer + ffn) / per_row,
                                4 * (mixer + ffn) / per_row, (4 * (mixer + ffn) + ffn) / per_row};
  const int want_attention_layers[7] = {8, 4, 4, 4, 4, 4, 4};
  double shares = 0, keys = 0;
  for (int s = 0; s < 7; ++s) {
    SCOPED_TRACE("segment " + std::to_string(s));
    EXPECT_NEAR(costs[s].linear_share, want_share[s], 1e-12);
    EXPECT_NEAR(costs[s].key_cost, want_attention_layers[s] * per_key / per_row, 1e-15);
    shares += costs[s].linear_share;
    keys += costs[s].key_cost;
  }
  EXPECT_NEAR(shares, 1.0, 1e-12);
  EXPECT_NEAR(keys, AttentionKeyCost(d), 1e-15);
  // No drops: one segment, the whole model.
  const std::vector<SegmentCost> whole = SegmentCosts(d, {});
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_NEAR(whole[0].linear_share, 1.0, 1e-12);
  EXPECT_NEAR(whole[0].key_cost, AttentionKeyCost(d), 1e-15);
}

// Gemma 3 12B's shape: 8 full-attention layers (every 6th) and 40 sliding ones of window 1024.
// Their keys are priced apart: key_cost the full layers' (every cached key), window_key_cost the
// sliding layers' (keys within the window), both over a row's linear FLOPs; per segment, their
// sums the whole model's.
TEST(ModelPresetTest, SlidingWindowLayersKeysArePricedWithTheirWindow) {
  const ModelDefinition d = Preset("gemma-3-12b");
  const double per_row = LinearPrefillFlops(d, 1), per_key = 4.0 * 16 * 256;
  const std::vector<SegmentCost> whole = SegmentCosts(d, {});
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].full_attention_layers, 8);
  EXPECT_NEAR(whole[0].key_cost, 8 * per_key / per_row, 1e-15);
  EXPECT_NEAR(whole[0].window_key_cost, 40 * per_key / per_row, 1e-15);
  EXPECT_EQ(whole[0].window, 1024);
  const std::vector<SegmentCost> split = SegmentCosts(d, {11, 23, 35});
  ASSERT_EQ(split.size(), 4u);
  double window_keys = 0;
  for (const SegmentCost& c : split) {
    EXPECT_EQ(c.window, 1024);  // every segment holds sliding layers
    window_keys += c.window_key_cost;
  }
  EXPECT_NEAR(window_keys, whole[0].window_key_cost, 1e-15);
  // A model without windows prices none.
  const std::vector<SegmentCost> llama = SegmentCosts(Preset("llama-3.1-8b"), {});
  EXPECT_EQ(llama[0].window_key_cost, 0);
  EXPECT_EQ(llama[0].window, 0);
}

// Where only each request's last row goes past the last layer (QueryRows::kLastOfEach), the
// other rows pay there only their key and value projections: Llama-3.1-8B's last layer leaves
// its attention keys (1 of 32 full layers) and all but 2 x 4096 x 2048 of its linear FLOPs the
// last segment's prices; Gemma-3-12B's tiny preset at 5 layers (a sliding last layer) leaves one
// of five windows' keys, at 6 its one full layer's keys. The segments before are untouched.
// What the last-row walk runs of a dense prefill, counted by hand for the 8B shape at 32K: the
// last layer's 32767 rows before the last keep their key and value projections only, and its
// attention is the last row's 32768 keys; a sliding last layer's last row reads its window; no
// change for the every-row walk or a one-token prompt.
TEST(ModelPresetTest, ExecutedFlopsLeaveTheLastLayersOtherRowsOut) {
  const ModelDefinition d = Preset("llama-3.1-8b");
  const int64_t n = 32768;
  const double layer = 2.0 * 4096 * (4096 + 2 * 1024 + 4096 + 3 * 14336);
  const double kv = 2.0 * 4096 * 2 * 1024, per_pair = 4.0 * 32 * 128;
  const double pairs = 32768.0 * 32769 / 2;
  const double dense = DensePrefillFlops(d, n);
  EXPECT_NEAR(dense, 32 * (layer * n + per_pair * pairs), 1e3);
  const double executed = ExecutedDensePrefillFlops(d, n, false);
  EXPECT_NEAR(executed, dense - (n - 1) * (layer - kv) - per_pair * (pairs - n), 1e3);
  EXPECT_NEAR(dense / executed, 1.0315, 1e-4);  // the 3% bench gpu-prefill's column overstates
  EXPECT_EQ(ExecutedDensePrefillFlops(d, n, true), dense);
  EXPECT_EQ(ExecutedDensePrefillFlops(d, 1, false), DensePrefillFlops(d, 1));
  RandomModelOptions o;
  o.n_layers = 5;  // tiny-gemma3's fifth layer slides (window 48)
  Result<ModelDefinition> g5 = RandomModelDefinition("tiny-gemma3", o);
  ASSERT_TRUE(g5.ok());
  const double g_pair = 4.0 * 4 * 128;
  const double g_window_pairs = 48.0 * 49 / 2 + (1000 - 48) * 48.0;
  const double g_dense = DensePrefillFlops(*g5, 1000), g_exec = ExecutedDensePrefillFlops(*g5, 1000, false);
  const double g_linear = LinearPrefillFlops(*g5, 1) / 5;  // five equal layers
  const double g_kv = 2.0 * g5->config.hidden * 2 * g5->layers.back().attention->n_kv_heads * 128;
  EXPECT_NEAR(g_exec, g_dense - 999 * (g_linear - g_kv) - g_pair * (g_window_pairs - 48), 1e-3 * g_dense);
}

TEST(ModelPresetTest, TheLastLayerPricesOnlyItsKeysAndValuesForRowsPastIt) {
  const ModelDefinition d = Preset("llama-3.1-8b");
  const double per_row = LinearPrefillFlops(d, 1), per_key = 4.0 * 32 * 128;
  const std::vector<int> drops = {7, 11, 15, 19, 23, 27};
  const std::vector<SegmentCost> every = SegmentCosts(d, drops);
  std::vector<SegmentCost> last = every;
  PriceLastLayerRowsOnly(d, drops, &last);
  for (size_t s = 0; s + 1 < every.size(); ++s) {
    EXPECT_EQ(last[s].linear_share, every[s].linear_share) << s;
    EXPECT_EQ(last[s].key_cost, every[s].key_cost) << s;
  }
  // One layer: q 4096x4096, k and v 4096x1024 each, o 4096x4096, FFN 3 x 4096 x 14336.
  const double layer = 2.0 * 4096 * (4096 + 2 * 1024 + 4096 + 3 * 14336);
  EXPECT_NEAR(layer * 32, per_row, 1.0);
  const double kept = 2.0 * 4096 * 2 * 1024;
  EXPECT_NEAR(last.back().linear_share, every.back().linear_share - (layer - kept) / per_row,
              1e-12);
  EXPECT_NEAR(last.back().key_cost, every.back().key_cost - per_key / per_row, 1e-15);
  EXPECT_EQ(last.back().full_attention_layers, every.back().full_attention_layers);
  // Sliding last layer: one window's keys fewer, the window kept (others hold it).
  RandomModelOptions o;
  o.n_layers = 5;
  Result<ModelDefinition> g5 = RandomModelDefinition("tiny-gemma3", o);
  ASSERT_TRUE(g5.ok());
  std::vector<SegmentCost> w = SegmentCosts(*g5, {});
  const double g_per_row = LinearPrefillFlops(*g5, 1), g_key = 4.0 * 4 * 128;
  EXPECT_NEAR(w[0].window_key_cost, 5 * g_key / g_per_row, 1e-15);
  PriceLastLayerRowsOnly(*g5, {}, &w);
  EXPECT_NEAR(w[0].window_key_cost, 4 * g_key / g_per_row, 1e-15);
  EXPECT_EQ(w[0].window, 48);
  EXPECT_EQ(w[0].key_cost, 0);
  // Full last layer (the preset's 6): its keys go, the windows stay.
  o.n_layers = 6;
  Result<ModelDefinition> g6 = RandomModelDefinition("tiny-gemma3", o);
  ASSERT_TRUE(g6.ok());
  std::vector<SegmentCost> f = SegmentCosts(*g6, {});
  EXPECT_GT(f[0].key_cost, 0);
  const double window_keys = f[0].window_key_cost;
  PriceLastLayerRowsOnly(*g6, {}, &f);
  EXPECT_NEAR(f[0].key_cost, 0, 1e-15);
  EXPECT_EQ(f[0].window_key_cost, window_keys);
}

// The walk over every row (LoadOptions::last_layer_every_row) keeps the prices of every row.
TEST(ModelPresetTest, TheEveryRowWalkPricesTheLastLayerForEveryRow) {
  TransformerModel model(std::make_unique<const ModelDefinition>(Preset("llama-3.1-8b")),
                         std::make_unique<testing::StubLayerBackend>());
  const ModelDefinition d = Preset("llama-3.1-8b");
  std::vector<SegmentCost> last = SegmentCosts(d, {});
  PriceLastLayerRowsOnly(d, {}, &last);
  EXPECT_DOUBLE_EQ(model.SegmentCosts({})[0].key_cost, last[0].key_cost);
  EXPECT_DOUBLE_EQ(model.SegmentCosts({})[0].linear_share, last[0].linear_share);
  model.set_last_layer_every_row(true);
  EXPECT_DOUBLE_EQ(model.SegmentCosts({})[0].key_cost, SegmentCosts(d, {})[0].key_cost);
  EXPECT_DOUBLE_EQ(model.SegmentCosts({})[0].linear_share, 1.0);
}

// A backend that only reports prices (TransformerModel::SegmentCosts reads nothing else).
class PricedBackend final : public testing::StubLayerBackend {
 public:
  explicit PricedBackend(PrefixAttentionCost cost) : cost_(cost) {}
  PrefixAttentionCost PrefixAttentionCosts() const override { return cost_; }

 private:
  PrefixAttentionCost cost_;
};

// The model's segment prices with what its backend measured: keys times the attention slowdown,
// the prefix copy and a decode's keys per full-attention layer over a row's linear FLOPs, and the
// backend's query tile, in every segment and in the whole model's price.
TEST(ModelPresetTest, SegmentCostsCarryTheBackendsMeasuredPrices) {
  PrefixAttentionCost measured;
  measured.slowdown = 1.25;
  measured.copy_flops_per_key = 3e6;
  measured.query_tile_rows = 128;
  measured.decode_flops_per_key = 1.5e6;
  measured.weight_floor_rows = 190;
  measured.min_extra_chunk_rows = 128;
  measured.linear_row_tile = 128;
  const TransformerModel model(std::make_unique<const ModelDefinition>(Preset("llama-3.1-8b")),
                               std::make_unique<PricedBackend>(measured));
  const ModelDefinition d = Preset("llama-3.1-8b");
  const std::vector<int> drops = {7, 11, 15, 19, 23, 27};
  std::vector<SegmentCost> flops = SegmentCosts(d, drops);
  PriceLastLayerRowsOnly(d, drops, &flops);  // the walk's default (QueryRows::kLastOfEach)
  const std::vector<SegmentCost> priced = model.SegmentCosts(drops);
  ASSERT_EQ(priced.size(), flops.size());
  const double per_row = LinearPrefillFlops(d, 1);
  for (size_t s = 0; s < priced.size(); ++s) {
    SCOPED_TRACE("segment " + std::to_string(s));
    const int layers = flops[s].full_attention_layers;
    EXPECT_DOUBLE_EQ(priced[s].linear_share, flops[s].linear_share);
    EXPECT_DOUBLE_EQ(priced[s].key_cost, 1.25 * flops[s].key_cost);
    EXPECT_DOUBLE_EQ(priced[s].window_key_cost, 1.25 * flops[s].window_key_cost);
    EXPECT_DOUBLE_EQ(priced[s].prefix_key_cost, layers * 3e6 / per_row);
    EXPECT_DOUBLE_EQ(priced[s].decode_key_cost, layers * 1.5e6 / per_row);
    EXPECT_EQ(priced[s].query_tile_rows, 128);
    EXPECT_DOUBLE_EQ(priced[s].weight_floor_rows, 190);
    EXPECT_EQ(priced[s].min_extra_chunk_rows, 128);
    EXPECT_EQ(priced[s].linear_row_tile, 128);
  }
  const std::vector<SegmentCost> whole = model.SegmentCosts({});
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_DOUBLE_EQ(whole[0].decode_key_cost, 32 * 1.5e6 / per_row);
  EXPECT_EQ(whole[0].query_tile_rows, 128);
  EXPECT_DOUBLE_EQ(whole[0].weight_floor_rows, 190);
  EXPECT_EQ(whole[0].linear_row_tile, 128);
  // An MoE model leaves the floor unpriced: a few rows stream only their experts' weights.
  const TransformerModel moe(
      std::make_unique<const ModelDefinition>(Preset("tiny-hybrid")),
      std::make_unique<PricedBackend>(measured));
  for (const SegmentCost& c : moe.SegmentCosts({3})) EXPECT_DOUBLE_EQ(c.weight_floor_rows, 0);
  // Sliding windows' keys take the slowdown too (Gemma 3 12B: 40 sliding layers).
  const TransformerModel gemma(std::make_unique<const ModelDefinition>(Preset("gemma-3-12b")),
                               std::make_unique<PricedBackend>(measured));
  const std::vector<SegmentCost> gemma_flops = SegmentCosts(Preset("gemma-3-12b"), {});
  const std::vector<SegmentCost> gemma_priced = gemma.SegmentCosts({});
  ASSERT_GT(gemma_flops[0].window_key_cost, 0);
  EXPECT_DOUBLE_EQ(gemma_priced[0].window_key_cost, 1.25 * gemma_flops[0].window_key_cost);
  EXPECT_EQ(gemma_priced[0].window, 1024);
}

}  // namespace
}  // namespace uniprefill
