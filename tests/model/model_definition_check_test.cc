// ModelDefinition::Check refuses what a damaged or hostile model file would otherwise turn into
// NaN logits without a word: non-finite or out-of-range hyper-parameters, and NaN / Inf in the
// weights it probes (every value of the first and last layers' norms and the output norm, the
// first and last rows of the token embedding).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "model/model_definition.h"
#include "model/model_presets.h"

namespace uniprefill {
namespace {

ModelDefinition Tiny() {
  RandomModelOptions o;
  o.materialize = true;  // host tensors: the embedding rows can be probed
  Result<ModelDefinition> d = RandomModelDefinition("tiny", o);
  EXPECT_TRUE(d.ok()) << d.status().message();
  return std::move(*d);
}

void ExpectRefused(const ModelDefinition& d, const std::string& names) {
  const Status st = d.Check();
  ASSERT_FALSE(st.ok()) << names;
  EXPECT_NE(st.message().find(names), std::string::npos) << st.message();
}

TEST(ModelDefinitionCheckTest, AnIntactDefinitionPasses) {
  EXPECT_TRUE(Tiny().Check().ok());
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

}  // namespace
}  // namespace uniprefill
