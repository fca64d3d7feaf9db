// Shared helpers of the CUDA model tests (tests/model/cuda/): loading a family's tiny checkpoint
// on the host and the GPU, bounds, greedy runs, the GPU-vs-host prompt comparison, and the
// CudaModelFamilyTest fixture (instantiated once, in cuda_model_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_kv_cache.h"
#include "model/model.h"
#include "model/model_presets.h"
#include "model/transformer_model.h"
#include "ops/cuda/cudnn_attention.h"
#include "testing/compare.h"
#include "testing/cuda_test_util.h"
#include "testing/required_asset.h"
#include "testing/segment_chunks.h"
#include "testing/tiny_gemma3.h"

namespace uniprefill::cuda_model_test {


// ||gpu - cpu|| / ||cpu|| of first-token logits: bf16 weights and activations through every
// layer. Measured on the H200 (bench/results/gpu/cuda_model_tests.log): Gemma 3 and Llama tiny
// checkpoints 6e-3 .. 2.2e-2, tiny GGUF 1.2e-2 .. 1.8e-2, Gemma 3 270M 9e-3 .. 2.1e-2; the bound
// leaves about 2x headroom.
inline constexpr double kLogitsBound = 0.05;
// The tiny Qwen3-Next (all experts routed) measures 1.9e-2 .. 3.7e-2 except one 37-token prompt at
// 1.3e-1, of which 7.8e-2 is already there after layer 0 (a DeltaNet + MoE layer) whichever
// delta-rule kernel runs (DISABLED_ErrorByDepth). That prompt is ill-conditioned, not mishandled:
// on the CPU alone, rounding only the DeltaNet's intermediates (projections, conv output, core
// output) to bf16 moves its logits by 3.9e-2 after layer 0 and 7.0e-2 after 8 layers, against
// 1.5e-3 / 0.9e-2 for the other prompts. Its bound is therefore wider.
inline constexpr double kQwenLogitsBound = 0.15;
inline double BoundFor(const std::string& label) {
  return label.rfind("qwen3_next", 0) == 0 ? kQwenLogitsBound : kLogitsBound;
}

// The source tree: $UP_SOURCE_DIR when set (binaries built elsewhere and run on a GPU machine's
// copy of the checkout), else where this binary was built from.
inline std::string SourceDir() {
  const char* env = std::getenv("UP_SOURCE_DIR");
  return env && *env ? env : UP_SOURCE_DIR;
}
inline std::string TinyDir(const std::string& family) {
  return SourceDir() + "/tests/goldens/hf_tiny/" + family;
}
// A model for same-binary comparisons of the backend's environment switches: the tiny checkpoint
// of `source` (a family), or with "tiny" the tiny preset (seed 9), loaded with `variables` set
// (MakeCudaBackend reads them at load) and unset after; null on a failure (reported).
inline std::unique_ptr<Model> LoadWithVariables(
    DeviceContext& ctx, const std::string& source,
    const std::vector<std::pair<const char*, const char*>>& variables) {
  for (const auto& [name, value] : variables) setenv(name, value, 1);
  LoadOptions lo;
  lo.gpu_cudnn_autotune = false;
  Result<std::unique_ptr<Model>> m = [&]() -> Result<std::unique_ptr<Model>> {
    if (source != "tiny") return LoadModel(TinyDir(source), ctx, lo);
    RandomModelOptions o;
    o.seed = 9;
    UP_ASSIGN_OR_RETURN(ModelDefinition d, RandomModelDefinition(source, o));
    return MakeModel(std::move(d), ctx, lo);
  }();
  for (const auto& [name, value] : variables) unsetenv(name);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? std::move(m).value() : nullptr;
}

inline std::string Gemma270m() { return SourceDir() + "/models/gemma-3-270m-q4_k_m.gguf"; }

inline std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(3, vocab - 1);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = dist(rng);
  return ids;
}

inline std::vector<int> TopK(const std::vector<float>& v, int k) {
  std::vector<int> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int a, int b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  idx.resize(k);
  return idx;
}

inline double Rms(const std::vector<float>& v) {
  double ss = 0;
  for (float x : v) ss += double(x) * x;
  return v.empty() ? 0.0 : std::sqrt(ss / v.size());
}

// A near-tie tolerance for logits: the bound as an absolute error on this logit vector.
inline float TieTolerance(const std::vector<float>& cpu, double bound) {
  return static_cast<float>(4.0 * bound * Rms(cpu));
}

struct Pair {
  std::unique_ptr<DeviceContext> cpu_ctx;
  std::unique_ptr<Model> cpu, gpu;
};

