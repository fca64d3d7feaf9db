// The last layer's queries (QueryRows::kLastOfEach, layer_backend.h) on the CPU backend: only each
// request's last row gets a query, an output and an FFN there, every row's key and value are
// still cached. On every family (tiny HF checkpoints: Llama, Qwen3-Next, Gemma 3) a mixed step
// (a fresh prompt, a decode, a chunk over its cached prefix) and the decodes after it give the
// same logits as the last layer over every row (LoadOptions::last_layer_every_row) up to f32
// rounding, and the decodes after them bit for bit (the same caches), with and without
// UniPrefill drops before the last layer; ForwardStats::last_layer_rows
// says how many rows went past it. Also UNIPREFILL_LAST_LAYER_EVERY_ROW's parsing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/model_presets.h"
#include "model/transformer_model.h"
#include "testing/compare.h"
#include "testing/last_layer_scenario.h"

namespace uniprefill {
namespace {

std::string Dir(const std::string& family) {
  return std::string(UP_SOURCE_DIR) + "/tests/goldens/hf_tiny/" + family;
}

// The full-attention layers before the last (drop candidates that leave the last layer alone).
std::vector<int> DropsBeforeTheLast(const ModelConfig& c) {
  std::vector<int> out;
  for (int i = 0; i + 1 < c.n_layers; ++i) {
    if (c.layer_kinds[i] == LayerKind::kFullAttention) out.push_back(i);
  }
  return out;
}

// The forwards with prefill rows: within f32 rounding (the last rows' attention runs as one-row
// problems, which the CPU op splits over the keys differently: measured 0.9e-7 .. 2.7e-7 of the
// logits' scale; a wrong row is of order 1). The decode-only forwards after: bit for bit (the
// caches are the same).
constexpr double kRounding = 1e-5;

void ExpectSameLogits(const testing::LastLayerTrace& last, const testing::LastLayerTrace& every) {
  ASSERT_EQ(last.logits.size(), every.logits.size());
  ASSERT_GT(last.logits.size(), testing::LastLayerTrace::kFirstDecodeOnly);
  for (size_t i = 0; i < last.logits.size(); ++i) {
    const double e = testing::MaxErrorOverMaxAbs(last.logits[i], every.logits[i]);
    if (i < testing::LastLayerTrace::kFirstDecodeOnly) {
      EXPECT_LE(e, kRounding) << "logits " << i;
    } else {
      EXPECT_EQ(last.logits[i], every.logits[i]) << "logits " << i << " differ by " << e;
    }
  }
}

UniPrefillConfig Dense() {
  UniPrefillConfig c;
  c.enabled = false;
  return c;
}

class LastLayerRowsTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Model> Load(bool every_row) {
    LoadOptions lo;
    lo.f32_decode = true;
    lo.last_layer_every_row = every_row;
    auto m = LoadModel(Dir(GetParam()), *ctx_, lo);
    EXPECT_TRUE(m.ok()) << m.status().message();
    return m.ok() ? std::move(m).value() : nullptr;
  }
  void SetUp() override {
    ::unsetenv("UNIPREFILL_LAST_LAYER_EVERY_ROW");
    ctx_ = DeviceContext::Cpu(2);
  }
  std::unique_ptr<DeviceContext> ctx_;
};

TEST_P(LastLayerRowsTest, OnlyTheLastRowsGivesTheLogitsOfEveryRow) {
  auto last = Load(false), every = Load(true);
  ASSERT_TRUE(last && every);
  const testing::LastLayerScenario z;
  const testing::LastLayerTrace tl = testing::RunLastLayerScenario(*last, *ctx_, Dense(), z),
                                te = testing::RunLastLayerScenario(*every, *ctx_, Dense(), z);
  ExpectSameLogits(tl, te);
  // Rows past the last layer: one per request with rows, against every row of the step.
  EXPECT_EQ(tl.last_layer_rows, z.LastRows());
  EXPECT_EQ(te.last_layer_rows, z.EveryRow());
}

TEST_P(LastLayerRowsTest, DropsBeforeTheLastLayerKeepTheirRowsUntilIt) {
  auto last = Load(false), every = Load(true);
  ASSERT_TRUE(last && every);
  UniPrefillConfig up;
  const std::vector<int> before = DropsBeforeTheLast(last->config());
  if (before.empty()) GTEST_SKIP() << "no full-attention layer before the last";
  up.drop_layers = {before.front()};
  up.selection.mode = sparsity::SelectionMode::kFixedRatio;
  up.selection.keep_ratio = 0.5f;
  up.selection.block_size = 16;
  up.selection.sink = 16;
  up.selection.last_n = 16;
  const testing::LastLayerScenario z;
  const testing::LastLayerTrace tl = testing::RunLastLayerScenario(*last, *ctx_, up, z),
                                te = testing::RunLastLayerScenario(*every, *ctx_, up, z);
  ExpectSameLogits(tl, te);
  EXPECT_EQ(tl.last_layer_rows, z.LastRows());
  // The 300-token prompt and the 64-row chunk reached the last layer with about half their rows.
  ASSERT_EQ(te.last_layer_rows.size(), 6u);
  EXPECT_LT(te.last_layer_rows[1], 1 + 64 + 200);
  EXPECT_GT(te.last_layer_rows[1], 1 + 20 + 120);
}

INSTANTIATE_TEST_SUITE_P(Families, LastLayerRowsTest,
                         ::testing::Values("llama", "qwen3_next", "gemma3"));

// A sliding-window last layer (the tiny Gemma 3 preset cut to its 5 sliding layers, window 48):
// the last rows see their windows of the cache, fresh prompts and chunks longer than the window.
TEST(LastLayerRowsSlidingTest, ASlidingLastLayerGivesTheLogitsOfEveryRow) {
  auto ctx = DeviceContext::Cpu(2);
  std::unique_ptr<Model> models[2];
  for (int every = 0; every < 2; ++every) {
    RandomModelOptions o;
    o.seed = 5;
    o.n_layers = 5;
    o.materialize = true;
    o.f32_decode = true;
    Result<ModelDefinition> d = RandomModelDefinition("tiny-gemma3", o);
    ASSERT_TRUE(d.ok()) << d.status().message();
    ASSERT_EQ(d->config.layer_kinds.back(), LayerKind::kSlidingAttention);
    LoadOptions lo;
    lo.f32_decode = true;
    lo.last_layer_every_row = every == 1;
    Result<std::unique_ptr<Model>> m = MakeModel(std::move(d).value(), *ctx, lo);
    ASSERT_TRUE(m.ok()) << m.status().message();
    models[every] = std::move(m).value();
  }
  testing::LastLayerScenario z;
  z.fresh = 47 + 16 * 16;  // its window's first key opens a 16-entry page
  const testing::LastLayerTrace tl = testing::RunLastLayerScenario(*models[0], *ctx, Dense(), z),
                                te = testing::RunLastLayerScenario(*models[1], *ctx, Dense(), z);
  ExpectSameLogits(tl, te);
  EXPECT_EQ(tl.last_layer_rows, z.LastRows());
  EXPECT_EQ(te.last_layer_rows, z.EveryRow());
}

TEST(LastLayerEveryRowTest, TheEnvironmentOverridesTheOptionAndRejectsOtherValues) {
  LoadOptions on, off;
  on.last_layer_every_row = true;
  ::unsetenv("UNIPREFILL_LAST_LAYER_EVERY_ROW");
  EXPECT_TRUE(*LastLayerEveryRow(on));
  EXPECT_FALSE(*LastLayerEveryRow(off));
  ::setenv("UNIPREFILL_LAST_LAYER_EVERY_ROW", "1", 1);
  EXPECT_TRUE(*LastLayerEveryRow(off));
  ::setenv("UNIPREFILL_LAST_LAYER_EVERY_ROW", "0", 1);
  EXPECT_FALSE(*LastLayerEveryRow(on));
  ::setenv("UNIPREFILL_LAST_LAYER_EVERY_ROW", "yes", 1);
  const Result<bool> bad = LastLayerEveryRow(off);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("UNIPREFILL_LAST_LAYER_EVERY_ROW='yes'"),
            std::string::npos);
  // A model load names it too.
  auto ctx = DeviceContext::Cpu(1);
  const Result<std::unique_ptr<Model>> m = LoadModel(Dir("llama"), *ctx, off);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("UNIPREFILL_LAST_LAYER_EVERY_ROW"), std::string::npos);
  ::unsetenv("UNIPREFILL_LAST_LAYER_EVERY_ROW");
}

}  // namespace
}  // namespace uniprefill
