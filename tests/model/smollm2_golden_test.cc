// SmolLM2-135M-Instruct (the second real model: Llama family, Q4_1 weights, a Q8_0 tied head)
// against the committed goldens made by tools/make_smollm2_goldens.py: an fp32 numpy forward on
// the same dequantised weights (tools/llama_numpy.py) and llama.cpp. Per prompt (short text, a
// ChatML conversation, ~500 tokens of Python, ~7.3K tokens of haystack document): first-token
// logits close to fp32 with identical top-5, the 32-token greedy continuation identical to
// fp32's, and the first token equal to llama.cpp's where fp32's lead is clear. Default mode
// (int16 decode activations) and the exact f32 mode (--f32-decode). Mirrors gemma3_golden_test.cc; the model is installed by
// scripts/setup.sh (missing: a failure, as every required asset).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "model/model.h"
#include "testing/compare.h"
#include "testing/required_asset.h"

namespace uniprefill {
namespace {

const std::string kModel =
    std::string(UP_SOURCE_DIR) + "/models/smollm2-135m-instruct-q4_1.gguf";
const std::string kGoldens = std::string(UP_SOURCE_DIR) + "/tests/goldens/model_smollm2/";

std::vector<int32_t> TopK(const std::vector<float>& logits, int k) {
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  ids.resize(k);
  return ids;
}

std::vector<float> ReadF32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(0, std::ios::end);
  std::vector<float> v(static_cast<size_t>(in.tellg()) / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  return v;
}

size_t PrefixAgreement(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

struct GoldenCase {
  int prompt;
  bool f32_decode;
};

void PrintTo(const GoldenCase& c, std::ostream* os) {
  *os << "prompt" << c.prompt << (c.f32_decode ? " f32 decode" : " int16 decode");
}

class SmolLm2GoldenTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(SmolLm2GoldenTest, MatchesFp32ReferenceAndLlamaCpp) {
  const GoldenCase gc = GetParam();
  const std::string json_path = kGoldens + "prompt" + std::to_string(gc.prompt) + ".json";
  UP_REQUIRE_ASSET(kModel, "the second model, SmolLM2-135M-Instruct");
  UP_REQUIRE_ASSET(json_path, "the committed golden file");
  const nlohmann::json g = nlohmann::json::parse(std::ifstream(json_path));
  const std::vector<int32_t> ids = g["ids"].get<std::vector<int32_t>>();
  const std::vector<int32_t> fp32_greedy = g["fp32"]["greedy"].get<std::vector<int32_t>>();
  const std::vector<int32_t> llama_greedy = g["llama_cpp"]["greedy"].get<std::vector<int32_t>>();
  const std::vector<float> ref = ReadF32(kGoldens + g["fp32"]["logits_file"].get<std::string>());

  auto ctx = DeviceContext::Cpu(0);
  LoadOptions options;
  options.f32_decode = gc.f32_decode;
  auto model_or = LoadModel(kModel, *ctx, options);
  ASSERT_TRUE(model_or.ok()) << model_or.status().message();
  Model& model = **model_or;
  ASSERT_EQ(ref.size(), static_cast<size_t>(model.config().vocab_size));

  auto cache = model.NewCache(static_cast<int>(ids.size() + fp32_greedy.size() + 1));
  std::vector<float> logits(model.config().vocab_size);
  ASSERT_TRUE(model.Forward(*ctx, ids, *cache, logits.data()).ok());

  const double max_abs = testing::MaxAbsDiff(logits, ref);
  const double max_rel = testing::MaxErrorOverMaxAbs(logits, ref);  // over the largest |logit|
  EXPECT_EQ(TopK(logits, 5), TopK(ref, 5));
  // f32 everywhere: only summation order differs from the reference (measured max abs 4.4e-4 at
  // 7.3K tokens, 3.7e-5 below). int16 activations in the single-row matvecs add more (measured
  // up to 5.9e-3 abs, 1.8e-4 rel). Bounds: about 3-4x the measured maxima.
  EXPECT_LT(max_abs, gc.f32_decode ? 2e-3 : 2e-2);
  EXPECT_LT(max_rel, gc.f32_decode ? 1e-4 : 5e-4);

  std::vector<int32_t> greedy;
  for (size_t step = 0; step < fp32_greedy.size(); ++step) {
    const int32_t next = ArgMax(logits);
    greedy.push_back(next);
    if (step + 1 == fp32_greedy.size()) break;
    const int32_t one[1] = {next};
    ASSERT_TRUE(model.Forward(*ctx, one, *cache, logits.data()).ok());
  }
  EXPECT_EQ(greedy, fp32_greedy);
  // llama.cpp's first-token logits differ from fp32 by up to ~0.9 (int8 activations, f16 KV), so
  // its first token must match only where fp32's top-1 leads by more than that noise could flip;
  // prompt 4's lead is 0.019 (fp32 ':' vs llama.cpp ' 7391'), recorded, not asserted.
  if (g["agreement"]["fp32_top1_margin"].get<double>() > 0.1) {
    EXPECT_EQ(greedy.front(), llama_greedy.front());
  }
  const size_t agree_fp32 = PrefixAgreement(greedy, fp32_greedy);
  const size_t agree_llama = PrefixAgreement(greedy, llama_greedy);
  std::printf("smollm2 golden prompt%d (%s): %zu tokens | first-token logits vs fp32: max abs %.3g,"
              " max rel %.3g | greedy prefix agreement: fp32 %zu/%zu, llama.cpp %zu/%zu\n",
              gc.prompt, gc.f32_decode ? "f32 decode" : "int16 decode", ids.size(), max_abs,
              max_rel, agree_fp32, greedy.size(), agree_llama, greedy.size());
  RecordProperty("max_abs_err", std::to_string(max_abs));
  RecordProperty("greedy_agree_llama_cpp", static_cast<int>(agree_llama));
}

INSTANTIATE_TEST_SUITE_P(
    Prompts, SmolLm2GoldenTest,
    ::testing::Values(GoldenCase{1, false}, GoldenCase{2, false}, GoldenCase{3, false},
                      GoldenCase{4, false}, GoldenCase{1, true}, GoldenCase{2, true},
                      GoldenCase{3, true}, GoldenCase{4, true}),
    [](const auto& p) {
      return "prompt" + std::to_string(p.param.prompt) + (p.param.f32_decode ? "_f32" : "");
    });

}  // namespace
}  // namespace uniprefill
