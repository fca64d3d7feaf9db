// The CUDA model (bf16 weights, KV cache and activations) against the host model (f32) and against
// itself, on the tiny checkpoints of every family (Gemma 3 sliding/full, Llama full, Qwen3-Next
// DeltaNet/MoE hybrid), the tiny GGUF (head dim 128: flash and paged decode attention) and the real
// Gemma 3 270M (4 golden prompts; its absence fails unless UNIPREFILL_ALLOW_MISSING_ASSETS=1):
// - first-token logits within a bf16 bound (normalised error, below) and the same top-5 ids, except
//   where the host's neighbouring logits are closer than the bound allows (a near-tie, printed);
// - 32-token greedy continuations equal until a near-tie (the host's top-2 gap at the diverging
//   step is checked and printed);
// - UniPrefill drops on the GPU: kept counts equal to the host's exactly, logits within the bound;
// - UniPrefill that keeps everything (p = 1, keep ratio 1) equals dense bit for bit: a prefill,
//   the decodes after it, and a packed batch (two prefills and a decode) with its decodes;
// - a packed batch (prefills beside a decode) equals each request alone: dense, and with drops
//   (kept records exactly, the same greedy tokens over 4 decodes, logits bit for bit on the HF
//   tiny checkpoints and within 1e-3 on the tiny GGUF, as measured);
// - fixed-ratio drops without a host sync (bounded segments) equal the synced path: kept records,
//   logits, every cache's per-layer entry counts and held pages, and the decodes that follow;
// - Qwen3-Next's real top-2 routing within a routing-flip bound that a wrongly routed MoE exceeds.
// Segment-wise chunked prefill: cuda_segment_chunks_test.cc. Shared helpers and the
// CudaModelFamilyTest fixture: testing/cuda_model_fixtures.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/cuda_kv_cache.h"
#include "model/model.h"
#include "model/model_presets.h"
#include "model/transformer_model.h"
#include "ops/cuda/cudnn_attention.h"
#include "ops/cuda/sm90/flash_attention_wgmma.h"
#include "testing/compare.h"
#include "testing/cuda_model_fixtures.h"
#include "testing/cuda_test_util.h"
#include "testing/required_asset.h"
#include "testing/tiny_gemma3.h"