inline Pair Load(const std::string& path, DeviceContext& gpu_ctx,
                 DeltaRuleChoice delta_rule = DeltaRuleChoice::kAuto,
                 GpuAttention attention = GpuAttention::kAuto,
                 int prefix_split_min_keys = LoadOptions{}.gpu_prefix_split_min_keys) {
  Pair p;
  p.cpu_ctx = DeviceContext::Cpu(0);
  LoadOptions lo;
  lo.f32_decode = true;
  lo.gpu_delta_rule = delta_rule;
  lo.gpu_attention = attention;
  lo.gpu_prefix_split_min_keys = prefix_split_min_keys;
  // The heuristics' first cuDNN plan, not the fastest by a timing: these tests compare runs whose
  // shapes fall in different buckets (packed against alone), and a timed choice under load can
  // give the buckets different plans, which round differently (LoadOptions::gpu_cudnn_autotune).
  lo.gpu_cudnn_autotune = false;
  auto cpu = LoadModel(path, *p.cpu_ctx, lo);
  EXPECT_TRUE(cpu.ok()) << cpu.status().message();
  auto gpu = LoadModel(path, gpu_ctx, lo);
  EXPECT_TRUE(gpu.ok()) << gpu.status().message();
  if (cpu.ok()) p.cpu = std::move(*cpu);
  if (gpu.ok()) p.gpu = std::move(*gpu);
  return p;
}

// Prefill `prompt` then `steps` greedy decodes; returns the first logits and the tokens.
inline std::vector<float> Greedy(Model& m, DeviceContext& ctx, const std::vector<int32_t>& prompt,
                                 int steps, const UniPrefillConfig& up,
                                 std::vector<int32_t>* tokens,
                                 std::vector<std::vector<float>>* all_logits,
                                 std::vector<KeptTokens>* kept = nullptr) {
  auto cache = m.NewCache(static_cast<int>(prompt.size()) + steps + 1, up.active_drop_layers());
  std::vector<float> logits(m.config().vocab_size), first;
  SequenceStep s{cache.get(), prompt, logits.data(), kept};
  Status st = m.ForwardBatch(ctx, std::span<const SequenceStep>(&s, 1), up);
  EXPECT_TRUE(st.ok()) << st.message();
  first = logits;
  for (int i = 0; i < steps && st.ok(); ++i) {
    const int32_t next =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    tokens->push_back(next);
    if (all_logits) all_logits->push_back(logits);
    std::vector<int32_t> one{next};
    SequenceStep d{cache.get(), one, logits.data()};
    st = m.ForwardBatch(ctx, std::span<const SequenceStep>(&d, 1), up);
    EXPECT_TRUE(st.ok()) << st.message();
  }
  return first;
}

inline UniPrefillConfig Dense() {
  UniPrefillConfig c;
  c.enabled = false;
  return c;
}

