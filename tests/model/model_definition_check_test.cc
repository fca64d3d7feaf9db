// ModelDefinition::Check refuses what a damaged or hostile model file would otherwise turn into
// NaN logits without a word: non-finite or out-of-range hyper-parameters, and NaN / Inf in the
// weights it probes: the output norm, sampled rows of the token embedding, and every weight of the
// first and the last layer (norms and small vectors whole; projections whole up to 1M values,
// 64 evenly spaced rows beyond; routed experts' first and last rows), dequantized when quantized.
// One test per kind plants a NaN and expects the error to name the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "io/dequant.h"
#include "model/model_definition.h"
#include "model/model_presets.h"

namespace uniprefill {
namespace {

ModelDefinition Tiny(const char* preset = "tiny") {
  RandomModelOptions o;
  o.materialize = true;  // host tensors: the embedding rows can be probed
  Result<ModelDefinition> d = RandomModelDefinition(preset, o);
  EXPECT_TRUE(d.ok()) << d.status().message();
  return std::move(*d);
}

void ExpectRefused(const ModelDefinition& d, const std::string& names) {
  const Status st = d.Check();
  ASSERT_FALSE(st.ok()) << names;
  EXPECT_NE(st.message().find(names), std::string::npos) << st.message();
}

// Writes a NaN over element (row, col) of a host bf16 linear weight (rows stacked over its parts).
void PlantNan(ops::LinearWeight& w, int64_t row, int64_t col = 0) {
  for (const TensorView& t : w.parts) {
    const int64_t rows = t.numel() / w.in_features;
    if (row < rows) {
      ASSERT_EQ(t.dtype, DType::kBF16);
      static_cast<uint16_t*>(t.data)[row * w.in_features + col] = 0x7FC0;  // bf16 quiet NaN
      return;
    }
    row -= rows;
  }
  FAIL() << "row out of range";
}

TEST(ModelDefinitionCheckTest, AnIntactDefinitionPasses) {
  EXPECT_TRUE(Tiny().Check().ok());
  EXPECT_TRUE(Tiny("tiny-hybrid").Check().ok());
}

TEST(ModelDefinitionCheckTest, NonFiniteOrOutOfRangeHyperParametersAreRefused) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (float eps : {nan, -1.0f, 0.0f, inf}) {
    ModelDefinition d = Tiny();
    d.config.rms_eps = eps;
    ExpectRefused(d, "rms_epsilon");
  }
  for (double base : {double(nan), -1.0, double(inf)}) {
    ModelDefinition d = Tiny();
    d.config.rope_theta_global = base;
    ExpectRefused(d, "rope freq_base");
  }
}

TEST(ModelDefinitionCheckTest, NanOrInfInProbedWeightsIsRefused) {
  {
    ModelDefinition d = Tiny();
    d.output_norm[3] = std::numeric_limits<float>::quiet_NaN();
    ExpectRefused(d, "output norm");
  }
  {
    ModelDefinition d = Tiny();
    d.layers.back().ffn_norm[0] = std::numeric_limits<float>::infinity();
    ExpectRefused(d, "FFN norm");
  }
  {
    ModelDefinition d = Tiny();
    d.layers.front().mixer_norm.back() = -std::numeric_limits<float>::infinity();
    ExpectRefused(d, "layer 0 attention norm");
  }
}

TEST(ModelDefinitionCheckTest, NanInTheTokenEmbeddingIsRefused) {
  ModelDefinition d = Tiny();
  PlantNan(d.token_embedding, d.token_embedding.out_features - 1, 17);
  ExpectRefused(d, "token embedding (row 999)");
}

TEST(ModelDefinitionCheckTest, NanInAnAttentionProjectionOfAnEdgeLayerIsRefused) {
  const int last = 3;  // tiny has 4 layers
  struct Case {
    int layer;
    ops::LinearWeight AttentionWeights::*w;
    const char* names;
  };
  for (const Case& c : {Case{0, &AttentionWeights::q, "layer 0 attention q"},
                        Case{0, &AttentionWeights::k, "layer 0 attention k"},
                        Case{last, &AttentionWeights::v, "layer 3 attention v"},
                        Case{last, &AttentionWeights::o, "layer 3 attention output"}}) {
    ModelDefinition d = Tiny();
    ops::LinearWeight& w = (*d.layers[c.layer].attention).*c.w;
    PlantNan(w, w.out_features / 2, 5);  // a middle row: these small weights are probed whole
    ExpectRefused(d, c.names);
  }
}

TEST(ModelDefinitionCheckTest, NanInAnMlpProjectionOfAnEdgeLayerIsRefused) {
  {
    ModelDefinition d = Tiny();
    PlantNan(d.layers[0].ffn->gate_up, 600);  // an "up" row (gate rows are 0..511)
    ExpectRefused(d, "layer 0 FFN gate_up (row 600)");
  }
  {
    ModelDefinition d = Tiny();
    PlantNan(d.layers[3].ffn->down, 0, 511);
    ExpectRefused(d, "layer 3 FFN down (row 0)");
  }
}

TEST(ModelDefinitionCheckTest, MiddleLayersAreNotProbed) {
  ModelDefinition d = Tiny();
  PlantNan(d.layers[1].ffn->down, 0);
  EXPECT_TRUE(d.Check().ok()) << "only the first and last layers are probed (cheap by design)";
}

TEST(ModelDefinitionCheckTest, NanInAQuantizedProjectionIsFoundDequantized) {
  ModelDefinition d = Tiny();
  ops::LinearWeight& down = d.layers[3].ffn->down;  // [256, 512]
  // Q8_0: per 32 values one f16 scale and 32 int8; every scale 1 and every value 1, except the
  // last row's last block, whose scale is a NaN.
  const int64_t blocks_per_row = down.in_features / 32;
  std::vector<uint8_t> q8(static_cast<size_t>(down.out_features * blocks_per_row * 34));
  for (int64_t b = 0; b < down.out_features * blocks_per_row; ++b) {
    uint8_t* block = q8.data() + b * 34;
    const uint16_t scale = FloatToHalf(1.0f);
    std::memcpy(block, &scale, 2);
    std::memset(block + 2, 1, 32);
  }
  ops::LinearWeight quantized;
  quantized.out_features = down.out_features;
  quantized.in_features = down.in_features;
  quantized.parts.push_back(TensorView::Contiguous(q8.data(), DType::kQ8_0,
                                                   {down.out_features, down.in_features}));
  down = std::move(quantized);
  EXPECT_TRUE(d.Check().ok()) << d.Check().message();
  const uint16_t nan_half = 0x7E00;
  std::memcpy(q8.data() + q8.size() - 34, &nan_half, 2);
  ExpectRefused(d, "layer 3 FFN down (row 255)");
}

TEST(ModelDefinitionCheckTest, ALargeWeightIsProbedOnSampledRowsFromItsFirstToItsLast) {
  // An 8192 x 256 embedding (2M values > the 1M probed whole): rows 0, 130, ..., 8191 are probed.
  std::vector<uint16_t> bf16(size_t{8192} * 256, 0x3F80);  // 1.0
  ModelDefinition d = Tiny();
  d.config.vocab_size = 8192;
  d.token_embedding.parts = {TensorView::Contiguous(bf16.data(), DType::kBF16, {8192, 256})};
  d.token_embedding.out_features = 8192;
  d.token_embedding.f32 = Buffer();
  d.head.parts = d.token_embedding.parts;
  d.head.out_features = 8192;
  d.head.f32 = Buffer();
  ASSERT_TRUE(d.Check().ok()) << d.Check().message();
  bf16[size_t{1} * 256] = 0x7FC0;  // row 1: between samples, not seen (the probe is a sample)
  EXPECT_TRUE(d.Check().ok());
  bf16[size_t{8191} * 256 + 255] = 0x7FC0;  // the last row is always probed
  ExpectRefused(d, "token embedding (row 8191)");
}

TEST(ModelDefinitionCheckTest, NanInGatedDeltaNetWeightsOfAnEdgeLayerIsRefused) {
  {
    ModelDefinition d = Tiny("tiny-hybrid");
    ASSERT_TRUE(d.layers[0].delta.has_value());
    PlantNan(d.layers[0].delta->in_proj_qkvz, 3);
    ExpectRefused(d, "layer 0 Gated DeltaNet in_proj_qkvz (row 3)");
  }
  {
    ModelDefinition d = Tiny("tiny-hybrid");
    d.layers[0].delta->conv_weight[7] = std::numeric_limits<float>::quiet_NaN();
    ExpectRefused(d, "layer 0 Gated DeltaNet conv1d");
  }
  {
    ModelDefinition d = Tiny("tiny-hybrid");
    d.layers[0].delta->a_log[0] = std::numeric_limits<float>::infinity();
    ExpectRefused(d, "layer 0 Gated DeltaNet A_log");
  }
}

TEST(ModelDefinitionCheckTest, NanInMoeWeightsOfAnEdgeLayerIsRefused) {
  {
    ModelDefinition d = Tiny("tiny-hybrid");
    ASSERT_TRUE(d.layers[7].moe.has_value());
    PlantNan(d.layers[7].moe->router, 2);
    ExpectRefused(d, "layer 7 MoE router");
  }
  {
    ModelDefinition d = Tiny("tiny-hybrid");
    ops::LinearWeight& down = d.layers[7].moe->expert_down[5];
    PlantNan(down, down.out_features - 1);
    ExpectRefused(d, "layer 7 expert 5 down");
  }
  {
    ModelDefinition d = Tiny("tiny-hybrid");
    PlantNan(d.layers[0].moe->shared_gate_up, 0);
    ExpectRefused(d, "layer 0 shared expert gate_up");
  }
}

TEST(ModelDefinitionCheckTest, NanInTheGatedAttentionOfTheLastHybridLayerIsRefused) {
  ModelDefinition d = Tiny("tiny-hybrid");
  ASSERT_TRUE(d.layers[7].attention.has_value());
  PlantNan(d.layers[7].attention->q, d.layers[7].attention->q.out_features - 1);
  ExpectRefused(d, "layer 7 attention q");
}

}  // namespace
}  // namespace uniprefill
