// Tensor parallel 2 (two ranks as threads, dist/thread_communicator.h) against tensor parallel 1
// on real weights: the tiny Llama and Gemma 3 checkpoints (safetensors and a converted GGUF) and
// Gemma 3 270M (one KV head: replicated). Each rank loads the model, keeps its shard
// (dist/shard_definition.h) and runs the same forward: a prompt with UniPrefill drops (keep 0.5)
// at every full-attention layer, then greedy decode steps. Both ranks must agree bit for bit (logits, kept
// counts); against TP 1 the kept counts and greedy tokens must be identical and the logits within
// 1e-4 of their scale (row-parallel partial sums add in another order).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dist/thread_communicator.h"
#include "model/model.h"
#include "testing/required_asset.h"

namespace uniprefill {
namespace {

struct RunResult {
  std::vector<float> prompt_logits;       // f32 [vocab] after the prompt
  std::vector<KeptTokens> kept;           // the prompt's drops
  std::vector<int32_t> greedy;            // tokens chosen after the prompt
  std::vector<std::vector<float>> decode_logits;
  std::string error;
};

int Argmax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

RunResult RunModel(const std::string& path, dist::Communicator* comm, int threads,
                   const std::vector<int32_t>& prompt, int steps) {
  RunResult r;
  auto ctx = DeviceContext::Cpu(threads);
  LoadOptions lo;
  lo.f32_decode = true;
  lo.communicator = comm;
  auto loaded = LoadModel(path, *ctx, lo);
  if (!loaded.ok()) {
    r.error = loaded.status().message();
    return r;
  }
  Model& m = **loaded;
  // Drops at every full-attention layer, keeping half the blocks by score: random tokens spread
  // attention too evenly for top-p to drop anything, and the ratio still ranks the all-reduced
  // block scores.
  UniPrefillConfig up;
  for (int i = 0; i < m.config().n_layers; ++i) {
    if (m.config().layer_kinds[i] == LayerKind::kFullAttention) up.drop_layers.push_back(i);
  }
  up.selection.mode = SelectionMode::kFixedRatio;
  up.selection.keep_ratio = 0.5f;
  auto cache = m.NewCache(static_cast<int>(prompt.size()) + steps + 1, up.drop_layers);
  r.prompt_logits.resize(m.config().vocab_size);
  SequenceStep s{cache.get(), prompt, r.prompt_logits.data(), &r.kept};
  if (Status st = m.ForwardBatch(*ctx, std::span<const SequenceStep>(&s, 1), up); !st.ok()) {
    r.error = st.message();
    return r;
  }
  std::vector<float> logits = r.prompt_logits;
  for (int i = 0; i < steps; ++i) {
    const int32_t next[1] = {Argmax(logits)};
    r.greedy.push_back(next[0]);
    SequenceStep d{cache.get(), next, logits.data(), nullptr};
    if (Status st = m.ForwardBatch(*ctx, std::span<const SequenceStep>(&d, 1), up); !st.ok()) {
      r.error = st.message();
      return r;
    }
    r.decode_logits.push_back(logits);
  }
  return r;
}

double MaxAbs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

void ExpectTp2EqualsTp1(const std::string& path, int prompt_tokens, int vocab_limit) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> tok(3, vocab_limit - 1);
  std::vector<int32_t> prompt(prompt_tokens);
  for (int32_t& t : prompt) t = tok(rng);
  constexpr int kSteps = 8;
  const RunResult one = RunModel(path, nullptr, 2, prompt, kSteps);
  ASSERT_TRUE(one.error.empty()) << one.error;
  ASSERT_FALSE(one.kept.empty()) << "the prompt should reach a drop layer";

  auto comms = dist::MakeThreadCommunicators(2, dist::CommOptions{});
  std::vector<RunResult> ranks(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back(
        [&, r] { ranks[r] = RunModel(path, comms[r].get(), 1, prompt, kSteps); });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(ranks[r].error.empty()) << ranks[r].error;

  // The ranks agree exactly: the same all-reduced sums, the same selection.
  EXPECT_EQ(ranks[0].prompt_logits, ranks[1].prompt_logits);
  EXPECT_EQ(ranks[0].greedy, ranks[1].greedy);
  ASSERT_EQ(ranks[0].kept.size(), ranks[1].kept.size());
  for (size_t i = 0; i < ranks[0].kept.size(); ++i) {
    EXPECT_EQ(ranks[0].kept[i].kept, ranks[1].kept[i].kept);
  }
  // TP 2 against TP 1.
  ASSERT_EQ(ranks[0].kept.size(), one.kept.size());
  for (size_t i = 0; i < one.kept.size(); ++i) {
    EXPECT_EQ(ranks[0].kept[i].layer, one.kept[i].layer);
    EXPECT_EQ(ranks[0].kept[i].kept, one.kept[i].kept) << "drop " << i;
  }
  EXPECT_LT(one.kept[0].kept, one.kept[0].alive) << "the first drop should drop rows";
  const double scale = std::max(1.0, MaxAbs(one.prompt_logits));
  const double diff = MaxAbsDiff(ranks[0].prompt_logits, one.prompt_logits);
  EXPECT_LE(diff, 1e-4 * scale) << "prompt logits, scale " << scale;
  EXPECT_EQ(ranks[0].greedy, one.greedy);
  double worst = 0;
  for (int i = 0; i < kSteps; ++i) {
    worst = std::max(worst, MaxAbsDiff(ranks[0].decode_logits[i], one.decode_logits[i]) /
                                std::max(1.0, MaxAbs(one.decode_logits[i])));
  }
  EXPECT_LE(worst, 1e-4);
  std::printf("TP 2 vs 1, %s: prompt logits max diff %.2e (scale %.2f), decode %.2e relative, "
              "kept", path.substr(path.rfind('/') + 1).c_str(), diff, scale, worst);
  for (const KeptTokens& k : one.kept) std::printf(" %d/%d", k.kept, k.alive);
  std::printf("\n");
}

std::string Source(const std::string& rel) { return std::string(UP_SOURCE_DIR) + "/" + rel; }

TEST(TensorParallelTest, TinyLlamaTp2EqualsTp1) {
  ExpectTp2EqualsTp1(Source("tests/goldens/hf_tiny/llama"), 700, 500);
}

TEST(TensorParallelTest, TinyLlamaGgufTp2EqualsTp1) {
  ExpectTp2EqualsTp1(Source("tests/goldens/llama_tiny_from_hf.gguf"), 700, 500);
}

TEST(TensorParallelTest, TinyGemma3Tp2EqualsTp1) {
  ExpectTp2EqualsTp1(Source("tests/goldens/hf_tiny/gemma3"), 700, 500);
}

TEST(TensorParallelTest, Gemma3_270mOneKvHeadReplicatedTp2EqualsTp1) {
  const std::string path = Source("models/gemma-3-270m-q4_k_m.gguf");
  UP_REQUIRE_ASSET(path, "the default model");
  ExpectTp2EqualsTp1(path, 600, 20000);
}

TEST(TensorParallelTest, UnshardableModelsAreRefusedWithAReason) {
  auto comms = dist::MakeThreadCommunicators(2, dist::CommOptions{});
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      errors[r] = RunModel(Source("tests/goldens/hf_tiny/qwen3_next"), comms[r].get(), 1, {5, 6},
                           0).error;
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& e : errors) EXPECT_NE(e.find("Gated DeltaNet"), std::string::npos) << e;
}

}  // namespace
}  // namespace uniprefill
