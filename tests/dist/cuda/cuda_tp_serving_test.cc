// Serving under tensor parallelism on the GPU (issue 21): rank 0's BatchEngine schedules and
// samples (on the device, or from host logits for a request asking for logprobs) and broadcasts
// each step's plan; the decode inputs in it are the tokens rank 0 chose, so the followers
// (BatchEngine::Follow on a device model: caches on their own device pool, no logits, no
// sampling) advance their KV and Gated DeltaNet state as rank 0 does. NCCL refuses two ranks on
// one GPU, so the N-rank path runs here as threads sharing the GPU through the staged transport
// (testing/tp_serve.h), and the product's transport at world size 1: the NCCL communicator the
// engine builds for `--tensor-parallel` (EngineLoader wraps a host communicator in it), whose
// rank 0 runs the same plan broadcast to nobody. The tiny Llama and Qwen3-Next checkpoints (top-2
// routing at world 1; every expert routed at world 2, as cuda_tensor_parallel_test.cc), UniPrefill
// fixed-ratio 0.5, a 64-token step budget (chunked prompts beside decodes): at world 1 every
// request gets the plain GPU server's tokens, finish reason and kept counts; at 2 ranks the same
// kept counts and finish reasons, and tokens and logprobs up to bf16 noise (greedy requests,
// parting only at near-ties). The CPU twin (f32, token for token at any world size):
// tests/engine/tp_serving_test.cc.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "dist/cuda/staged_device_communicator.h"
#include "dist/thread_communicator.h"
#include "testing/cuda_model_fixtures.h"
#include "testing/cuda_test_util.h"
#include "testing/tp_serve.h"

namespace uniprefill {
namespace {

void ExpectServesAsPlainServer(const std::string& dir, const std::string& label,
                               std::vector<int> drops, int world) {
  const EngineOptions o = testing::TinyServingOptions(dir, "cuda", std::move(drops));
  // World 1 is the plain server's arithmetic, token for token whatever the sampling; N ranks
  // add bf16 partial sums in another order (1 of 6 requests kept every token on the H200,
  // session 7 call 1), so they are compared greedily, by logprobs, up to near-ties.
  const std::vector<testing::ServedRequest> reqs =
      world == 1 ? testing::TpServeRequests() : testing::TpServeGreedyLogprobRequests();
  const ServingOptions steps = testing::SmallServingSteps();
  const testing::ServeRun plain = testing::ServeOnRanks(o, steps, reqs, {});
  ASSERT_TRUE(plain.error.empty()) << plain.error;
  int dropped = 0;
  for (const testing::Served& s : plain.served) {
    ASSERT_EQ(s.error, "");
    EXPECT_EQ(static_cast<int>(s.tokens.size()), 10);
    if (!s.kept.empty() && s.kept.back().kept < s.kept.front().alive) ++dropped;
  }
  EXPECT_GE(dropped, 2) << "the long UniPrefill prompts should drop tokens";
  std::vector<std::unique_ptr<dist::Communicator>> comms;
  if (world == 1) {
    comms.push_back(dist::MakeLocalCommunicator());  // the engine wraps it in NCCL
  } else {
    for (auto& h : dist::MakeThreadCommunicators(world, dist::CommOptions{})) {
      comms.push_back(dist::MakeStagedDeviceCommunicator(std::move(h)));
    }
  }
  const testing::ServeRun tp = testing::ServeOnRanks(o, steps, reqs, std::move(comms));
  if (world == 1 && tp.error.find("cannot load libnccl") != std::string::npos) {
    GTEST_SKIP() << tp.error;
  }
  if (world > 1) {
    // Logprobs move by about the logits' error (<= 2.5e-2 of their scale for Llama, 0.15 for
    // Qwen3-Next: cuda_tensor_parallel_test.cc); a rank with a wrong shard or stale state moves
    // them by whole nats.
    constexpr double kLogprobTolerance = 0.5;
    int parted = 0;
    const double worst =
        testing::ExpectServedWithinNoise(tp, plain, label, kLogprobTolerance, &parted);
    std::printf("%s: %d of %zu requests parted at a near-tie, largest logprob difference "
                "before that %.3g nats\n",
                label.c_str(), parted, reqs.size(), worst);
  } else {
    testing::ExpectSameServed(tp, plain, label);
  }
  int same = 0;
  for (size_t i = 0; i < reqs.size() && i < tp.served.size(); ++i) {
    same += tp.served[i] == plain.served[i];
  }
  std::printf(
      "%s: %d of %zu requests served exactly as the plain GPU server (%d of them "
      "dropped tokens), %lld steps\n",
      label.c_str(), same, reqs.size(), dropped, static_cast<long long>(tp.metrics.steps));
}

std::string Tiny(const std::string& family) { return cuda_model_test::TinyDir(family); }

TEST(CudaTensorParallelServingTest, NcclWorldOfOneServesTinyLlamaAsThePlainServer) {
  UP_CUDA_TEST_CONTEXT(ctx);
  (void)ctx;
#ifndef UNIPREFILL_WITH_NCCL
  GTEST_SKIP() << "built without nccl.h";
#else
  ExpectServesAsPlainServer(Tiny("llama"), "llama, NCCL world of one", {1, 2}, 1);
#endif
}

TEST(CudaTensorParallelServingTest, NcclWorldOfOneServesTinyQwen3NextAsThePlainServer) {
  UP_CUDA_TEST_CONTEXT(ctx);
  (void)ctx;
#ifndef UNIPREFILL_WITH_NCCL
  GTEST_SKIP() << "built without nccl.h";
#else
  ExpectServesAsPlainServer(Tiny("qwen3_next"), "qwen3_next, NCCL world of one", {3}, 1);
#endif
}

TEST(CudaTensorParallelServingTest, TwoRanksOnOneGpuServeTinyLlamaAsThePlainServer) {
  UP_CUDA_TEST_CONTEXT(ctx);
  (void)ctx;
  ExpectServesAsPlainServer(Tiny("llama"), "llama, TP 2 (staged, one GPU)", {1, 2}, 2);
}

TEST(CudaTensorParallelServingTest, TwoRanksOnOneGpuServeTinyQwen3NextAsThePlainServer) {
  UP_CUDA_TEST_CONTEXT(ctx);
  (void)ctx;
  ExpectServesAsPlainServer(cuda_model_test::QwenAllExpertsDir(),
                            "qwen3_next (all experts), TP 2 (staged, one GPU)", {3}, 2);
}

}  // namespace
}  // namespace uniprefill
