// UniPrefill invariants on every architecture family (tiny HF checkpoints: Llama full attention,
// Qwen3-Next linear/full hybrid with MoE, Gemma 3 sliding/full hybrid):
// - p = 1 at every full-attention drop layer reproduces dense bit for bit (prefill and decodes);
// - with drops, a mixed batch (two prefills, a decode after a dropped prefill) equals each alone,
//   which for Qwen3-Next also checks that each request's DeltaNet state runs over its own kept rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "model/model.h"
#include "testing/compare.h"

namespace uniprefill {
namespace {

std::string Dir(const std::string& family) {
  return std::string(UP_SOURCE_DIR) + "/tests/goldens/hf_tiny/" + family;
}

std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(3, vocab - 1);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = dist(rng);
  return ids;
}

std::vector<int> FullLayers(const ModelConfig& c) {
  std::vector<int> out;
  for (int i = 0; i < c.n_layers; ++i) {
    if (c.layer_kinds[i] == LayerKind::kFullAttention) out.push_back(i);
  }
  return out;
}

std::vector<float> RunOne(Model& m, DeviceContext& ctx, SequenceCache& cache,
                          const std::vector<int32_t>& tokens, const UniPrefillConfig& c,
                          std::vector<KeptTokens>* kept = nullptr) {
  std::vector<float> logits(m.config().vocab_size);
  SequenceStep s{&cache, tokens, logits.data(), kept};
  Status st = m.ForwardBatch(ctx, std::span<const SequenceStep>(&s, 1), c);
  EXPECT_TRUE(st.ok()) << st.message();
  return logits;
}

int Argmax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

class UniPrefillFamilyTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ctx_ = DeviceContext::Cpu(2);
    LoadOptions lo;
    lo.f32_decode = true;
    auto m = LoadModel(Dir(GetParam()), *ctx_, lo);
    ASSERT_TRUE(m.ok()) << m.status().message();
    model_ = std::move(*m);
    drops_ = FullLayers(model_->config());
    ASSERT_FALSE(drops_.empty());
  }
  std::unique_ptr<DeviceContext> ctx_;
  std::unique_ptr<Model> model_;
  std::vector<int> drops_;
};

TEST_P(UniPrefillFamilyTest, POneEqualsDenseExactly) {
  Model& m = *model_;
  UniPrefillConfig dense;
  dense.enabled = false;
  UniPrefillConfig up;
  up.drop_layers = drops_;
  up.selection.top_p = 1.0f;
  const std::vector<int32_t> prompt = RandomTokens(700, m.config().vocab_size, 1);
  auto cd = m.NewCache(800), cu = m.NewCache(800, drops_);
  std::vector<KeptTokens> kept;
  std::vector<float> ld = RunOne(m, *ctx_, *cd, prompt, dense);
  std::vector<float> lu = RunOne(m, *ctx_, *cu, prompt, up, &kept);
  EXPECT_EQ(ld, lu);
  ASSERT_EQ(kept.size(), drops_.size());
  for (const KeptTokens& k : kept) EXPECT_EQ(k.kept, 700);
  for (int step = 0; step < 3; ++step) {
    const std::vector<int32_t> next = {Argmax(ld)};
    ld = RunOne(m, *ctx_, *cd, next, dense);
    lu = RunOne(m, *ctx_, *cu, next, up);
    EXPECT_EQ(ld, lu) << "decode " << step;
  }
}

TEST_P(UniPrefillFamilyTest, MixedBatchWithDropsEqualsAlone) {
  Model& m = *model_;
  UniPrefillConfig up;
  up.drop_layers = drops_;
  up.selection.mode = sparsity::SelectionMode::kFixedRatio;
  up.selection.keep_ratio = 0.5f;
  const int V = m.config().vocab_size;
  std::vector<std::vector<int32_t>> inputs = {RandomTokens(300, V, 2), RandomTokens(1500, V, 3)};
  // A third request decodes after its own dropped prefill.
  auto hist_alone = m.NewCache(1000, drops_), hist_batched = m.NewCache(1000, drops_);
  const std::vector<int32_t> history = RandomTokens(900, V, 4);
  std::vector<KeptTokens> hist_kept;
  std::vector<float> l = RunOne(m, *ctx_, *hist_alone, history, up, &hist_kept);
  RunOne(m, *ctx_, *hist_batched, history, up);
  ASSERT_EQ(hist_kept.size(), drops_.size());
  EXPECT_LT(hist_kept[0].kept, 900);
  inputs.push_back({Argmax(l)});

  std::vector<std::unique_ptr<SequenceCache>> alone, batched;
  for (int i = 0; i < 2; ++i) {
    alone.push_back(m.NewCache(1600, drops_));
    batched.push_back(m.NewCache(1600, drops_));
  }
  alone.push_back(std::move(hist_alone));
  batched.push_back(std::move(hist_batched));
  std::vector<std::vector<float>> want, got(3, std::vector<float>(V));
  std::vector<std::vector<KeptTokens>> kept_alone(3), kept_batched(3);
  for (int i = 0; i < 3; ++i) want.push_back(RunOne(m, *ctx_, *alone[i], inputs[i], up, &kept_alone[i]));
  std::vector<SequenceStep> steps;
  for (int i = 0; i < 3; ++i) {
    steps.push_back({batched[i].get(), inputs[i], got[i].data(), &kept_batched[i]});
  }
  ASSERT_TRUE(m.ForwardBatch(*ctx_, steps, up).ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(testing::AllCloseToScale(want[i], got[i], 1e-4)) << "request " << i;
    EXPECT_EQ(Argmax(want[i]), Argmax(got[i])) << "request " << i;
    ASSERT_EQ(kept_alone[i].size(), kept_batched[i].size());
    for (size_t k = 0; k < kept_alone[i].size(); ++k) {
      EXPECT_EQ(kept_alone[i][k].kept, kept_batched[i][k].kept);
    }
  }
  EXPECT_EQ(kept_batched[1].size(), drops_.size());
  EXPECT_LT(kept_batched[1][0].kept, 1500);
}

INSTANTIATE_TEST_SUITE_P(Families, UniPrefillFamilyTest,
                         ::testing::Values("llama", "qwen3_next", "gemma3"));

}  // namespace
}  // namespace uniprefill