// Compares GPU and CPU on one prompt (first logits, top-5, 32 greedy tokens).
inline void ComparePrompt(Pair& p, DeviceContext& gpu_ctx, const std::vector<int32_t>& prompt,
                          const UniPrefillConfig& up, const std::string& label) {
  std::vector<int32_t> cpu_tokens, gpu_tokens;
  std::vector<std::vector<float>> cpu_steps;
  std::vector<KeptTokens> cpu_kept, gpu_kept;
  const std::vector<float> cpu =
      Greedy(*p.cpu, *p.cpu_ctx, prompt, 32, up, &cpu_tokens, &cpu_steps, &cpu_kept);
  const std::vector<float> gpu =
      Greedy(*p.gpu, gpu_ctx, prompt, 32, up, &gpu_tokens, nullptr, &gpu_kept);
  const double err = testing::RelativeL2Error(gpu, cpu);
  std::printf("[%s] %zu tokens: first-logit normalised error %.2e\n", label.c_str(), prompt.size(),
              err);
  const double bound = BoundFor(label);
  EXPECT_LT(err, bound) << label;

  const float tol = TieTolerance(cpu, bound);
  const std::vector<int> top_cpu = TopK(cpu, 6), top_gpu = TopK(gpu, 5);
  for (int i = 0; i < 5; ++i) {
    if (top_cpu[i] == top_gpu[i]) continue;
    // A swap is allowed only between host logits closer than the tolerance.
    const float gap_prev = i > 0 ? cpu[top_cpu[i - 1]] - cpu[top_cpu[i]] : INFINITY;
    const float gap_next = cpu[top_cpu[i]] - cpu[top_cpu[i + 1]];
    std::printf("[%s] top-5 rank %d differs: cpu %d gpu %d (host gaps %.3g / %.3g, tol %.3g)\n",
                label.c_str(), i, top_cpu[i], top_gpu[i], gap_prev, gap_next, tol);
    EXPECT_TRUE(std::min(gap_prev, gap_next) < tol) << label << " rank " << i;
  }

  // Kept counts exactly equal. A legitimate difference is conceivable (the GPU scores from bf16
  // q / k, the host from f32: two blocks whose scores agree to bf16 precision may swap ranks, or
  // the top-p boundary block move), but the host model does not expose its block scores, so the
  // test cannot tell such a near-tie from a wrong selection; on these prompts every count was
  // measured equal on the H200 (bench/results/gpu/cuda_model_tests.log), and a difference fails.
  ASSERT_EQ(cpu_kept.size(), gpu_kept.size()) << label;
  for (size_t i = 0; i < cpu_kept.size(); ++i) {
    std::printf("[%s] drop layer %d kept cpu %d gpu %d of %d\n", label.c_str(), cpu_kept[i].layer,
                cpu_kept[i].kept, gpu_kept[i].kept, cpu_kept[i].alive);
    EXPECT_EQ(cpu_kept[i].layer, gpu_kept[i].layer) << label;
    EXPECT_EQ(cpu_kept[i].kept, gpu_kept[i].kept) << label << ", drop layer " << cpu_kept[i].layer;
    EXPECT_EQ(cpu_kept[i].alive, gpu_kept[i].alive)
        << label << ", drop layer " << cpu_kept[i].layer;
  }

  for (size_t i = 0; i < cpu_tokens.size(); ++i) {
    if (cpu_tokens[i] == gpu_tokens[i]) continue;
    const std::vector<int> top2 = TopK(cpu_steps[i], 2);
    const float gap = cpu_steps[i][top2[0]] - cpu_steps[i][top2[1]];
    std::printf(
        "[%s] greedy diverges at token %zu (cpu %d, gpu %d): host top-2 gap %.3g, tol %.3g\n",
        label.c_str(), i, cpu_tokens[i], gpu_tokens[i], gap, TieTolerance(cpu_steps[i], bound));
    EXPECT_LT(gap, TieTolerance(cpu_steps[i], bound)) << label << ": not a near-tie";
    break;  // the continuations differ from here on
  }
}

// The tiny Qwen3-Next routes each row to 2 of 4 experts whose router probabilities are often
// within bf16 noise of each other (random weights): a flipped choice changes a row by O(1), which
// the logits bound cannot separate from a bug. The strict checks therefore run a copy whose config
// routes every row to all 4 experts (same weights, no discrete choice; norm_topk_prob keeps the
// softmax weights), and the real top-2 routing is checked below with a bound that allows flips.
inline std::string QwenAllExpertsDir(int layers = 0) {
  const std::string family = "qwen3_next";
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("up_qwen3_all_experts" + std::to_string(layers));
  std::filesystem::create_directories(dir);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(TinyDir(family) + "/config.json"));
  config["num_experts_per_tok"] = config["num_experts"];
  if (layers > 0) config["num_hidden_layers"] = layers;
  std::ofstream(dir / "config.json") << config.dump(2);
  std::filesystem::copy_file(TinyDir(family) + "/model.safetensors", dir / "model.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  return dir.string();
}
inline std::string ModelDir(const std::string& family) {
  return family == "qwen3_next" ? QwenAllExpertsDir() : TinyDir(family);
}

class CudaModelFamilyTest : public ::testing::TestWithParam<std::string> {};

// The drop layers of the UniPrefill tests: every full-attention layer but the last (so layers run
// after the drop), or the only one.
inline std::vector<int> TestDropLayers(const ModelConfig& c) {
  std::vector<int> drops;
  for (int i = 0; i < c.n_layers; ++i) {
    if (c.layer_kinds[i] == LayerKind::kFullAttention) drops.push_back(i);
  }
  if (drops.size() > 1) drops.pop_back();
  return drops;
}

// Kept records equal exactly: layer, kept and alive of every drop.
inline void ExpectSameKept(const std::vector<KeptTokens>& got,
                                  const std::vector<KeptTokens>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].layer, want[i].layer) << what << ", record " << i;
    EXPECT_EQ(got[i].kept, want[i].kept) << what << ", drop layer " << want[i].layer;
    EXPECT_EQ(got[i].alive, want[i].alive) << what << ", drop layer " << want[i].layer;
  }
}

}  // namespace uniprefill::cuda_model_test
