// Tensor parallelism on the GPU (issue 21): the device collectives of the staged transport (N
// ranks as threads on one GPU) and of NCCL at world size 1, and the sharded CUDA model: two ranks
// on one GPU, each with its shard of the tiny Llama and Gemma 3 checkpoints (heads and FFN
// columns; the vocabulary whole), against the unsharded model on the same GPU: the ranks agree
// bit for bit, the kept counts at every drop and the greedy tokens equal TP 1's, the logits are
// within a bound (bf16 partial sums of o_proj and FFN down add in another order).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "dist/cuda/staged_device_communicator.h"
#include "dist/thread_communicator.h"
#include "model/model.h"
#include "testing/compare.h"
#include "testing/cuda_test_util.h"
#include "testing/tp_run.h"
#ifdef UNIPREFILL_WITH_NCCL
#include "dist/cuda/nccl_communicator.h"
#endif

namespace uniprefill {
namespace {

using ::uniprefill::testing::Bf16BitsToF32;
using ::uniprefill::testing::F32ToBf16Bits;

// Rank r holds bf16 and f32 values r + 1 + i % 7 (exact in bf16); the sums are exact.
void CheckSums(dist::Communicator& comm, DeviceContext& ctx, int world) {
  constexpr int kCount = 1000;
  std::vector<uint16_t> bf(kCount);
  std::vector<float> f(kCount);
  for (int i = 0; i < kCount; ++i) {
    f[i] = static_cast<float>(comm.rank() + 1 + i % 7);
    bf[i] = F32ToBf16Bits(f[i]);
  }
  DeviceBuffer d_bf = DeviceBuffer::FromHost(bf), d_f = DeviceBuffer::FromHost(f);
  UP_CUDA_CHECK(cudaDeviceSynchronize());
  cudaStream_t stream = ctx.cuda().stream();
  ASSERT_TRUE(comm.AllReduceDevice(d_bf.data(), kCount, DType::kBF16, stream).ok());
  ASSERT_TRUE(comm.AllReduceDevice(d_f.data(), kCount, DType::kF32, stream).ok());
  EXPECT_EQ(comm.AllReduceDevice(d_f.data(), kCount, DType::kI32, stream).code(),
            ErrorCode::kInvalidArgument);
  UP_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<uint16_t> got_bf = d_bf.ToHost<uint16_t>(kCount);
  const std::vector<float> got_f = d_f.ToHost<float>(kCount);
  int wrong = 0;
  for (int i = 0; i < kCount; ++i) {
    const float want = static_cast<float>(world * (world + 1) / 2 + world * (i % 7));
    wrong += got_f[i] != want || Bf16BitsToF32(got_bf[i]) != want;
  }
  EXPECT_EQ(wrong, 0) << comm.Describe();
}

TEST(StagedDeviceCommunicatorTest, ThreeThreadRanksSumOnOneGpu) {
  UP_CUDA_TEST_CONTEXT(shared);
  (void)shared;
  constexpr int kWorld = 3;
  auto hosts = dist::MakeThreadCommunicators(kWorld, dist::CommOptions{});
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      auto ctx = DeviceContext::Cuda(0);
      ASSERT_TRUE(ctx.ok()) << ctx.status().message();
      auto comm = dist::MakeStagedDeviceCommunicator(std::move(hosts[r]));
      EXPECT_TRUE(comm->device_collectives());
      CheckSums(*comm, **ctx, kWorld);
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(NcclCommunicatorTest, WorldOfOneOnTheGpu) {
  UP_CUDA_TEST_CONTEXT(ctx);
#ifndef UNIPREFILL_WITH_NCCL
  GTEST_SKIP() << "built without nccl.h";
#else
  auto comm = dist::MakeNcclCommunicator(dist::MakeLocalCommunicator(), 0);
  if (!comm.ok() && comm.status().code() == ErrorCode::kUnimplemented) {
    GTEST_SKIP() << comm.status().message();
  }
  ASSERT_TRUE(comm.ok()) << comm.status().message();
  std::printf("%s\n", (*comm)->Describe().c_str());
  EXPECT_EQ((*comm)->world_size(), 1);
  CheckSums(**comm, ctx, 1);
  // Host collectives pass through to the local world.
  float x = 2.5f;
  EXPECT_TRUE((*comm)->AllReduce(&x, 1, dist::ReduceOp::kSum).ok());
  EXPECT_EQ(x, 2.5f);
#endif
}

// Loads `path` on its own CUDA context (sharded when comm is set), prefills `prompt` with drops
// keeping half the blocks at every full-attention layer, then `steps` greedy decodes.
testing::RunResult RunRank(const std::string& path, dist::Communicator* comm,
                           const std::vector<int32_t>& prompt, int steps) {
  auto ctx = DeviceContext::Cuda(0);
  if (!ctx.ok()) {
    testing::RunResult r;
    r.error = ctx.status().message();
    return r;
  }
  LoadOptions lo;
  lo.communicator = comm;
  return testing::RunModelOn(**ctx, path, lo, prompt, steps);
}

// bf16 partial sums in another order: measured on the H200, Llama 8.4e-3 and Gemma 3 1.45e-2
// (bench/results/gpu/issue21_gpu_tp/); the bound leaves 1.7x.
constexpr double kTpLogitsBound = 2.5e-2;

void ExpectTwoRanksEqualOne(const std::string& family) {
  const std::string path = std::string(UP_SOURCE_DIR) + "/tests/goldens/hf_tiny/" + family;
  const std::vector<int32_t> prompt = testing::RandomPrompt(700, 500);
  constexpr int kSteps = 6;
  const testing::RunResult one = RunRank(path, nullptr, prompt, kSteps);
  ASSERT_TRUE(one.error.empty()) << one.error;
  auto hosts = dist::MakeThreadCommunicators(2, dist::CommOptions{});
  std::vector<std::unique_ptr<dist::Communicator>> comms;
  for (auto& h : hosts) comms.push_back(dist::MakeStagedDeviceCommunicator(std::move(h)));
  std::vector<testing::RunResult> ranks(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] { ranks[r] = RunRank(path, comms[r].get(), prompt, kSteps); });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(ranks[r].error.empty()) << ranks[r].error;
  EXPECT_EQ(ranks[0].prompt_logits, ranks[1].prompt_logits) << "the ranks disagree";
  EXPECT_EQ(ranks[0].greedy, ranks[1].greedy);
  ASSERT_EQ(ranks[0].kept.size(), one.kept.size());
  ASSERT_FALSE(one.kept.empty());
  for (size_t i = 0; i < one.kept.size(); ++i) {
    EXPECT_EQ(ranks[0].kept[i].kept, one.kept[i].kept) << "drop " << i;
    EXPECT_EQ(ranks[1].kept[i].kept, one.kept[i].kept) << "drop " << i;
  }
  EXPECT_LT(one.kept[0].kept, one.kept[0].alive) << "the first drop should drop rows";
  const double err = testing::RelativeL2Error(ranks[0].prompt_logits, one.prompt_logits);
  EXPECT_LT(err, kTpLogitsBound);
  EXPECT_EQ(ranks[0].greedy, one.greedy);
  std::printf("GPU TP 2 (staged, one GPU) vs TP 1, %s: prompt logits error %.2e, kept",
              family.c_str(), err);
  for (const KeptTokens& k : one.kept) std::printf(" %d/%d", k.kept, k.alive);
  std::printf(", greedy %s\n", ranks[0].greedy == one.greedy ? "equal" : "differ");
}

TEST(CudaTensorParallelTest, TinyLlamaTwoRanksOnOneGpuEqualOne) {
  UP_CUDA_TEST_CONTEXT(ctx);
  (void)ctx;
  ExpectTwoRanksEqualOne("llama");
}

TEST(CudaTensorParallelTest, TinyGemma3TwoRanksOnOneGpuEqualOne) {
  UP_CUDA_TEST_CONTEXT(ctx);
  (void)ctx;
  ExpectTwoRanksEqualOne("gemma3");
}

// A transport without device collectives is refused with a clear error, not run wrong.
TEST(CudaTensorParallelTest, HostOnlyTransportIsRefusedOnTheGpu) {
  UP_CUDA_TEST_CONTEXT(ctx);
  auto hosts = dist::MakeThreadCommunicators(2, dist::CommOptions{});
  LoadOptions lo;
  lo.communicator = hosts[0].get();
  auto loaded =
      LoadModel(std::string(UP_SOURCE_DIR) + "/tests/goldens/hf_tiny/llama", ctx, lo);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("device collectives"), std::string::npos)
      << loaded.status().message();
}

}  // namespace
}  // namespace uniprefill
