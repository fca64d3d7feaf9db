// UniPrefill configuration: reference defaults recognised, the documented rule for other models,
// validation messages, layer-list parsing.
#include "sparsity/uniprefill_config.h"

#include <gtest/gtest.h>

namespace uniprefill {
namespace {

ModelConfig MakeModel(const std::string& arch, int layers, int hidden, int full_every) {
  ModelConfig c;
  c.architecture = arch;
  c.n_layers = layers;
  c.hidden = hidden;
  for (int i = 0; i < layers; ++i) {
    const bool full = full_every <= 1 || (i + 1) % full_every == 0;
    c.layer_kinds.push_back(full ? LayerKind::kFullAttention
                                 : (arch == "qwen3_next" ? LayerKind::kLinearAttention
                                                         : LayerKind::kSlidingAttention));
  }
  return c;
}

TEST(UniPrefillConfigTest, ReferenceDefaults) {
  UniPrefillConfig llama = DefaultUniPrefillConfig(MakeModel("llama", 32, 4096, 1));
  EXPECT_EQ(llama.drop_layers, (std::vector<int>{7, 11, 15, 19, 23, 27}));
  EXPECT_FLOAT_EQ(llama.selection.top_p, 0.99f);
  UniPrefillConfig gemma = DefaultUniPrefillConfig(MakeModel("gemma3", 48, 3840, 6));
  EXPECT_EQ(gemma.drop_layers, (std::vector<int>{29, 35, 41}));
  EXPECT_FLOAT_EQ(gemma.selection.top_p, 0.975f);
  UniPrefillConfig qwen = DefaultUniPrefillConfig(MakeModel("qwen3_next", 48, 2048, 4));
  EXPECT_EQ(qwen.drop_layers, (std::vector<int>{7, 11, 15, 19, 23, 27, 31, 35, 39, 43}));
  EXPECT_FLOAT_EQ(qwen.selection.top_p, 0.99f);
  for (const UniPrefillConfig& c : {llama, gemma, qwen}) {
    EXPECT_EQ(c.selection.block_size, 64);
    EXPECT_EQ(c.selection.sink, 128);
    EXPECT_EQ(c.selection.last_n, 128);
    EXPECT_NE(c.origin.find("reference"), std::string::npos);
  }
}

TEST(UniPrefillConfigTest, RuleForOtherModels) {
  // A Gemma 3 of 18 layers but another width (full attention at 5, 11, 17): the sliding-hybrid
  // rule starts at 0.6 L - 1 and stops before 0.9 L.
  UniPrefillConfig g = DefaultUniPrefillConfig(MakeModel("gemma3", 18, 1024, 6));
  EXPECT_EQ(g.drop_layers, (std::vector<int>{11}));
  EXPECT_FLOAT_EQ(g.selection.top_p, 0.975f);
  EXPECT_EQ(g.window_mode, WindowMode::kAliveIndex);
  EXPECT_NE(g.origin.find("rule"), std::string::npos);
  // A 12-layer sliding hybrid (full attention at 5 and 11) has no full layer in [6.2, 10.8): the
  // nearest one that is not the last layer.
  EXPECT_EQ(DefaultUniPrefillConfig(MakeModel("gemma3", 12, 256, 6)).drop_layers,
            (std::vector<int>{5}));
  // The rule reproduces the Gemma-3-12B reference set on a 48-layer Gemma of another width.
  EXPECT_EQ(DefaultUniPrefillConfig(MakeModel("gemma3", 48, 2048, 6)).drop_layers,
            (std::vector<int>{29, 35, 41}));
  // A 32-layer llama of another width follows the rule, which reproduces the 8B reference.
  EXPECT_EQ(DefaultUniPrefillConfig(MakeModel("llama", 32, 2048, 1)).drop_layers,
            (std::vector<int>{7, 11, 15, 19, 23, 27}));
  // Qwen3-Next cut to 16 layers: full attention at 3, 7, 11, 15.
  EXPECT_EQ(DefaultUniPrefillConfig(MakeModel("qwen3_next", 16, 2048, 4)).drop_layers,
            (std::vector<int>{3, 7, 11}));
  for (int layers : {1, 2, 5, 12, 18, 26, 40, 62, 80}) {
    const ModelConfig m = MakeModel("llama", layers, 1024, layers % 3 == 0 ? 6 : 1);
    EXPECT_TRUE(ValidateUniPrefillConfig(DefaultUniPrefillConfig(m), m).ok()) << layers;
  }
}

TEST(UniPrefillConfigTest, CalibratedGemma3_270M) {
  const UniPrefillConfig g = DefaultUniPrefillConfig(MakeModel("gemma3", 18, 640, 6));
  EXPECT_EQ(g.drop_layers, (std::vector<int>{11}));
  EXPECT_FLOAT_EQ(g.selection.top_p, 0.95f);
  EXPECT_EQ(g.window_mode, WindowMode::kPosition);
  EXPECT_NE(g.origin.find("calibrated"), std::string::npos);
}

TEST(UniPrefillConfigTest, CalibratedSmolLm2_135M) {
  const ModelConfig m = MakeModel("llama", 30, 576, 1);
  const UniPrefillConfig c = DefaultUniPrefillConfig(m);
  EXPECT_EQ(c.drop_layers, (std::vector<int>{15}));
  EXPECT_FLOAT_EQ(c.selection.top_p, 0.995f);
  EXPECT_NE(c.origin.find("calibrated for SmolLM2"), std::string::npos);
  EXPECT_TRUE(ValidateUniPrefillConfig(c, m).ok());
  // Another 30-layer llama width keeps the rule.
  EXPECT_EQ(DefaultUniPrefillConfig(MakeModel("llama", 30, 1024, 1)).drop_layers,
            (std::vector<int>{7, 11, 15, 19, 23}));
}

TEST(UniPrefillConfigTest, ValidationNamesTheProblem) {
  const ModelConfig m = MakeModel("gemma3", 18, 640, 6);
  UniPrefillConfig c = DefaultUniPrefillConfig(m);
  c.drop_layers = {4};
  EXPECT_NE(ValidateUniPrefillConfig(c, m).message().find("full-attention layers are 5,11,17"),
            std::string::npos);
  c.drop_layers = {11, 5};
  EXPECT_NE(ValidateUniPrefillConfig(c, m).message().find("ascending"), std::string::npos);
  c.drop_layers = {18};
  EXPECT_NE(ValidateUniPrefillConfig(c, m).message().find("outside"), std::string::npos);
  c.drop_layers = {5};
  c.selection.top_p = 0;
  EXPECT_FALSE(ValidateUniPrefillConfig(c, m).ok());
}

TEST(UniPrefillConfigTest, ParsesLayerLists) {
  EXPECT_EQ(*ParseLayerList("7,11,15"), (std::vector<int>{7, 11, 15}));
  EXPECT_TRUE(ParseLayerList("")->empty());
  EXPECT_FALSE(ParseLayerList("7,,11").ok());
  EXPECT_FALSE(ParseLayerList("7,a").ok());
  EXPECT_FALSE(ParseLayerList("7.5").ok());
  EXPECT_EQ(LayerListToString({5, 11}), "5,11");
  EXPECT_EQ(LayerListToString({}), "none");
}

}  // namespace
}  // namespace uniprefill
