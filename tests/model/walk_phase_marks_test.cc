// The walk marks each step's phase on its backend just before the step (LayerBackend::MarkPhase,
// what the CUDA step trace's phases time), after Begin, on every family's layer kinds.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "model/model_presets.h"
#include "model/transformer_model.h"
#include "testing/stub_layer_backend.h"

namespace uniprefill {
namespace {

// Logs "mark:<phase>" for each MarkPhase and "<phase>" for each step it runs; computes nothing.
class RecordingBackend final : public testing::StubLayerBackend {
 public:
  explicit RecordingBackend(std::vector<std::string>* log)
      : StubLayerBackend(/*rows=*/true), log_(log) {}
  Result<bool> Begin(DeviceContext& ctx, std::span<const SequenceStep> steps,
                     const UniPrefillConfig& uniprefill, int n_segments,
                     ForwardStats* stats) override {
    log_->push_back("begin");
    return StubLayerBackend::Begin(ctx, steps, uniprefill, n_segments, stats);
  }
  Status Embed() override { return Step("embed"); }
  Status NormInput(int, NormSlot) override { return Step("norm"); }
  Status NormOutput(int, NormSlot) override { return Step("norm"); }
  Status Attention(int, const DropLayer* drop, QueryRows) override {
    return Step(drop ? "drop_attention" : "attention");
  }
  Status ExchangeSegmentRows(int) override { return Step("segment_exchange"); }
  Status DeltaNet(int) override { return Step("delta_net"); }
  Status GatedFfn(int) override { return Step("ffn"); }
  Status Moe(int) override { return Step("moe"); }
  Status Finish() override { return Step("finish"); }
  Status MarkPhase(WalkPhase phase) override {
    log_->push_back(std::string("mark:") + WalkPhaseName(phase));
    return OkStatus();
  }

 private:
  Status Step(const std::string& name) {
    log_->push_back(name);
    return OkStatus();
  }
  std::vector<std::string>* log_;
};

ModelDefinition TinyHybrid() {
  Result<ModelDefinition> d = RandomModelDefinition("tiny-hybrid", {});
  EXPECT_TRUE(d.ok()) << d.status().message();
  return std::move(d).value();
}

int Count(const std::vector<std::string>& log, const std::string& entry) {
  return static_cast<int>(std::count(log.begin(), log.end(), entry));
}

// tiny-hybrid: Gated DeltaNet and gated attention layers, MoE FFNs; one drop layer makes a
// drop attention and a segment exchange too.
TEST(WalkPhaseMarksTest, EveryStepAfterBeginFollowsItsOwnPhasesMark) {
  const ModelDefinition def = TinyHybrid();
  int attention_layers = 0, delta_layers = 0, moe_layers = 0;
  for (const LayerDefinition& L : def.layers) {
    attention_layers += L.attention ? 1 : 0;
    delta_layers += L.attention ? 0 : 1;
    moe_layers += L.moe ? 1 : 0;
  }
  ASSERT_GT(attention_layers, 1);
  ASSERT_GT(delta_layers, 0);
  int first_attention = 0;
  while (!def.layers[first_attention].attention) ++first_attention;

  for (const bool with_drop : {false, true}) {
    SCOPED_TRACE(with_drop ? "one drop layer" : "dense");
    std::vector<std::string> log;
    TransformerModel model(std::make_unique<const ModelDefinition>(TinyHybrid()),
                           std::make_unique<RecordingBackend>(&log));
    UniPrefillConfig uniprefill;
    uniprefill.enabled = with_drop;
    uniprefill.drop_layers = {first_attention};
    std::unique_ptr<DeviceContext> ctx = DeviceContext::Cpu(1);
    ASSERT_TRUE(model.ForwardBatch(*ctx, {}, uniprefill).ok());

    ASSERT_GE(log.size(), 4u);
    EXPECT_EQ(log[0], "begin");  // Begin is not marked: the trace opens inside it
    EXPECT_EQ(Count(log, "mark:begin"), 0);
    EXPECT_EQ(log[1], "mark:embed");
    EXPECT_EQ(log.back(), "finish");
    // Every step but Begin directly after the mark of its own phase, and no other marks.
    int steps = 0;
    for (size_t i = 1; i < log.size(); ++i) {
      if (log[i].rfind("mark:", 0) == 0) {
        ASSERT_LT(i + 1, log.size()) << "a mark with no step after it";
        EXPECT_EQ(log[i].substr(5), log[i + 1]) << "at entry " << i;
      } else {
        ++steps;
        EXPECT_EQ(log[i - 1], "mark:" + log[i]) << "step " << log[i] << " at entry " << i;
      }
    }
    EXPECT_EQ(static_cast<int>(log.size()), 1 + 2 * steps);
    EXPECT_EQ(Count(log, "delta_net"), delta_layers);
    EXPECT_EQ(Count(log, "moe") + Count(log, "ffn"), static_cast<int>(def.layers.size()));
    EXPECT_EQ(Count(log, "moe"), moe_layers);
    EXPECT_EQ(Count(log, "drop_attention"), with_drop ? 1 : 0);
    EXPECT_EQ(Count(log, "segment_exchange"), with_drop ? 1 : 0);
    EXPECT_EQ(Count(log, "attention") + Count(log, "drop_attention"), attention_layers);
  }
}

}  // namespace
}  // namespace uniprefill
