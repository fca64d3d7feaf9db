// The CUDA model (bf16 weights, KV cache and activations) against the host model (f32) on the tiny
// checkpoints of every family (Gemma 3 sliding/full, Llama full, Qwen3-Next DeltaNet/MoE hybrid)
// and on the real Gemma 3 270M, 4 prompts each:
// - first-token logits within a bf16 bound (normalised error, below) and the same top-5 ids, except
//   where the host's neighbouring logits are closer than the bound allows (a near-tie, printed);
// - 32-token greedy continuations equal until a near-tie (the host's top-2 gap at the diverging
//   step is checked and printed);
// - UniPrefill drops on the GPU: kept counts within one block of the host's (bf16 scoring), logits
//   within the bound; a packed batch (prefills beside a decode) equals each request alone;
// - fixed-ratio drops without a host sync (bounded segments) equal the synced path: kept records,
//   logits, every cache's per-layer entry counts and held pages, and the decodes that follow.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "model/cuda/cuda_kv_cache.h"
#include "model/model.h"
#include "testing/cuda_test_util.h"
#include "testing/tiny_gemma3.h"

namespace uniprefill {
namespace {

// ||gpu - cpu|| / ||cpu|| of first-token logits: bf16 weights and activations through every
// layer. Measured on the H200 (bench/results/gpu/cuda_model_tests.log): Gemma 3 and Llama tiny
// checkpoints 6e-3 .. 2.2e-2, tiny GGUF 1.2e-2 .. 1.8e-2, Gemma 3 270M 9e-3 .. 2.1e-2; the bound
// leaves about 2x headroom.
constexpr double kLogitsBound = 0.05;
// The tiny Qwen3-Next (all experts routed) measures 1.9e-2 .. 3.7e-2 except one 37-token prompt at
// 1.3e-1, of which 7.8e-2 is already there after layer 0 (a DeltaNet + MoE layer) whichever
// delta-rule kernel runs (DISABLED_ErrorByDepth). That prompt is ill-conditioned, not mishandled:
// on the CPU alone, rounding only the DeltaNet's intermediates (projections, conv output, core
// output) to bf16 moves its logits by 3.9e-2 after layer 0 and 7.0e-2 after 8 layers, against
// 1.5e-3 / 0.9e-2 for the other prompts. Its bound is therefore wider.
constexpr double kQwenLogitsBound = 0.15;
double BoundFor(const std::string& label) {
  return label.rfind("qwen3_next", 0) == 0 ? kQwenLogitsBound : kLogitsBound;
}

// The source tree: $UP_SOURCE_DIR when set (binaries built elsewhere and run on a GPU machine's
// copy of the checkout), else where this binary was built from.
std::string SourceDir() {
  const char* env = std::getenv("UP_SOURCE_DIR");
  return env && *env ? env : UP_SOURCE_DIR;
}
std::string TinyDir(const std::string& family) {
  return SourceDir() + "/tests/goldens/hf_tiny/" + family;
}
std::string Gemma270m() { return SourceDir() + "/models/gemma-3-270m-q4_k_m.gguf"; }

std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(3, vocab - 1);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = dist(rng);
  return ids;
}

std::vector<int> TopK(const std::vector<float>& v, int k) {
  std::vector<int> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int a, int b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  idx.resize(k);
  return idx;
}

// A near-tie tolerance for logits: the bound as an absolute error on this logit vector.
float TieTolerance(const std::vector<float>& cpu, double bound) {
  double ss = 0;
  for (float x : cpu) ss += double(x) * x;
  return static_cast<float>(4.0 * bound * std::sqrt(ss / cpu.size()));
}

struct Pair {
  std::unique_ptr<DeviceContext> cpu_ctx;
  std::unique_ptr<Model> cpu, gpu;
};

Pair Load(const std::string& path, DeviceContext& gpu_ctx) {
  Pair p;
  p.cpu_ctx = DeviceContext::Cpu(0);
  LoadOptions lo;
  lo.f32_decode = true;
  auto cpu = LoadModel(path, *p.cpu_ctx, lo);
  EXPECT_TRUE(cpu.ok()) << cpu.status().message();
  auto gpu = LoadModel(path, gpu_ctx, lo);
  EXPECT_TRUE(gpu.ok()) << gpu.status().message();
  if (cpu.ok()) p.cpu = std::move(*cpu);
  if (gpu.ok()) p.gpu = std::move(*gpu);
  return p;
}

// Prefill `prompt` then `steps` greedy decodes; returns the first logits and the tokens.
std::vector<float> Greedy(Model& m, DeviceContext& ctx, const std::vector<int32_t>& prompt,
                          int steps, const UniPrefillConfig& up, std::vector<int32_t>* tokens,
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

UniPrefillConfig Dense() {
  UniPrefillConfig c;
  c.enabled = false;
  return c;
}

// Compares GPU and CPU on one prompt (first logits, top-5, 32 greedy tokens).
void ComparePrompt(Pair& p, DeviceContext& gpu_ctx, const std::vector<int32_t>& prompt,
                   const UniPrefillConfig& up, const std::string& label) {
  std::vector<int32_t> cpu_tokens, gpu_tokens;
  std::vector<std::vector<float>> cpu_steps;
  std::vector<KeptTokens> cpu_kept, gpu_kept;
  const std::vector<float> cpu =
      Greedy(*p.cpu, *p.cpu_ctx, prompt, 32, up, &cpu_tokens, &cpu_steps, &cpu_kept);
  const std::vector<float> gpu =
      Greedy(*p.gpu, gpu_ctx, prompt, 32, up, &gpu_tokens, nullptr, &gpu_kept);
  const double err = testing::NormalizedError(gpu, cpu);
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

  ASSERT_EQ(cpu_kept.size(), gpu_kept.size()) << label;
  for (size_t i = 0; i < cpu_kept.size(); ++i) {
    const int block = up.selection.block_size;
    std::printf("[%s] drop layer %d kept cpu %d gpu %d of %d\n", label.c_str(), cpu_kept[i].layer,
                cpu_kept[i].kept, gpu_kept[i].kept, cpu_kept[i].alive);
    EXPECT_EQ(cpu_kept[i].layer, gpu_kept[i].layer);
    EXPECT_LE(std::abs(cpu_kept[i].kept - gpu_kept[i].kept), block) << label;
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
std::string QwenAllExpertsDir(int layers = 0) {
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
std::string ModelDir(const std::string& family) {
  return family == "qwen3_next" ? QwenAllExpertsDir() : TinyDir(family);
}

class CudaModelFamilyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaModelFamilyTest, MatchesHostModelDense) {
  UP_CUDA_TEST_CONTEXT(ctx);
  Pair p = Load(ModelDir(GetParam()), ctx);
  ASSERT_TRUE(p.cpu && p.gpu);
  EXPECT_EQ(p.gpu->device(), Device::kCuda);
  const int vocab = p.cpu->config().vocab_size;
  int seed = 1;
  for (int n : {5, 37, 130, 301}) {
    ComparePrompt(p, ctx, RandomTokens(n, vocab, seed), Dense(),
                  GetParam() + " dense #" + std::to_string(seed));
    ++seed;
  }
}

TEST_P(CudaModelFamilyTest, MatchesHostModelWithUniPrefillDrops) {
  UP_CUDA_TEST_CONTEXT(ctx);
  Pair p = Load(ModelDir(GetParam()), ctx);
  ASSERT_TRUE(p.cpu && p.gpu);
  const ModelConfig& c = p.cpu->config();
  UniPrefillConfig up;
  up.enabled = true;
  for (int i = 0; i < c.n_layers; ++i) {
    if (c.layer_kinds[i] == LayerKind::kFullAttention) up.drop_layers.push_back(i);
  }
  if (up.drop_layers.size() > 1) up.drop_layers.pop_back();  // leave layers after the drop
  up.selection.block_size = 8;
  up.selection.sink = 4;
  up.selection.last_n = 8;
  for (auto mode : {sparsity::SelectionMode::kFixedRatio, sparsity::SelectionMode::kTopP}) {
    up.selection.mode = mode;
    up.selection.keep_ratio = 0.5f;
    up.selection.top_p = 0.9f;
    ComparePrompt(p, ctx, RandomTokens(200, c.vocab_size, 77), up,
                  GetParam() + (mode == sparsity::SelectionMode::kTopP ? " top-p" : " ratio"));
  }
}

TEST_P(CudaModelFamilyTest, PackedBatchEqualsEachAlone) {
  UP_CUDA_TEST_CONTEXT(ctx);
  Pair p = Load(TinyDir(GetParam()), ctx);
  ASSERT_TRUE(p.gpu);
  Model& m = *p.gpu;
  const int V = m.config().vocab_size;
  const UniPrefillConfig dense = Dense();
  // Alone: a prefill of 60, a prefill of 23, and a 40-token prompt followed by one decode.
  const std::vector<int32_t> a = RandomTokens(60, V, 5), b = RandomTokens(23, V, 6),
                             c = RandomTokens(40, V, 7);
  std::vector<float> la(V), lb(V), lc(V), lc_decode(V);
  auto run_alone = [&](const std::vector<int32_t>& t, std::vector<float>& out) {
    auto cache = m.NewCache(128);
    SequenceStep s{cache.get(), t, out.data()};
    ASSERT_TRUE(m.ForwardBatch(ctx, std::span<const SequenceStep>(&s, 1), dense).ok());
  };
  run_alone(a, la);
  run_alone(b, lb);
  auto cache_c = m.NewCache(128);
  {
    SequenceStep s{cache_c.get(), c, lc.data()};
    ASSERT_TRUE(m.ForwardBatch(ctx, std::span<const SequenceStep>(&s, 1), dense).ok());
    std::vector<int32_t> one{3};
    SequenceStep d{cache_c.get(), one, lc_decode.data()};
    ASSERT_TRUE(m.ForwardBatch(ctx, std::span<const SequenceStep>(&d, 1), dense).ok());
  }
  // Together: the decode of a second copy of c packed between the two prefills.
  auto ca = m.NewCache(128), cb = m.NewCache(128), cc = m.NewCache(128);
  std::vector<float> tmp(V), ta(V), tb(V), tc(V);
  {
    SequenceStep s{cc.get(), c, tmp.data()};
    ASSERT_TRUE(m.ForwardBatch(ctx, std::span<const SequenceStep>(&s, 1), dense).ok());
  }
  std::vector<int32_t> one{3};
  std::vector<SequenceStep> steps{
      {ca.get(), a, ta.data()}, {cc.get(), one, tc.data()}, {cb.get(), b, tb.data()}};
  ASSERT_TRUE(m.ForwardBatch(ctx, steps, dense).ok());
  // bf16 GEMMs of another row count may take another kernel: equal up to bf16 rounding.
  EXPECT_LT(testing::NormalizedError(ta, la), 1e-2);
  EXPECT_LT(testing::NormalizedError(tb, lb), 1e-2);
  EXPECT_LT(testing::NormalizedError(tc, lc_decode), 1e-2);
  std::printf("[%s] batch vs alone: %.2e %.2e %.2e\n", GetParam().c_str(),
              testing::NormalizedError(ta, la), testing::NormalizedError(tb, lb),
              testing::NormalizedError(tc, lc_decode));
}

// Fixed ratio runs sync-free (capacities, padding rows, device-side counts, caches trimmed after
// the final sync); UNIPREFILL_GPU_DROP_SYNC=1 forces the synced, exactly laid-out path. Both on a
// packed batch of two prefills and a decode, then 6 decodes of every request.
// Both window modes (sliding windows over alive indices or positions).
void ExpectSyncFreeEqualsSynced(DeviceContext& ctx, Model& m, const std::string& label,
                                WindowMode window_mode, double bound) {
  SCOPED_TRACE(label);
  const ModelConfig& c = m.config();
  UniPrefillConfig up;
  up.window_mode = window_mode;
  up.enabled = true;
  for (int i = 0; i < c.n_layers; ++i) {
    if (c.layer_kinds[i] == LayerKind::kFullAttention) up.drop_layers.push_back(i);
  }
  if (up.drop_layers.size() > 1) up.drop_layers.pop_back();
  up.selection.mode = sparsity::SelectionMode::kFixedRatio;
  up.selection.keep_ratio = 0.5f;
  up.selection.block_size = 8;
  up.selection.sink = 4;
  up.selection.last_n = 8;
  const int V = c.vocab_size;
  const std::vector<int32_t> a = RandomTokens(300, V, 41), b = RandomTokens(150, V, 42),
                             d = RandomTokens(40, V, 43);
  struct Run {
    std::vector<std::unique_ptr<SequenceCache>> caches;
    std::vector<std::vector<KeptTokens>> kept = std::vector<std::vector<KeptTokens>>(3);
    std::vector<std::vector<float>> logits;  // per step, 3 requests concatenated
    ForwardStats prefill_stats;              // of the packed step with the two prefills
  };
  auto run = [&](bool synced) {
    if (synced) setenv("UNIPREFILL_GPU_DROP_SYNC", "1", 1);
    Run out;
    for (int i = 0; i < 3; ++i) out.caches.push_back(m.NewCache(512, up.active_drop_layers()));
    std::vector<float> l0(V), l1(V), l2(V);
    {  // request 1 has its prompt already: this step decodes it
      SequenceStep s{out.caches[1].get(), d, l1.data()};
      EXPECT_TRUE(m.ForwardBatch(ctx, std::span<const SequenceStep>(&s, 1), up).ok());
    }
    std::vector<int32_t> one{5};
    std::vector<SequenceStep> steps{{out.caches[0].get(), a, l0.data(), &out.kept[0]},
                                    {out.caches[1].get(), one, l1.data(), &out.kept[1]},
                                    {out.caches[2].get(), b, l2.data(), &out.kept[2]}};
    std::vector<std::vector<int32_t>> next(3);
    for (int step = 0; step < 7; ++step) {
      const Status st =
          m.ForwardBatch(ctx, steps, up, nullptr, step == 0 ? &out.prefill_stats : nullptr);
      EXPECT_TRUE(st.ok()) << st.message();
      std::vector<float> all(l0);
      all.insert(all.end(), l1.begin(), l1.end());
      all.insert(all.end(), l2.begin(), l2.end());
      out.logits.push_back(all);
      // Then every request decodes a fixed token (the same ids in both runs).
      for (int r = 0; r < 3; ++r) {
        next[r] = {static_cast<int32_t>((11 + 7 * step + 3 * r) % V)};
        steps[r].tokens = next[r];
      }
    }
    unsetenv("UNIPREFILL_GPU_DROP_SYNC");
    return out;
  };
  const Run free_run = run(false), synced = run(true);
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(free_run.kept[r].size(), synced.kept[r].size()) << "request " << r;
    for (size_t i = 0; i < synced.kept[r].size(); ++i) {
      EXPECT_EQ(free_run.kept[r][i].layer, synced.kept[r][i].layer);
      EXPECT_EQ(free_run.kept[r][i].kept, synced.kept[r][i].kept) << "request " << r;
      EXPECT_EQ(free_run.kept[r][i].alive, synced.kept[r][i].alive) << "request " << r;
    }
    auto* fc = dynamic_cast<const CudaSequenceCache*>(free_run.caches[r].get());
    auto* sc = dynamic_cast<const CudaSequenceCache*>(synced.caches[r].get());
    ASSERT_TRUE(fc && sc);
    EXPECT_EQ(fc->length(), sc->length());
    EXPECT_EQ(fc->bytes(), sc->bytes()) << "request " << r << ": held pages differ";
    for (int li = 0; li < c.n_layers; ++li) {
      if (c.layer_kinds[li] == LayerKind::kLinearAttention) continue;
      EXPECT_EQ(fc->count(li), sc->count(li)) << "request " << r << " layer " << li;
    }
  }
  EXPECT_EQ(free_run.prefill_stats.drop_host_syncs, 0);
  EXPECT_EQ(synced.prefill_stats.drop_host_syncs, static_cast<int>(up.drop_layers.size()));
  EXPECT_FALSE(synced.kept[0].empty());
  EXPECT_LT(synced.kept[0].back().kept, synced.kept[0].front().alive);
  double worst = 0;
  for (size_t i = 0; i < synced.logits.size(); ++i) {
    const double err = testing::NormalizedError(free_run.logits[i], synced.logits[i]);
    worst = std::max(worst, err);
    EXPECT_LT(err, bound) << "step " << i;
  }
  std::printf("[%s] sync-free vs synced fixed ratio: kept %d/%d, worst logits error %.2e\n",
              label.c_str(), synced.kept[0].back().kept, synced.kept[0].front().alive, worst);
}

TEST_P(CudaModelFamilyTest, SyncFreeFixedRatioEqualsSyncedPath) {
  UP_CUDA_TEST_CONTEXT(ctx);
  Pair p = Load(ModelDir(GetParam()), ctx);
  ASSERT_TRUE(p.gpu);
  for (WindowMode mode : {WindowMode::kAliveIndex, WindowMode::kPosition}) {
    ExpectSyncFreeEqualsSynced(ctx, *p.gpu,
                               GetParam() + (mode == WindowMode::kPosition ? " by position" : ""),
                               mode, GetParam() == "qwen3_next" ? 3e-2 : 1e-2);
  }
}

// The tiny GGUF has head dim 128: prefills run flash attention, whose query tiles then hold real
// and padding rows together (the tiny checkpoints above, head dim 32, take the cache path).
TEST(CudaModelTinyGgufTest, SyncFreeFixedRatioEqualsSyncedPath) {
  UP_CUDA_TEST_CONTEXT(ctx);
  const std::string path =
      testing::WriteTempFile("cuda_tiny_gemma3.gguf", testing::BuildTinyGemma3());
  Pair p = Load(path, ctx);
  ASSERT_TRUE(p.gpu);
  for (WindowMode mode : {WindowMode::kAliveIndex, WindowMode::kPosition}) {
    ExpectSyncFreeEqualsSynced(
        ctx, *p.gpu, mode == WindowMode::kPosition ? "tiny gguf by position" : "tiny gguf", mode,
        1e-2);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, CudaModelFamilyTest,
                         ::testing::Values("gemma3", "llama", "qwen3_next"));

// The tiny Qwen3-Next as shipped (top-2 of 4 experts): logits within a bound that allows a few
// flipped expert choices (measured 2e-2 .. 1.6e-1 on the H200), MoE and DeltaNet run end to end.
TEST(CudaModelQwen3NextTest, TopTwoRoutingWithinTheRoutingFlipBound) {
  UP_CUDA_TEST_CONTEXT(ctx);
  Pair p = Load(TinyDir("qwen3_next"), ctx);
  ASSERT_TRUE(p.cpu && p.gpu);
  int seed = 1;
  for (int n : {5, 37, 130, 301}) {
    std::vector<int32_t> tokens_cpu, tokens_gpu;
    const std::vector<int32_t> prompt = RandomTokens(n, p.cpu->config().vocab_size, seed++);
    const std::vector<float> cpu =
        Greedy(*p.cpu, *p.cpu_ctx, prompt, 0, Dense(), &tokens_cpu, nullptr);
    const std::vector<float> gpu = Greedy(*p.gpu, ctx, prompt, 0, Dense(), &tokens_gpu, nullptr);
    const double err = testing::NormalizedError(gpu, cpu);
    std::printf("[qwen3_next top-2 routing] %d tokens: normalised error %.2e\n", n, err);
    EXPECT_LT(err, 0.3);
  }
}

// Diagnostic (run explicitly): GPU vs host error of the tiny Qwen3-Next (all experts) cut to 1..8
// layers, for a few prompts: where the error grows, layer by layer.
TEST(CudaModelQwen3NextTest, DISABLED_ErrorByDepth) {
  UP_CUDA_TEST_CONTEXT(ctx);
  for (int layers = 1; layers <= 8; ++layers) {
    Pair p = Load(QwenAllExpertsDir(layers), ctx);
    ASSERT_TRUE(p.cpu && p.gpu);
    std::printf("[qwen3_next depth %d]", layers);
    int seed = 1;
    for (int n : {5, 37, 130, 301}) {
      std::vector<int32_t> t;
      const std::vector<int32_t> prompt = RandomTokens(n, p.cpu->config().vocab_size, seed++);
      const std::vector<float> cpu = Greedy(*p.cpu, *p.cpu_ctx, prompt, 0, Dense(), &t, nullptr);
      const std::vector<float> gpu = Greedy(*p.gpu, ctx, prompt, 0, Dense(), &t, nullptr);
      std::printf(" %d tok %.2e", n, testing::NormalizedError(gpu, cpu));
    }
    std::printf("\n");
  }
}

// The real Gemma 3 270M (Q4_K_M GGUF, dequantised to bf16 on the GPU) on the 4 golden prompts:
// against the host model (f32) and the committed fp32 transformers logits.
TEST(CudaModelGemma270mTest, MatchesHostAndFp32Goldens) {
  UP_CUDA_TEST_CONTEXT(ctx);
  if (!std::filesystem::exists(Gemma270m())) GTEST_SKIP() << "model missing: run scripts/setup.sh";
  Pair p = Load(Gemma270m(), ctx);
  ASSERT_TRUE(p.cpu && p.gpu);
  const std::string goldens = SourceDir() + "/tests/goldens/model_gemma3/";
  for (int prompt = 1; prompt <= 4; ++prompt) {
    const std::string json_path = goldens + "prompt" + std::to_string(prompt) + ".json";
    ASSERT_TRUE(std::filesystem::exists(json_path)) << json_path;
    const nlohmann::json g = nlohmann::json::parse(std::ifstream(json_path));
    const std::vector<int32_t> ids = g["ids"].get<std::vector<int32_t>>();
    ComparePrompt(p, ctx, ids, Dense(), "gemma-3-270m prompt" + std::to_string(prompt));
    // Against transformers' fp32 logits (the CPU golden test's reference).
    std::ifstream in(goldens + g["fp32"]["logits_file"].get<std::string>(), std::ios::binary);
    std::vector<float> ref(p.cpu->config().vocab_size);
    in.read(reinterpret_cast<char*>(ref.data()), ref.size() * sizeof(float));
    auto cache = p.gpu->NewCache(static_cast<int>(ids.size()) + 1);
    std::vector<float> logits(ref.size());
    ASSERT_TRUE(p.gpu->Forward(ctx, ids, *cache, logits.data()).ok());
    const double err = testing::NormalizedError(logits, ref);
    std::printf(
        "[gemma-3-270m prompt%d] vs transformers fp32: normalised error %.2e, argmax %d/%d\n",
        prompt, err, TopK(logits, 1)[0], TopK(ref, 1)[0]);
    EXPECT_LT(err, kLogitsBound);
  }
}

// The tiny Gemma 3 GGUF has head_dim 128: flash attention (sliding window 8) for prefills and
// paged decode attention for decodes, where the HF tiny checkpoints (head dims 16 and 32) take the
// general cache attention.
TEST(CudaModelTinyGgufTest, FlashAndPagedDecodePathsMatchHost) {
  UP_CUDA_TEST_CONTEXT(ctx);
  const std::string path =
      testing::WriteTempFile("cuda_tiny_gemma3.gguf", testing::BuildTinyGemma3());
  Pair p = Load(path, ctx);
  ASSERT_TRUE(p.cpu && p.gpu);
  const int vocab = p.cpu->config().vocab_size;
  int seed = 11;
  for (int n : {3, 20, 64, 150}) {
    ComparePrompt(p, ctx, RandomTokens(n, vocab, seed), Dense(),
                  "tiny gguf dense #" + std::to_string(seed));
    ++seed;
  }
  UniPrefillConfig up;
  up.enabled = true;
  up.drop_layers = {5};
  up.selection.block_size = 8;
  up.selection.sink = 4;
  up.selection.last_n = 8;
  up.selection.mode = sparsity::SelectionMode::kFixedRatio;
  up.selection.keep_ratio = 0.5f;
  ComparePrompt(p, ctx, RandomTokens(180, vocab, 99), up, "tiny gguf ratio 0.5");
}

// Bad use: a host cache handed to the GPU model is refused with a clear error, not a crash.
TEST(CudaModelGemma270mTest, RefusesHostCache) {
  UP_CUDA_TEST_CONTEXT(ctx);
  Pair p = Load(TinyDir("llama"), ctx);
  ASSERT_TRUE(p.cpu && p.gpu);
  auto host_cache = p.cpu->NewCache(16);
  std::vector<int32_t> t{5, 6, 7};
  std::vector<float> logits(p.gpu->config().vocab_size);
  SequenceStep s{host_cache.get(), t, logits.data()};
  Status st = p.gpu->ForwardBatch(ctx, std::span<const SequenceStep>(&s, 1), Dense());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("NewCache"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace uniprefill
