// Serving under tensor parallelism in one process on the CPU (issue 21): rank 0's BatchEngine
// schedules, samples and broadcasts each step's plan, the other ranks run BatchEngine::Follow,
// all as threads (dist::MakeThreadCommunicators) of the product's engine (testing/tp_serve.h).
// The tiny Qwen3-Next checkpoint (Gated DeltaNet state, MoE by whole experts) and the tiny
// Llama, UniPrefill fixed-ratio 0.5 with small blocks so 200-token prompts drop, a 64-token step
// budget so prompts run in chunks beside other requests' decodes: TP 2 and a world of one (the
// same rank-0 path: plans encoded and broadcast to nobody) give exactly the plain server's
// tokens, finish reasons and kept counts. The GPU twin is tests/dist/cuda/cuda_tp_serving_test.cc
// (mpirun runs of `serve --tensor-parallel 2`: tests/mpi/tp_serve_test.py).
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "dist/thread_communicator.h"
#include "testing/tp_serve.h"

namespace uniprefill {
namespace {

void ExpectTensorParallelServesAsOne(const std::string& family, std::vector<int> drops) {
  const EngineOptions o = testing::TinyServingOptions(
      std::string(UP_SOURCE_DIR) + "/tests/goldens/hf_tiny/" + family, "cpu", std::move(drops));
  const std::vector<testing::ServedRequest> reqs = testing::TpServeRequests();
  const ServingOptions steps = testing::SmallServingSteps();
  const testing::ServeRun one = testing::ServeOnRanks(o, steps, reqs, {});
  ASSERT_TRUE(one.error.empty()) << one.error;
  int dropped = 0;
  for (const testing::Served& s : one.served) {
    ASSERT_EQ(s.error, "");
    EXPECT_EQ(static_cast<int>(s.tokens.size()), 10);
    if (!s.kept.empty() && s.kept.back().kept < s.kept.front().alive) ++dropped;
  }
  EXPECT_GE(dropped, 2) << "the long UniPrefill prompts should drop tokens";
  std::vector<std::unique_ptr<dist::Communicator>> world1;
  world1.push_back(dist::MakeLocalCommunicator());
  testing::ExpectSameServed(testing::ServeOnRanks(o, steps, reqs, std::move(world1)), one,
                            family + " world of one");
  const testing::ServeRun two =
      testing::ServeOnRanks(o, steps, reqs, dist::MakeThreadCommunicators(2, dist::CommOptions{}));
  testing::ExpectSameServed(two, one, family + " TP 2");
  EXPECT_EQ(two.metrics.requests_finished_length, static_cast<int64_t>(reqs.size()));
  std::printf("%s: TP 2 and a world of one against TP 1, %zu requests, %d of them dropping\n",
              family.c_str(), reqs.size(), dropped);
}

TEST(TensorParallelServingTest, TinyQwen3NextTwoRanksServeAsOne) {
  ExpectTensorParallelServesAsOne("qwen3_next", {3});
}

TEST(TensorParallelServingTest, TinyLlamaTwoRanksServeAsOne) {
  ExpectTensorParallelServesAsOne("llama", {1, 2});
}

}  // namespace
}  // namespace uniprefill
