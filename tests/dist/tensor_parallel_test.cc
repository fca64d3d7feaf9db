// Tensor parallel 2 (two ranks as threads, dist/thread_communicator.h) against tensor parallel 1
// on real weights: the tiny Llama, Gemma 3 and Qwen3-Next checkpoints (safetensors, and Llama as a
// converted GGUF) and Gemma 3 270M (one KV head: replicated). Each rank loads the model, keeps its
// shard (dist/shard_definition.h) and runs the same forward: a prompt with UniPrefill drops (keep
// 0.5) at every full-attention layer, then greedy decode steps. Both ranks must agree bit for bit
// (logits, kept counts); against TP 1 the kept counts and greedy tokens must be identical and the
// logits within 1e-4 of their scale: only the row-parallel partial sums (o_proj, down, DeltaNet
// out_proj, the experts and shared expert of a MoE) add in another order, an f32 rounding of
// ~1e-7 relative per layer that the layers compound to ~1e-6; 1e-4 leaves room for that and
// fails on any wrong cut (a wrong head or expert moves logits by O(1)). Each rank's resident
// weight copies (the f32 prefill copies) must be at most 0.6 of TP 1's: about half, plus what
// every rank holds whole (a replicated KV head, the MoE router and shared-expert gate); none
// where TP 1 keeps none (the GEMM operands made per call on AVX-512 CPUs).
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
#include "testing/tp_run.h"

namespace uniprefill {
namespace {

using testing::CompareLogits;
using testing::LogitDiff;
using testing::RandomPrompt;
using testing::RunModel;
using testing::RunResult;

// kSteps greedy tokens: 8 for the attention-only families, 32 (the count) where the
// DeltaNet's recurrent state and the MoE routing must stay in step over a longer decode.
void ExpectTp2EqualsTp1(const std::string& path, int prompt_tokens, int vocab_limit,
                        int kSteps = 8) {
  const std::vector<int32_t> prompt = RandomPrompt(prompt_tokens, vocab_limit);
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
  const LogitDiff diff = CompareLogits(one, ranks[0]);
  EXPECT_LE(diff.prompt, 1e-4) << "prompt logits, scale " << diff.prompt_scale;
  EXPECT_EQ(ranks[0].greedy, one.greedy);
  ASSERT_EQ(ranks[0].decode_logits.size(), one.decode_logits.size());
  EXPECT_LE(diff.decode, 1e-4);
  // Copies: where Linear makes the f32 GEMM operand per call (LinearWeight::f32_on_call, an
  // AVX-512 CPU) TP 1 keeps none and neither may a rank; else a rank keeps about half.
  const size_t rank_copies = std::max(ranks[0].resident_bytes, ranks[1].resident_bytes);
  const double memory = one.resident_bytes == 0 ? static_cast<double>(rank_copies)
                                                : static_cast<double>(rank_copies) /
                                                      static_cast<double>(one.resident_bytes);
  EXPECT_LE(memory, 0.6) << "resident weight copies per rank / TP 1's (bytes when TP 1 has none)";
  const double host = static_cast<double>(std::max(ranks[0].host_weight_bytes,
                                                   ranks[1].host_weight_bytes)) /
                      static_cast<double>(one.host_weight_bytes);
  EXPECT_LE(host, 0.6) << "host weight bytes (stored + copies) per rank / TP 1's";
  std::printf("TP 2 vs 1, %s: prompt logits max diff %.2e relative (scale %.2f), decode %.2e, "
              "%d greedy tokens equal, rank copies %.2f and host weights %.2f of TP 1, kept",
              path.substr(path.rfind('/') + 1).c_str(), diff.prompt, diff.prompt_scale,
              diff.decode, kSteps, memory, host);
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

// --prefill-gemm int16 (no f32 copies where the int16 kernels run) must stay so per shard: a rank
// holds about half the stored weights and makes no copy one process would not make.
TEST(TensorParallelTest, Gemma3_270mInt16GemmRanksHoldHalfTheWeights) {
  const std::string path = Source("models/gemma-3-270m-q4_k_m.gguf");
  UP_REQUIRE_ASSET(path, "the default model");
  struct Bytes {
    size_t copies = 0, host = 0;
    std::string error;
  };
  auto load = [&](dist::Communicator* comm) {
    auto ctx = DeviceContext::Cpu(1);
    LoadOptions lo;
    lo.int16_prefill_gemm = true;
    lo.communicator = comm;
    Bytes b;
    auto m = LoadModel(path, *ctx, lo);
    if (!m.ok()) {
      b.error = m.status().message();
      return b;
    }
    b.copies = (*m)->resident_weight_bytes();
    b.host = (*m)->host_weight_bytes();
    return b;
  };
  const Bytes one = load(nullptr);
  ASSERT_TRUE(one.error.empty()) << one.error;
  auto comms = dist::MakeThreadCommunicators(2, dist::CommOptions{});
  std::vector<Bytes> ranks(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) threads.emplace_back([&, r] { ranks[r] = load(comms[r].get()); });
  for (std::thread& t : threads) t.join();
  for (const Bytes& b : ranks) {
    ASSERT_TRUE(b.error.empty()) << b.error;
    EXPECT_LE(static_cast<double>(b.host), 0.6 * static_cast<double>(one.host));
    // Copies only of what one process copies too (weights without int16 kernels at this ISA).
    EXPECT_LE(static_cast<double>(b.copies), 0.6 * static_cast<double>(one.copies));
  }
  std::printf("int16 GEMM, Gemma 3 270M: host weight bytes TP 1 %.1f MiB, per rank %.1f / %.1f "
              "MiB; f32 copies TP 1 %.1f MiB, per rank %.1f MiB\n",
              one.host / 1048576.0, ranks[0].host / 1048576.0, ranks[1].host / 1048576.0,
              one.copies / 1048576.0, ranks[0].copies / 1048576.0);
}

TEST(TensorParallelTest, TinyQwen3NextTp2EqualsTp1) {
  // Gated DeltaNet by heads (2 key / 4 value heads), MoE by experts (4, top 2), gated attention.
  ExpectTp2EqualsTp1(Source("tests/goldens/hf_tiny/qwen3_next"), 700, 500, 32);
}

TEST(TensorParallelTest, SizesThatDoNotSplitAreRefusedWithAReason) {
  // The tiny Qwen3-Next has 2 DeltaNet key heads: 4 ranks cannot split them.
  constexpr int kWorld = 4;
  auto comms = dist::MakeThreadCommunicators(kWorld, dist::CommOptions{});
  std::vector<std::string> errors(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      errors[r] = RunModel(Source("tests/goldens/hf_tiny/qwen3_next"), comms[r].get(), 1, {5, 6},
                           0).error;
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("DeltaNet key heads (2)"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace uniprefill