namespace uniprefill {
namespace {

using namespace cuda_model_test;  // NOLINT: the shared helpers (testing/cuda_model_fixtures.h)

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


// UniPrefill at TestDropLayers with small blocks (G 8, S 4, n 8): prompts longer than 12 tokens
// select.
UniPrefillConfig SmallBlocks(const ModelConfig& c, sparsity::SelectionMode mode,
                             float top_p = 0.9f, float keep_ratio = 0.5f) {
  UniPrefillConfig up;
  up.enabled = true;
  up.drop_layers = TestDropLayers(c);
  up.selection.block_size = 8;
  up.selection.sink = 4;
  up.selection.last_n = 8;
  up.selection.mode = mode;
  up.selection.top_p = top_p;
  up.selection.keep_ratio = keep_ratio;
  return up;
}

TEST_P(CudaModelFamilyTest, MatchesHostModelWithUniPrefillDrops) {
  UP_CUDA_TEST_CONTEXT(ctx);
  Pair p = Load(ModelDir(GetParam()), ctx);
  ASSERT_TRUE(p.cpu && p.gpu);
  const ModelConfig& c = p.cpu->config();
  for (auto mode : {sparsity::SelectionMode::kFixedRatio, sparsity::SelectionMode::kTopP}) {
    ComparePrompt(p, ctx, RandomTokens(200, c.vocab_size, 77), SmallBlocks(c, mode),
                  GetParam() + (mode == sparsity::SelectionMode::kTopP ? " top-p" : " ratio"));
  }
}

// A drop for a request whose cache already holds tokens (the second part of a prompt sent in two
// steps, as segment-wise chunked prefill will): the GPU scores the step's rows against every key
// the layer holds, as the CPU does, and keeps the same rows. The second step shares its forward
// with a fresh prompt (which the GPU orders first), in both modes: fixed ratio then takes the
// synced path for the whole forward.
TEST_P(CudaModelFamilyTest, DropOnACacheThatHoldsTokensMatchesHostModel) {
  UP_CUDA_TEST_CONTEXT(ctx);
  Pair p = Load(ModelDir(GetParam()), ctx);
  ASSERT_TRUE(p.cpu && p.gpu);
  const ModelConfig& c = p.cpu->config();
  const std::vector<int32_t> prompt = RandomTokens(240, c.vocab_size, 91);
  const std::vector<int32_t> first(prompt.begin(), prompt.begin() + 90);
  const std::vector<int32_t> second(prompt.begin() + 90, prompt.end());
  const std::vector<int32_t> other = RandomTokens(120, c.vocab_size, 92);
  for (auto mode : {sparsity::SelectionMode::kFixedRatio, sparsity::SelectionMode::kTopP}) {
    const UniPrefillConfig up = SmallBlocks(c, mode);
    const std::string label =
        GetParam() + (mode == sparsity::SelectionMode::kTopP ? " top-p" : " ratio");
    struct Run {
      std::vector<float> logits, other_logits;
      std::vector<KeptTokens> kept, other_kept;
    };
    auto run = [&](Model& m, DeviceContext& mctx) {
      Run out;
      out.logits.resize(c.vocab_size);
      out.other_logits.resize(c.vocab_size);
      auto cache = m.NewCache(400, up.active_drop_layers());
      auto other_cache = m.NewCache(400, up.active_drop_layers());
      SequenceStep s1{cache.get(), first, out.logits.data()};
      s1.allow_drop = false;  // the first part passes through (dense)
      Status st = m.ForwardBatch(mctx, std::span<const SequenceStep>(&s1, 1), up);
      EXPECT_TRUE(st.ok()) << st.message();
      std::vector<SequenceStep> steps{{cache.get(), second, out.logits.data(), &out.kept},
                                      {other_cache.get(), other, out.other_logits.data(),
                                       &out.other_kept}};
      st = m.ForwardBatch(mctx, steps, up);
      EXPECT_TRUE(st.ok()) << st.message();
      return out;
    };
    const Run cpu = run(*p.cpu, *p.cpu_ctx);
    const Run gpu = run(*p.gpu, ctx);
    const double err = testing::RelativeL2Error(gpu.logits, cpu.logits);
    const double err_other = testing::RelativeL2Error(gpu.other_logits, cpu.other_logits);
    std::printf("[%s] second step over a 90-token cache: logits error %.2e (fresh beside it "
                "%.2e)\n", label.c_str(), err, err_other);
    EXPECT_LT(err, BoundFor(label)) << label;
    EXPECT_LT(err_other, BoundFor(label)) << label;
    ASSERT_FALSE(cpu.kept.empty()) << label << ": the second step should select";
    for (const auto& [name, cpu_kept, gpu_kept] :
         {std::tuple{"continued", &cpu.kept, &gpu.kept},
          std::tuple{"fresh", &cpu.other_kept, &gpu.other_kept}}) {
      ASSERT_EQ(cpu_kept->size(), gpu_kept->size()) << label << " " << name;
      for (size_t i = 0; i < cpu_kept->size(); ++i) {
        std::printf("[%s %s] drop layer %d kept cpu %d gpu %d of %d\n", label.c_str(), name,
                    (*cpu_kept)[i].layer, (*cpu_kept)[i].kept, (*gpu_kept)[i].kept,
                    (*cpu_kept)[i].alive);
        EXPECT_EQ((*cpu_kept)[i].kept, (*gpu_kept)[i].kept) << label << " " << name;
        EXPECT_EQ((*cpu_kept)[i].alive, (*gpu_kept)[i].alive) << label << " " << name;
      }
    }
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
  EXPECT_LT(testing::RelativeL2Error(ta, la), 1e-2);
  EXPECT_LT(testing::RelativeL2Error(tb, lb), 1e-2);
  EXPECT_LT(testing::RelativeL2Error(tc, lc_decode), 1e-2);
  std::printf("[%s] batch vs alone: %.2e %.2e %.2e\n", GetParam().c_str(),
              testing::RelativeL2Error(ta, la), testing::RelativeL2Error(tb, lb),
              testing::RelativeL2Error(tc, lc_decode));
}

// ---- UniPrefill that keeps everything equals dense, bit for bit ----
//
// p = 1 (top-p) and keep ratio 1 (fixed ratio) keep every token (sparsity::SelectTokens' keep-all
// rule, which ops::cuda::SelectTokens mirrors). The CUDA model does not skip the drop for them: a
// prompt longer than S + n still takes the drop layer's path (cuda_model_drops.cc: scoring, a
// selection that keeps every row, for top-p the host sync, then the compaction's gathers; fixed
// ratio runs its bounded segments at capacity = the full length). Every one of those steps copies
// or leaves the values alone: the kept rows are gathered unchanged (bf16 bits), the next segment's
// positions and alive indices are the dense ones, and every later kernel and GEMM gets the same
// shapes and values (the attention of the drop layer reads its queries from the gathered copy).
// So the logits must be equal bit for bit; a difference means the drop path changed something it
// should only have copied. Measured on the H200: all 18 logit vectors identical for every family
// and the tiny GGUF, in both modes.

// Every logits vector of one scenario, in order, and every request's kept records.
struct Trace {
  std::vector<std::vector<float>> logits;
  std::vector<std::string> what;  // which request and step each logits vector is
  std::vector<std::vector<KeptTokens>> kept = std::vector<std::vector<KeptTokens>>(4);
};
constexpr int kScenarioLengths[4] = {200, 150, 90, 40};

// One scenario on the GPU model under `up`. Request 0 alone: a 200-token prefill, then 4 decodes.
// Requests 1..3 packed: request 3's 40-token prompt alone, then one step with the prefills of
// requests 1 (150 tokens) and 2 (90 tokens) beside request 3's decode (packed as in
// PackedBatchEqualsEachAlone), then 3 packed decodes of all three. Decoded ids are fixed, not greedy, so every run
// feeds the same tokens.
Trace RunScenario(Model& m, DeviceContext& ctx, const UniPrefillConfig& up) {
  const int V = m.config().vocab_size;
  const std::vector<int> drops = up.active_drop_layers();
  const auto fixed_id = [V](int step, int r) {
    return static_cast<int32_t>((11 + 7 * step + 3 * r) % V);
  };
  Trace t;
  const auto forward = [&](const std::vector<SequenceStep>& steps, const std::string& what) {
    const Status st = m.ForwardBatch(ctx, steps, up);
    EXPECT_TRUE(st.ok()) << what << ": " << st.message();
  };
  const auto record = [&](const std::vector<float>& logits, const std::string& what) {
    t.logits.push_back(logits);
    t.what.push_back(what);
  };
  {
    auto cache = m.NewCache(256, drops);
    std::vector<float> logits(V);
    std::vector<int32_t> tokens = RandomTokens(kScenarioLengths[0], V, 61);
    for (int step = 0; step < 5; ++step) {
      const std::string what =
          step == 0 ? "request 0 prefill" : "request 0 decode " + std::to_string(step);
      forward({{cache.get(), tokens, logits.data(), &t.kept[0]}}, what);
      record(logits, what);
      tokens = {fixed_id(step, 0)};
    }
  }
  const std::vector<int32_t> p1 = RandomTokens(kScenarioLengths[1], V, 62),
                             p2 = RandomTokens(kScenarioLengths[2], V, 63),
                             p3 = RandomTokens(kScenarioLengths[3], V, 64);
  auto c1 = m.NewCache(256, drops), c2 = m.NewCache(256, drops), c3 = m.NewCache(256, drops);
  std::vector<float> l1(V), l2(V), l3(V);
  forward({{c3.get(), p3, l3.data(), &t.kept[3]}}, "request 3 prefill");
  record(l3, "request 3 prefill");
  std::vector<int32_t> t1 = p1, t2 = p2, t3{fixed_id(0, 3)};
  for (int step = 0; step < 4; ++step) {
    const std::string at = " (packed step " + std::to_string(step) + ")";
    forward({{c1.get(), t1, l1.data(), &t.kept[1]},
             {c3.get(), t3, l3.data(), &t.kept[3]},
             {c2.get(), t2, l2.data(), &t.kept[2]}},
            "packed step " + std::to_string(step));
    record(l1, (step == 0 ? "request 1 prefill" : "request 1 decode") + at);
    record(l2, (step == 0 ? "request 2 prefill" : "request 2 decode") + at);
    record(l3, "request 3 decode" + at);
    t1 = {fixed_id(step + 1, 1)};
    t2 = {fixed_id(step + 1, 2)};
    t3 = {fixed_id(step + 1, 3)};
  }
  return t;
}

// Both keep-all settings against dense: every logits vector bit for bit (EXPECT_EQ on the
// vectors: equal floats, NaN never equal) or, with bound > 0, within `bound` relative L2 error,
// and the drop path ran (it records what it kept) and kept every token of every prefill.
void ExpectKeepAllEqualsDense(DeviceContext& ctx, Model& m, const std::string& label,
                              double bound = 0.0) {
  const Trace dense = RunScenario(m, ctx, Dense());
  for (size_t i = 0; i < dense.logits.size(); ++i) {
    EXPECT_TRUE(std::isfinite(testing::MaxAbs(dense.logits[i]))) << label << ", " << dense.what[i];
  }
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(dense.kept[r].empty()) << "request " << r;
  for (auto mode : {sparsity::SelectionMode::kTopP, sparsity::SelectionMode::kFixedRatio}) {
    const UniPrefillConfig up = SmallBlocks(m.config(), mode, /*top_p=*/1.0f, /*keep_ratio=*/1.0f);
    const std::string name =
        label + (mode == sparsity::SelectionMode::kTopP ? " p = 1" : " keep ratio 1");
    SCOPED_TRACE(name);
    const Trace all = RunScenario(m, ctx, up);
    ASSERT_EQ(all.logits.size(), dense.logits.size());
    int identical = 0;
    double worst = 0;
    for (size_t i = 0; i < dense.logits.size(); ++i) {
      if (bound == 0.0) {
        EXPECT_EQ(all.logits[i], dense.logits[i])
            << dense.what[i]
            << ": max |diff| " << testing::MaxAbsDiff(all.logits[i], dense.logits[i]);
      } else {
        const double err = testing::RelativeL2Error(all.logits[i], dense.logits[i]);
        EXPECT_LT(err, bound) << dense.what[i];
        worst = std::max(worst, err);
      }
      identical += all.logits[i] == dense.logits[i] ? 1 : 0;
    }
    for (int r = 0; r < 4; ++r) {
      ASSERT_EQ(all.kept[r].size(), up.drop_layers.size()) << "request " << r;
      for (size_t i = 0; i < up.drop_layers.size(); ++i) {
        EXPECT_EQ(all.kept[r][i].layer, up.drop_layers[i]) << "request " << r;
        EXPECT_EQ(all.kept[r][i].kept, kScenarioLengths[r]) << "request " << r;
        EXPECT_EQ(all.kept[r][i].alive, kScenarioLengths[r]) << "request " << r;
      }
    }
    std::printf("[%s] keep-all vs dense: %d of %zu logit vectors bit-identical, worst relative "
                "L2 error %.2e\n",
                name.c_str(), identical, dense.logits.size(), worst);
  }
}

TEST_P(CudaModelFamilyTest, KeepAllEqualsDenseBitForBit) {
  UP_CUDA_TEST_CONTEXT(ctx);
  Pair p = Load(TinyDir(GetParam()), ctx);  // Qwen3-Next as shipped: top-2 routing included
  ASSERT_TRUE(p.gpu);
  ExpectKeepAllEqualsDense(ctx, *p.gpu, GetParam());
}

// The tiny GGUF (head dim 128): fresh prefills through flash attention, decodes through paged
// decode attention. Bit for bit with our flash attention everywhere (GpuAttention::kFlash; with
// the Hopper kernel too: CudaKeptQueriesTest, below, on a model whose drop is not its last
// layer, since this one's drop layer is its last, whose rows run as decodes). With cuDNN's
// (GpuAttention::kCudnn) dense prefills run cuDNN, while keep-all's drop layer gathers its kept
// queries (then ours runs them) and later windows by position stay ours: the two differ by the
// kernels' rounding only. Measured on the H200 (bench/results/gpu/issue17_final/cuda_tests.log,
// where the bit-for-bit check ran with cuDNN): 4 of 18 vectors differ, max |logit diff| 1.6e-2,
// relative L2 error <= 4.6e-3 over the 32 logits printed; the bound 2e-2 is 4x that, far below a
// wrong kept set or a mixed-up request (O(1)). This cuDNN variant itself has not run yet.
TEST(CudaModelTinyGgufTest, KeepAllEqualsDenseBitForBit) {
  UP_CUDA_TEST_CONTEXT(ctx);
  const std::string path =
      testing::WriteTempFile("cuda_tiny_gemma3.gguf", testing::BuildTinyGemma3());
  Pair p = Load(path, ctx, DeltaRuleChoice::kAuto, GpuAttention::kFlash);
  ASSERT_TRUE(p.gpu);
  ExpectKeepAllEqualsDense(ctx, *p.gpu, "tiny gguf");
}

TEST(CudaModelTinyGgufTest, KeepAllNearDenseWithCudnnAttention) {
  UP_CUDA_TEST_CONTEXT(ctx);
  if (!ops::cuda::CudnnAttention::Create(ctx).ok()) GTEST_SKIP() << "no cuDNN on this machine";
  const std::string path =
      testing::WriteTempFile("cuda_tiny_gemma3.gguf", testing::BuildTinyGemma3());
  Pair p = Load(path, ctx, DeltaRuleChoice::kAuto, GpuAttention::kCudnn);
  ASSERT_TRUE(p.gpu);
  ExpectKeepAllEqualsDense(ctx, *p.gpu, "tiny gguf, cuDNN", /*bound=*/2e-2);
}

// ---- A drop layer's kept queries on our Hopper kernel ----
//
// Since the 38th session a drop layer's kept queries (gathered before their attention) attend on
// the Hopper kernel by their coordinates, each row bit for bit its row of the whole problem
// (WgmmaAttentionTest.GatheredQueriesEqualTheirRowsOfTheWholeAttention). The tiny GGUF's only
// full-attention layer is its last, whose rows run as decodes, so these use the tiny Gemma 3
// preset at 12 layers: full attention (head dim 128) at layers 5 and 11, the drop at 5.
std::unique_ptr<Model> TinyGemma3Preset(DeviceContext& ctx, GpuAttention attention) {
  RandomModelOptions o;
  o.seed = 21;
  o.n_layers = 12;
  Result<ModelDefinition> d = RandomModelDefinition("tiny-gemma3", o);
  EXPECT_TRUE(d.ok()) << d.status().message();
  if (!d.ok()) return nullptr;
  LoadOptions lo;
  lo.gpu_attention = attention;
  lo.gpu_cudnn_autotune = false;
  Result<std::unique_ptr<Model>> m = MakeModel(std::move(d).value(), ctx, lo);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? std::move(m).value() : nullptr;
}

// Our kernels alone (GpuAttention::kOurs: the Hopper kernel on full-attention layers, flash
// attention on sliding ones), keep ratio 1 (sync-free: the drop layer gathers every row): keep-all
// equals dense bit for bit, the drop layer's gathered rows on the kernel that ran them dense. With
// UNIPREFILL_CUDA_KEPT_QUERIES_ON_FLASH=1 (flash attention for the gathered rows) this fails:
// the check that the path ran (callBD.sh runs it so).
TEST(CudaKeptQueriesTest, KeepAllEqualsDenseBitForBitOnOurHopperKernel) {
  UP_CUDA_TEST_CONTEXT(ctx);
  const cudaDeviceProp& props = ctx.cuda().properties();
  if (!ops::cuda::WgmmaAttentionAvailable(props.major, props.minor)) {
    GTEST_SKIP() << "the Hopper attention kernel needs compute capability 9.0";
  }
  auto m = TinyGemma3Preset(ctx, GpuAttention::kOurs);
  ASSERT_TRUE(m);
  ASSERT_EQ(TestDropLayers(m->config()), std::vector<int>{5});
  ExpectKeepAllEqualsDense(ctx, *m, "tiny-gemma3 preset, 12 layers, our kernels");
}

// Against the former path (UNIPREFILL_CUDA_KEPT_QUERIES_ON_FLASH=1): the same kept tokens at the
// drop and logits within the bf16 bound, fixed ratio (sync-free) and top-p (synced), a packed
// batch of two prompts.
TEST(CudaKeptQueriesTest, OurKernelAgainstTheFlashPath) {
  UP_CUDA_TEST_CONTEXT(ctx);
  auto ours = TinyGemma3Preset(ctx, GpuAttention::kAuto);
  ASSERT_EQ(setenv("UNIPREFILL_CUDA_KEPT_QUERIES_ON_FLASH", "1", 1), 0);
  auto flash = TinyGemma3Preset(ctx, GpuAttention::kAuto);
  unsetenv("UNIPREFILL_CUDA_KEPT_QUERIES_ON_FLASH");
  ASSERT_TRUE(ours && flash);
  const ModelConfig& c = ours->config();
  const std::vector<int32_t> a = RandomTokens(301, c.vocab_size, 31);
  const std::vector<int32_t> b = RandomTokens(190, c.vocab_size, 32);
  for (auto mode : {sparsity::SelectionMode::kFixedRatio, sparsity::SelectionMode::kTopP}) {
    const UniPrefillConfig up = SmallBlocks(c, mode);
    SCOPED_TRACE(mode == sparsity::SelectionMode::kTopP ? "top-p" : "ratio");
    struct Run {
      std::vector<float> la, lb;
      std::vector<KeptTokens> ka, kb;
    };
    auto run = [&](Model& m) {
      Run out;
      out.la.resize(c.vocab_size);
      out.lb.resize(c.vocab_size);
      auto ca = m.NewCache(400, up.active_drop_layers());
      auto cb = m.NewCache(400, up.active_drop_layers());
      std::vector<SequenceStep> steps{{ca.get(), a, out.la.data(), &out.ka},
                                      {cb.get(), b, out.lb.data(), &out.kb}};
      const Status st = m.ForwardBatch(ctx, steps, up);
      EXPECT_TRUE(st.ok()) << st.message();
      return out;
    };
    const Run o = run(*ours), f = run(*flash);
    ExpectSameKept(o.ka, f.ka, "request a");
    ExpectSameKept(o.kb, f.kb, "request b");
    ASSERT_EQ(o.ka.size(), 1u);
    const double ea = testing::RelativeL2Error(o.la, f.la);
    const double eb = testing::RelativeL2Error(o.lb, f.lb);
    EXPECT_LT(ea, 2e-2);
    EXPECT_LT(eb, 2e-2);
    std::printf("kept queries on our kernel against the flash path: %.2e / %.2e\n", ea, eb);
  }
}

// ---- A packed batch with drops equals each request alone ----
//
// Kept records equal exactly, the same greedy tokens, and logits within `bound` of the request run
// alone (0: bit for bit). The batch changes kernel configurations, not what is computed:
// CacheAttention picks its work split (query rows per tile, heads per CTA, items and keys per warp
// step, warps per chunk) from the batch size and longest query to fill the SMs
// (cache_attention.cu), and cuBLASLt plans are chosen per row count, so a row's f32 sums may run
// in another order. The bf16 stores usually hide that, not always: the dense batch test above
// measures 0 for llama and qwen3_next but 4.1e-3 / 8.6e-3 for gemma3
// (bench/results/gpu/cuda_model_tests.log). Measured on the H200 for the scenario below, the same
// in 3 runs: every family's logits bit-identical, so asserted bit for bit as measured, although
// the kernels do not promise it (a change of their work split may legitimately end it; then
// kBatchFlipBound is the fallback); the tiny GGUF 13 of 15 vectors identical, the others at most
// 1.2e-6 off (one logit's bf16 rounding, see its test). kBatchFlipBound = 1e-3 is ~1000x that and
// 20x below the dense batch test's 2e-2; a request mixed up with another, a wrong row or a wrong
// kept set is O(1).
constexpr double kBatchFlipBound = 1e-3;

struct AloneRun {
  std::vector<std::vector<float>> logits;  // the prefill's, then every decode's
  std::vector<int32_t> tokens;             // the greedy token each decode was fed
  std::vector<KeptTokens> kept;
};

// `prompt` alone on the model under `up`, then `decodes` greedy decodes.
AloneRun RunAlone(Model& m, DeviceContext& ctx, const std::vector<int32_t>& prompt, int decodes,
                  const UniPrefillConfig& up) {
  AloneRun out;
  auto cache = m.NewCache(256, up.active_drop_layers());
  std::vector<float> logits(m.config().vocab_size);
  std::vector<int32_t> tokens = prompt;
  for (int step = 0; step <= decodes; ++step) {
    SequenceStep s{cache.get(), tokens, logits.data(), &out.kept};
    const Status st = m.ForwardBatch(ctx, std::span<const SequenceStep>(&s, 1), up);
    EXPECT_TRUE(st.ok()) << st.message();
    out.logits.push_back(logits);
    if (step == decodes) break;
    out.tokens.push_back(TopK(logits, 1)[0]);
    tokens = {out.tokens.back()};
  }
  return out;
}

// Alone: a (150 tokens) and b (90) prefill then decode 4 greedy tokens; c (40) prefills then
// decodes 5. Together: c's prompt alone, then c's first decode packed between the prefills of a
// and b, then 4 packed decodes of all three, each fed the token its alone run chose (so every step
// compares like with like). Both selection modes (fixed ratio runs sync-free in both).
void ExpectPackedBatchWithDropsEqualsAlone(DeviceContext& ctx, Model& m, const std::string& label,
                                           double bound) {
  const ModelConfig& c = m.config();
  const int V = c.vocab_size;
  constexpr int kDecodes = 4;
  const std::vector<int32_t> pa = RandomTokens(150, V, 71), pb = RandomTokens(90, V, 72),
                             pc = RandomTokens(40, V, 73);
  for (auto mode : {sparsity::SelectionMode::kFixedRatio, sparsity::SelectionMode::kTopP}) {
    const UniPrefillConfig up = SmallBlocks(c, mode);
    const std::string name =
        label + (mode == sparsity::SelectionMode::kTopP ? " top-p 0.9" : " ratio 0.5");
    SCOPED_TRACE(name);
    const AloneRun a = RunAlone(m, ctx, pa, kDecodes, up), b = RunAlone(m, ctx, pb, kDecodes, up),
                   cc = RunAlone(m, ctx, pc, kDecodes + 1, up);
    ASSERT_FALSE(a.kept.empty());
    EXPECT_LT(a.kept.back().kept, a.kept.front().alive) << "the drops must drop";

    const std::vector<int> drops = up.active_drop_layers();
    auto cache_a = m.NewCache(256, drops), cache_b = m.NewCache(256, drops),
         cache_c = m.NewCache(256, drops);
    std::vector<KeptTokens> ka, kb, kc;
    std::vector<float> la(V), lb(V), lc(V);
    {
      SequenceStep s{cache_c.get(), pc, lc.data(), &kc};
      ASSERT_TRUE(m.ForwardBatch(ctx, std::span<const SequenceStep>(&s, 1), up).ok());
    }
    double worst = 0;
    int exact = 0, compared = 0;
    const auto compare = [&](const std::vector<float>& got, const std::vector<float>& want,
                             const std::string& what) {
      const double err = testing::RelativeL2Error(got, want);
      worst = std::max(worst, err);
      ++compared;
      if (got == want) {
        ++exact;
      } else {
        std::printf("[%s] %s: not bit-identical, normalised error %.2e, max |diff| %.3g\n",
                    name.c_str(), what.c_str(), err, testing::MaxAbsDiff(got, want));
      }
      if (bound == 0) {
        EXPECT_EQ(got, want) << what << ": max |diff| " << testing::MaxAbsDiff(got, want);
      } else {
        EXPECT_LT(err, bound) << what << ": max |diff| " << testing::MaxAbsDiff(got, want);
      }
      // The batch's greedy choice is the alone run's, unless the alone logits of the two tokens
      // are closer than the bound allows (a near-tie; none with bound 0).
      const int want_id = TopK(want, 1)[0], got_id = TopK(got, 1)[0];
      if (got_id == want_id) return;
      const float gap = want[want_id] - want[got_id], tol = TieTolerance(want, bound);
      std::printf("[%s] %s: greedy %d in the batch, %d alone (alone gap %.3g, tol %.3g)\n",
                  name.c_str(), what.c_str(), got_id, want_id, gap, tol);
      EXPECT_LT(gap, tol) << what << ": the greedy token differs without a near-tie";
    };
    std::vector<int32_t> ta = pa, tb = pb, tc{cc.tokens[0]};
    for (int step = 0; step <= kDecodes; ++step) {
      const std::vector<SequenceStep> steps{{cache_a.get(), ta, la.data(), &ka},
                                            {cache_c.get(), tc, lc.data(), &kc},
                                            {cache_b.get(), tb, lb.data(), &kb}};
      const Status st = m.ForwardBatch(ctx, steps, up);
      ASSERT_TRUE(st.ok()) << st.message();
      const std::string at = "packed step " + std::to_string(step);
      compare(la, a.logits[step], "a, " + at);
      compare(lb, b.logits[step], "b, " + at);
      compare(lc, cc.logits[step + 1], "c, " + at);
      if (step == kDecodes) break;
      ta = {a.tokens[step]};
      tb = {b.tokens[step]};
      tc = {cc.tokens[step + 1]};
    }
    ExpectSameKept(ka, a.kept, "a");
    ExpectSameKept(kb, b.kept, "b");
    ExpectSameKept(kc, cc.kept, "c");
    std::printf(
        "[%s] packed batch with drops vs alone: kept a %d/150 b %d/90 c %d/40, worst logits "
        "error %.2e (%d of %d vectors bit-identical)\n",
        name.c_str(), a.kept.back().kept, b.kept.empty() ? 90 : b.kept.back().kept,
        cc.kept.empty() ? 40 : cc.kept.back().kept, worst, exact, compared);
  }
}

// Qwen3-Next with all experts routed (ModelDir): with top-2 routing, a router near-tie that the
// batch's different rounding flips would change a row by O(1), beyond any tight bound. One delta-
// rule kernel for every sequence: kAuto picks by the batch's longest sequence (token by token up
// to 16 rows, f32 chunks up to 64, tensor cores beyond), so a request packed beside a longer one
// would run another kernel than alone and round differently.
TEST_P(CudaModelFamilyTest, PackedBatchWithDropsEqualsEachAlone) {
  UP_CUDA_TEST_CONTEXT(ctx);
  Pair p = Load(ModelDir(GetParam()), ctx, DeltaRuleChoice::kChunked);
  ASSERT_TRUE(p.gpu);
  ExpectPackedBatchWithDropsEqualsAlone(ctx, *p.gpu, GetParam(), /*bound=*/0);
}

// Within kBatchFlipBound: measured on the H200 with cuDNN's plans chosen by timing, 13 of the 15
// logit vectors identical, the others at most 1.2e-6 off (the H100 in the 27th-29th sessions: 14
// of 15, 7.5e-5); once (29th session, call AC, the host busy writing a checkpoint) all of a's five
// 3.6e-3 off, as far apart as cuDNN's plans and our kernels are. With the heuristics' first plan
// in every bucket (the fixture's gpu_cudnn_autotune = false) all 15 were bit-identical on the H100
// with 12 busy host threads beside the test (call AH): the window layers of a fresh request run
// cuDNN here, and the packed and the alone shapes are different buckets. The bound stays for
// machines whose first plan differs by bucket.
TEST(CudaModelTinyGgufTest, PackedBatchWithDropsEqualsEachAlone) {
  UP_CUDA_TEST_CONTEXT(ctx);
  const std::string path =
      testing::WriteTempFile("cuda_tiny_gemma3.gguf", testing::BuildTinyGemma3());
  Pair p = Load(path, ctx);
  ASSERT_TRUE(p.gpu);
  ExpectPackedBatchWithDropsEqualsAlone(ctx, *p.gpu, "tiny gguf", kBatchFlipBound);
}

// Fixed ratio runs sync-free (capacities, padding rows, device-side counts, caches trimmed after
// the final sync); DropSync::kEveryDrop forces the synced, exactly laid-out path. Both on a
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
  UniPrefillConfig up_synced = up;
  up_synced.drop_sync = DropSync::kEveryDrop;
  auto run = [&](bool synced) {
    const UniPrefillConfig& config = synced ? up_synced : up;
    Run out;
    for (int i = 0; i < 3; ++i) out.caches.push_back(m.NewCache(512, config.active_drop_layers()));
    std::vector<float> l0(V), l1(V), l2(V);
    {  // request 1 has its prompt already: this step decodes it
      SequenceStep s{out.caches[1].get(), d, l1.data()};
      EXPECT_TRUE(m.ForwardBatch(ctx, std::span<const SequenceStep>(&s, 1), config).ok());
    }
    std::vector<int32_t> one{5};
    std::vector<SequenceStep> steps{{out.caches[0].get(), a, l0.data(), &out.kept[0]},
                                    {out.caches[1].get(), one, l1.data(), &out.kept[1]},
                                    {out.caches[2].get(), b, l2.data(), &out.kept[2]}};
    std::vector<std::vector<int32_t>> next(3);
    for (int step = 0; step < 7; ++step) {
      const Status st =
          m.ForwardBatch(ctx, steps, config, nullptr, step == 0 ? &out.prefill_stats : nullptr);
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
    const double err = testing::RelativeL2Error(free_run.logits[i], synced.logits[i]);
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

// Decode with the next token chosen on the device (SequenceStep::sampling) equals the host path
// token for token: three requests decoded together, greedy, each step's device id equal to the
// argmax of the same step's host logits (one request asks for both, so both come from one forward)
// and its device logprob equal to the host log-softmax; then filtered draws whose kept set is
// known on the host (top-k 1 at temperature 1: the argmax; top-p 0.9: inside the host's set).
TEST_P(CudaModelFamilyTest, DeviceSamplingEqualsHostLogitsTokenForToken) {
  UP_CUDA_TEST_CONTEXT(ctx);
  Pair p = Load(ModelDir(GetParam()), ctx);
  ASSERT_TRUE(p.gpu);
  Model& m = *p.gpu;
  const int V = m.config().vocab_size;
  const UniPrefillConfig dense = Dense();
  const std::vector<int> lengths = {7, 40, 131};
  constexpr int kSteps = 12;
  std::vector<std::unique_ptr<SequenceCache>> caches;
  std::vector<std::vector<float>> logits(3, std::vector<float>(V));
  std::vector<std::vector<int32_t>> feed(3);
  for (int r = 0; r < 3; ++r) {
    caches.push_back(m.NewCache(lengths[r] + kSteps + 1));
    feed[r] = RandomTokens(lengths[r], V, 500 + r);
  }
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  for (int step = 0; step < kSteps; ++step) {
    SCOPED_TRACE(GetParam() + " step " + std::to_string(step));
    // Step kinds: greedy; top-k 1 at temperature 1; top-p 0.9 at temperature 0.7.
    const int kind = step % 3;
    std::vector<StepSampling> sampling(3);
    std::vector<int32_t> ids(3, -1);
    std::vector<float> logprobs(3, NAN);
    std::vector<SequenceStep> steps(3);
    for (int r = 0; r < 3; ++r) {
      sampling[r].temperature = kind == 0 ? 0.0f : kind == 1 ? 1.0f : 0.7f;
      sampling[r].top_k = kind == 1 ? 1 : 0;
      sampling[r].top_p = kind == 2 ? 0.9f : 1.0f;
      sampling[r].uniform = uniform(rng);
      sampling[r].token = &ids[r];
      sampling[r].logprob = &logprobs[r];
      steps[r].cache = caches[r].get();
      steps[r].tokens = feed[r];
      steps[r].sampling = &sampling[r];
      steps[r].logits = logits[r].data();  // the host's view of the very same forward
    }
    ASSERT_TRUE(m.ForwardBatch(ctx, steps, dense).ok());
    for (int r = 0; r < 3; ++r) {
      const std::vector<float>& l = logits[r];
      const int32_t argmax = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
      double z = 0;
      const float max = l[argmax];
      for (float x : l) z += std::exp(static_cast<double>(x - max));
      ASSERT_GE(ids[r], 0);
      ASSERT_LT(ids[r], V);
      EXPECT_NEAR(logprobs[r], l[ids[r]] - max - std::log(z), 1e-4) << "request " << r;
      if (kind < 2) {
        EXPECT_EQ(ids[r], argmax) << "request " << r;
      } else {  // inside the smallest descending prefix whose mass reaches 0.9 (+ slack)
        std::vector<int32_t> order(V);
        std::iota(order.begin(), order.end(), 0);
        std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
          return l[a] != l[b] ? l[a] > l[b] : a < b;
        });
        double mass = 0;
        bool inside = false;
        for (int32_t id : order) {
          inside = inside || id == ids[r];
          mass += std::exp(static_cast<double>(l[id] - max)) / z;
          if (mass >= 0.9 + 1e-4) break;
        }
        EXPECT_TRUE(inside) << "request " << r << " drew " << ids[r];
      }
      feed[r] = {ids[r]};
    }
  }
  // The same requests decoded greedily with host logits only, from fresh caches, reproduce the
  // device path's greedy tokens (nothing else in the forward depends on how tokens are chosen).
  for (int r = 0; r < 3; ++r) {
    std::vector<int32_t> host_tokens, device_tokens;
    Greedy(m, ctx, RandomTokens(lengths[r], V, 500 + r), 6, dense, &host_tokens, nullptr);
    auto cache = m.NewCache(lengths[r] + 8);
    std::vector<int32_t> in = RandomTokens(lengths[r], V, 500 + r);
    for (int i = 0; i < 6; ++i) {
      int32_t id = -1;
      StepSampling greedy;
      greedy.token = &id;
      SequenceStep s{cache.get(), in, nullptr};
      s.sampling = &greedy;
      ASSERT_TRUE(m.ForwardBatch(ctx, {&s, 1}, dense).ok());
      device_tokens.push_back(id);
      in = {id};
    }
    EXPECT_EQ(device_tokens, host_tokens) << GetParam() << " request " << r;
  }
}

// Decode steps as CUDA graphs (LoadOptions::gpu_decode_graphs) equal kernel-by-kernel decode bit
// for bit: the same model loaded both ways decodes three requests together (batch sizes 3, then
// 2 after one finishes, then 3 again: graphs updated and re-made), greedy on the device, with every
// step's host logits compared exactly and the tokens equal.
TEST_P(CudaModelFamilyTest, DecodeGraphsEqualEagerDecodeBitForBit) {
  UP_CUDA_TEST_CONTEXT(ctx);
  auto load = [&](bool graphs) {
    LoadOptions lo;
    lo.gpu_decode_graphs = graphs;
    auto m = LoadModel(ModelDir(GetParam()), ctx, lo);
    EXPECT_TRUE(m.ok()) << m.status().message();
    return m.ok() ? std::move(*m) : nullptr;
  };
  std::unique_ptr<Model> graphed = load(true), eager = load(false);
  ASSERT_TRUE(graphed && eager);
  const int V = graphed->config().vocab_size;
  const UniPrefillConfig dense = Dense();
  const std::vector<int> lengths = {9, 64, 133};
  constexpr int kSteps = 10;
  struct Run {
    std::vector<std::unique_ptr<SequenceCache>> caches;
    std::vector<std::vector<int32_t>> feed, tokens;
    std::vector<std::vector<float>> logits;
  };
  auto start = [&](Model& m) {
    Run run;
    for (int r = 0; r < 3; ++r) {
      run.caches.push_back(m.NewCache(lengths[r] + kSteps + 1));
      run.feed.push_back(RandomTokens(lengths[r], V, 700 + r));
      run.tokens.emplace_back();
      run.logits.emplace_back(V);
    }
    return run;
  };
  Run a = start(*graphed), b = start(*eager);
  for (int step = 0; step < kSteps; ++step) {
    SCOPED_TRACE(GetParam() + " step " + std::to_string(step));
    // Request 2 sits out steps 4 and 5 (a smaller batch in between).
    std::vector<int> active = {0, 1};
    if (step < 4 || step > 5) active.push_back(2);
    for (Run* run : {&a, &b}) {
      Model& m = run == &a ? *graphed : *eager;
      std::vector<StepSampling> sampling(active.size());
      std::vector<int32_t> ids(active.size(), -1);
      std::vector<SequenceStep> steps(active.size());
      for (size_t i = 0; i < active.size(); ++i) {
        const int r = active[i];
        sampling[i].token = &ids[i];
        steps[i].cache = run->caches[r].get();
        steps[i].tokens = run->feed[r];
        steps[i].sampling = &sampling[i];
        steps[i].logits = run->logits[r].data();
      }
      ASSERT_TRUE(m.ForwardBatch(ctx, steps, dense).ok());
      for (size_t i = 0; i < active.size(); ++i) {
        run->tokens[active[i]].push_back(ids[i]);
        run->feed[active[i]] = {ids[i]};
      }
    }
    for (int r : active) {
      EXPECT_EQ(a.logits[r], b.logits[r]) << "request " << r;
      EXPECT_EQ(a.tokens[r], b.tokens[r]) << "request " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, CudaModelFamilyTest,
                         ::testing::Values("gemma3", "llama", "qwen3_next"));

// The tiny Qwen3-Next as shipped (top-2 of 4 experts). Its router probabilities are often within
// bf16 noise of each other (random weights), so the GPU sends some rows to another expert than the
// host does, and a flipped row changes by O(1): the logits' error, measured 2.1e-2 .. 1.56e-1 on
// the H200 (bench/results/gpu/cuda_model_tests.log), cannot be held to kQwenLogitsBound. The
// host's routing margins are internal to the model, so the checks are:
// - the error is below kRoutingFlipBound = 0.2 (1.3x the worst measured);
// - the bound separates flips from a wrong MoE: the host's all-experts copy (same weights, the
//   routing of every row changed) is 0.45 .. 1.1 from the host's top-2 logits on these prompts
//   (measured on the CPU), and the test asserts that distance stays above twice the bound, so a
//   GPU MoE that ignores the top-k choice, or routes most rows wrongly, fails the first check;
// - the GPU's greedy token is the host's, unless the host's logits of the two are closer than twice
//   the rms logit error the bound allows (2 x bound x rms(logits): a near-tie, printed).
// The MoE's arithmetic is held to the strict bound by the all-experts copy (CudaModelFamilyTest).
TEST(CudaModelQwen3NextTest, TopTwoRoutingWithinTheRoutingFlipBound) {
  UP_CUDA_TEST_CONTEXT(ctx);
  constexpr double kRoutingFlipBound = 0.2;
  Pair p = Load(TinyDir("qwen3_next"), ctx);
  ASSERT_TRUE(p.cpu && p.gpu);
  LoadOptions lo;
  lo.f32_decode = true;
  auto all_experts = LoadModel(QwenAllExpertsDir(), *p.cpu_ctx, lo);
  ASSERT_TRUE(all_experts.ok()) << all_experts.status().message();
  int seed = 1;
  for (int n : {5, 37, 130, 301}) {
    std::vector<int32_t> unused;
    const std::vector<int32_t> prompt = RandomTokens(n, p.cpu->config().vocab_size, seed++);
    const std::vector<float> cpu = Greedy(*p.cpu, *p.cpu_ctx, prompt, 0, Dense(), &unused, nullptr);
    const std::vector<float> gpu = Greedy(*p.gpu, ctx, prompt, 0, Dense(), &unused, nullptr);
    const std::vector<float> cpu_all =
        Greedy(**all_experts, *p.cpu_ctx, prompt, 0, Dense(), &unused, nullptr);
    const double err = testing::RelativeL2Error(gpu, cpu);
    const double rerouted = testing::RelativeL2Error(cpu_all, cpu);
    const int cpu_id = TopK(cpu, 1)[0], gpu_id = TopK(gpu, 1)[0];
    const float gap = cpu[cpu_id] - cpu[gpu_id];
    const float tie = static_cast<float>(2.0 * kRoutingFlipBound * Rms(cpu));
    std::printf(
        "[qwen3_next top-2 routing] %d tokens: normalised error %.2e (host all-experts copy "
        "%.2e); greedy cpu %d gpu %d (host gap %.3g, tie tolerance %.3g)\n",
        n, err, rerouted, cpu_id, gpu_id, gap, tie);
    EXPECT_LT(err, kRoutingFlipBound) << n << " tokens";
    EXPECT_GT(rerouted, 2 * kRoutingFlipBound)
        << n << " tokens: the bound would not tell a wrongly routed MoE from routing flips";
    if (gpu_id != cpu_id) {
      EXPECT_LT(gap, tie) << n << " tokens: the greedy token differs without a near-tie";
    }
  }
}

// Diagnostic (run explicitly): GPU vs host error of the tiny Qwen3-Next (all experts) cut to 1..8
// layers, for a few prompts, with each delta-rule kernel: where the error grows, layer by layer.
TEST(CudaModelQwen3NextTest, DISABLED_ErrorByDepth) {
  UP_CUDA_TEST_CONTEXT(ctx);
  const std::pair<DeltaRuleChoice, const char*> kernels[] = {
      {DeltaRuleChoice::kAuto, "auto"},
      {DeltaRuleChoice::kChunked, "chunked"},
      {DeltaRuleChoice::kRecurrent, "recurrent"},
      {DeltaRuleChoice::kChunkedTensorCore, "tensor-core"}};
  constexpr int kKernels = 4;
  for (int run = 0; run < 8 * kKernels; ++run) {
    const int layers = 1 + run / kKernels;
    const auto& [kernel, name] = kernels[run % kKernels];
    Pair p = Load(QwenAllExpertsDir(layers), ctx, kernel);
    ASSERT_TRUE(p.cpu && p.gpu);
    std::printf("[qwen3_next depth %d, %s delta rule]", layers, name);
    int seed = 1;
    for (int n : {5, 37, 130, 301}) {
      std::vector<int32_t> t;
      const std::vector<int32_t> prompt = RandomTokens(n, p.cpu->config().vocab_size, seed++);
      const std::vector<float> cpu = Greedy(*p.cpu, *p.cpu_ctx, prompt, 0, Dense(), &t, nullptr);
      const std::vector<float> gpu = Greedy(*p.gpu, ctx, prompt, 0, Dense(), &t, nullptr);
      std::printf(" %d tok %.2e", n, testing::RelativeL2Error(gpu, cpu));
    }
    std::printf("\n");
  }
}

// The real Gemma 3 270M (Q4_K_M GGUF, dequantised to bf16 on the GPU) on the 4 golden prompts:
// against the host model (f32) and the committed fp32 transformers logits.
TEST(CudaModelGemma270mTest, MatchesHostAndFp32Goldens) {
  UP_CUDA_TEST_CONTEXT(ctx);
  // Missing is a failure (UNIPREFILL_ALLOW_MISSING_ASSETS=1 turns it into a skip).
  UP_REQUIRE_ASSET(Gemma270m(), "the default model (Gemma 3 270M, Q4_K_M GGUF)");
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
    const double err = testing::RelativeL2Error(logits, ref);
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
