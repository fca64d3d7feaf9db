// Tensor parallelism on the GPU (issue 21): the device collectives of the staged transport (N
// ranks as threads on one GPU) and of NCCL at world size 1, and the sharded CUDA model: N ranks
// on one GPU, each with its shard of a tiny checkpoint (heads and FFN columns; Qwen3-Next's Gated
// DeltaNet by key-head groups and its MoE by whole experts with the router replicated; the
// embedding and head by vocabulary rows), against the unsharded model on the same GPU: each
// rank's device weights are ~1/N of TP 1's, the ranks agree bit for bit,
// the kept counts at every drop and the greedy tokens equal TP 1's, the logits are within a bound
// (bf16 partial sums of o_proj, FFN / MoE down and DeltaNet out_proj add in another order). And
// the sharded path at world size 1 through NCCL (the whole model as its one shard, every
// all-reduce run over one rank) equals the run without a communicator bit for bit.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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
#include "testing/cuda_model_fixtures.h"
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

// AllGatherDevice: rank r sends `bytes` bytes of value r + 1 (odd sizes); every rank receives all
// of them in rank order.
void CheckGather(dist::Communicator& comm, DeviceContext& ctx, int world) {
  for (int64_t bytes : {int64_t{0}, int64_t{1}, int64_t{77}, int64_t{4099}}) {
    const std::vector<uint8_t> mine(bytes, static_cast<uint8_t>(comm.rank() + 1));
    DeviceBuffer send = DeviceBuffer::FromHost(mine);
    DeviceBuffer recv(static_cast<size_t>(bytes * world) + 1);
    recv.Fill(0xFF);
    ASSERT_TRUE(comm.AllGatherDevice(send.data(), recv.data(), bytes, ctx.cuda().stream()).ok());
    ctx.cuda().Synchronize();
    const std::vector<uint8_t> got = recv.ToHost<uint8_t>(bytes * world + 1);
    int64_t wrong = 0;
    for (int64_t i = 0; i < bytes * world; ++i) wrong += got[i] != i / bytes + 1;
    EXPECT_EQ(wrong, 0) << comm.Describe() << ", " << bytes << " bytes";
    EXPECT_EQ(got[bytes * world], 0xFF) << "written past the end";
  }
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
      CheckGather(*comm, **ctx, kWorld);
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
  CheckGather(**comm, ctx, 1);
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

// bf16 partial sums in another order: measured on the H200, Llama 8.4e-3 (4 ranks 7.7e-3) and
// Gemma 3 1.45e-2 (bench/results/gpu/issue21_gpu_tp/); the bound leaves 1.7x.
constexpr double kTpLogitsBound = 2.5e-2;
// Qwen3-Next (all experts routed, so no router near-tie flips): 5.32e-2 measured (H200, session
// 7 call 1). Its DeltaNet makes some prompts ill-conditioned under bf16 rounding: the same GPU's
// logits differ from the CPU's by up to 1.34e-1 on these tiny checkpoints, which is why the
// backend's stated bound for the family is kQwenLogitsBound (cuda_model_fixtures.h); a TP run
// reorders bf16 sums just as another kernel does, so it is held to that bound.
constexpr double kTpQwenLogitsBound = cuda_model_test::kQwenLogitsBound;

// `world` ranks as threads on one GPU (the staged transport), each loading its shard of the
// model at `path` and running RunRank.
std::vector<testing::RunResult> RunStagedRanks(const std::string& path, int world,
                                               const std::vector<int32_t>& prompt, int steps) {
  auto hosts = dist::MakeThreadCommunicators(world, dist::CommOptions{});
  std::vector<std::unique_ptr<dist::Communicator>> comms;
  for (auto& h : hosts) comms.push_back(dist::MakeStagedDeviceCommunicator(std::move(h)));
  std::vector<testing::RunResult> ranks(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] { ranks[r] = RunRank(path, comms[r].get(), prompt, steps); });
  }
  for (std::thread& t : threads) t.join();
  return ranks;
}

// Device weight bytes per rank (Model::resident_weight_bytes: what CudaBackend uploaded, plus
// any host f32 copies) against TP 1's, printed. Everything shards by N (heads, FFN columns,
// experts, and the embedding and head by vocabulary rows when the vocabulary divides by N) except
// what stays whole (norms, routers, KV heads replicated when fewer than ranks): at most 5% of TP
// 1's more than 1/N. The 8B-shaped figure is DeviceBytesPerRankOfACheckpoint's.
void ExpectDeviceWeightsShard(const testing::RunResult& one,
                              const std::vector<testing::RunResult>& ranks) {
  const double world = static_cast<double>(ranks.size());
  double worst = 0;
  for (const testing::RunResult& r : ranks) worst = std::max(worst, double(r.resident_bytes));
  const double ratio = worst / static_cast<double>(one.resident_bytes);
  std::printf("GPU TP %zu device weight bytes per rank: %.1f of %.1f MiB (%.3fx)\n", ranks.size(),
              worst / 1048576.0, one.resident_bytes / 1048576.0, ratio);
  EXPECT_LT(ratio, 1.0 / world + 0.05) << "a rank's weights did not shard";
}

// `world` ranks as threads on one GPU (the staged transport), each loading its shard of the
// model at `path`, against the unsharded model on the same GPU.
void ExpectRanksEqualOne(const std::string& path, const std::string& label, int world,
                         double bound) {
  const std::vector<int32_t> prompt = testing::RandomPrompt(700, 500);
  constexpr int kSteps = 6;
  const testing::RunResult one = RunRank(path, nullptr, prompt, kSteps);
  ASSERT_TRUE(one.error.empty()) << one.error;
  const std::vector<testing::RunResult> ranks = RunStagedRanks(path, world, prompt, kSteps);
  for (int r = 0; r < world; ++r) ASSERT_TRUE(ranks[r].error.empty()) << ranks[r].error;
  ASSERT_FALSE(one.kept.empty());
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(ranks[r].prompt_logits, ranks[0].prompt_logits) << "rank " << r << " disagrees";
    EXPECT_EQ(ranks[r].greedy, ranks[0].greedy) << "rank " << r;
    ASSERT_EQ(ranks[r].kept.size(), one.kept.size());
    for (size_t i = 0; i < one.kept.size(); ++i) {
      EXPECT_EQ(ranks[r].kept[i].kept, one.kept[i].kept) << "rank " << r << " drop " << i;
      EXPECT_EQ(ranks[r].kept[i].alive, one.kept[i].alive) << "rank " << r << " drop " << i;
    }
  }
  EXPECT_LT(one.kept[0].kept, one.kept[0].alive) << "the first drop should drop rows";
  ExpectDeviceWeightsShard(one, ranks);
  const double err = testing::RelativeL2Error(ranks[0].prompt_logits, one.prompt_logits);
  EXPECT_LT(err, bound);
  // Greedy tokens equal TP 1's up to a near-tie of TP 1's logits (twice the bound's rms error,
  // the rule of the family tests): the bf16 sums in another order may part the runs there.
  size_t parted = 0;
  EXPECT_EQ(testing::GreedyWithinNearTies(one, ranks[0], 2 * bound, &parted), "");
  std::printf("GPU TP %d (staged, one GPU) vs TP 1, %s: prompt logits error %.2e, kept", world,
              label.c_str(), err);
  for (const KeptTokens& k : one.kept) std::printf(" %d/%d", k.kept, k.alive);
  if (parted == one.greedy.size()) {
    std::printf(", greedy equal\n");
  } else {
    std::printf(", greedy equal for %zu of %zu steps, then a near-tie\n", parted,
                one.greedy.size());
  }
}

std::string TinyPath(const std::string& family) {
  return std::string(UP_SOURCE_DIR) + "/tests/goldens/hf_tiny/" + family;
}

void ExpectTwoRanksEqualOne(const std::string& family) {
  ExpectRanksEqualOne(TinyPath(family), family, 2, kTpLogitsBound);
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

// Four ranks: one query head each, the two KV heads replicated over their GQA groups.
TEST(CudaTensorParallelTest, TinyLlamaFourRanksOnOneGpuEqualOne) {
  UP_CUDA_TEST_CONTEXT(ctx);
  (void)ctx;
  ExpectRanksEqualOne(TinyPath("llama"), "llama", 4, kTpLogitsBound);
}

// Qwen3-Next's shards on the GPU: Gated DeltaNet by key-head groups (one key head and its two
// value heads per rank: in_proj rows, conv channels, the rank's own recurrent state, out_proj
// columns) and the MoE by whole experts (two of four per rank, the router whole, the shared
// expert's columns), with gated attention by heads. Every expert routed (cuda_model_fixtures.h's
// QwenAllExpertsDir: the checkpoint's weights, top-k = E), so every row's MoE output is the sum
// of both ranks' experts and no router near-tie can flip a choice; the tiny checkpoint's two key
// heads allow at most two ranks (N = 4 of the DeltaNet and MoE cuts: shard_layers_test.cc on the
// CPU, moe_cuda_test.cc's shards on the GPU).
TEST(CudaTensorParallelTest, TinyQwen3NextTwoRanksOnOneGpuEqualOne) {
  UP_CUDA_TEST_CONTEXT(ctx);
  (void)ctx;
  ExpectRanksEqualOne(cuda_model_test::QwenAllExpertsDir(), "qwen3_next (all experts)", 2,
                      kTpQwenLogitsBound);
}

// The checkpoint's own top-2 of 4 routing across two ranks: each rank skips the choices of the
// other's experts. A router near-tie flipped by the bf16 partial sums changes a row by O(1), so
// only what does not depend on that is checked: the ranks agree bit for bit (logits, tokens, kept
// counts). Printed, not checked: the logits error, kept counts and tokens against TP 1.
TEST(CudaTensorParallelTest, TinyQwen3NextTopTwoRoutingTwoRanksAgree) {
  UP_CUDA_TEST_CONTEXT(ctx);
  (void)ctx;
  const std::string path = TinyPath("qwen3_next");
  const std::vector<int32_t> prompt = testing::RandomPrompt(700, 500);
  const testing::RunResult one = RunRank(path, nullptr, prompt, 4);
  ASSERT_TRUE(one.error.empty()) << one.error;
  const std::vector<testing::RunResult> ranks = RunStagedRanks(path, 2, prompt, 4);
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(ranks[r].error.empty()) << ranks[r].error;
  EXPECT_EQ(ranks[0].prompt_logits, ranks[1].prompt_logits) << "the ranks disagree";
  EXPECT_EQ(ranks[0].decode_logits, ranks[1].decode_logits);
  EXPECT_EQ(ranks[0].greedy, ranks[1].greedy);
  ASSERT_EQ(ranks[0].kept.size(), ranks[1].kept.size());
  ASSERT_EQ(ranks[0].kept.size(), one.kept.size());
  std::printf("GPU TP 2 vs TP 1, qwen3_next top-2 routing: prompt logits error %.2e, kept",
              testing::RelativeL2Error(ranks[0].prompt_logits, one.prompt_logits));
  for (size_t i = 0; i < one.kept.size(); ++i) {
    EXPECT_EQ(ranks[0].kept[i].kept, ranks[1].kept[i].kept) << "drop " << i;
    std::printf(" %d (TP 1 %d)", ranks[0].kept[i].kept, one.kept[i].kept);
  }
  std::printf(", greedy %s\n", ranks[0].greedy == one.greedy ? "equal" : "differ");
}

// Device weight bytes per rank of a real-sized checkpoint, for the record (issue 21's "device
// bytes with TP 2"): UP_TP_CHECKPOINT names a Hugging Face directory (e.g. the Llama-3.1-8B shapes
// from tools/make_synthetic_checkpoint.py with --layers 2 --vocab 32000); two ranks as threads on
// one GPU load their shards beside TP 1 and ExpectDeviceWeightsShard prints and checks them.
TEST(CudaTensorParallelTest, DISABLED_DeviceBytesPerRankOfACheckpoint) {
  UP_CUDA_TEST_CONTEXT(ctx);
  (void)ctx;
  const char* path = std::getenv("UP_TP_CHECKPOINT");
  if (path == nullptr) GTEST_SKIP() << "set UP_TP_CHECKPOINT to a checkpoint directory";
  const std::vector<int32_t> prompt = testing::RandomPrompt(256, 500);
  const testing::RunResult one = RunRank(path, nullptr, prompt, 1);
  ASSERT_TRUE(one.error.empty()) << one.error;
  const std::vector<testing::RunResult> ranks = RunStagedRanks(path, 2, prompt, 1);
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(ranks[r].error.empty()) << ranks[r].error;
  EXPECT_EQ(ranks[0].greedy, ranks[1].greedy);
  ExpectDeviceWeightsShard(one, ranks);
}

// The sharded path at world size 1 through NCCL (PlanShards and ShardDefinition of one rank,
// SetTensorParallel, every ReduceOut and drop-score all-reduce through ncclAllReduce of one
// rank) gives the run without a communicator bit for bit: logits, kept counts and tokens.
TEST(CudaTensorParallelTest, NcclWorldOfOneEqualsNoCommunicatorBitForBit) {
  UP_CUDA_TEST_CONTEXT(ctx);
  (void)ctx;
#ifndef UNIPREFILL_WITH_NCCL
  GTEST_SKIP() << "built without nccl.h";
#else
  const std::vector<int32_t> prompt = testing::RandomPrompt(700, 500);
  for (const std::string family : {"llama", "gemma3", "qwen3_next"}) {
    auto comm = dist::MakeNcclCommunicator(dist::MakeLocalCommunicator(), 0);
    if (!comm.ok() && comm.status().code() == ErrorCode::kUnimplemented) {
      GTEST_SKIP() << comm.status().message();
    }
    ASSERT_TRUE(comm.ok()) << comm.status().message();
    const testing::RunResult one = RunRank(TinyPath(family), nullptr, prompt, 6);
    const testing::RunResult nccl = RunRank(TinyPath(family), comm->get(), prompt, 6);
    ASSERT_TRUE(one.error.empty()) << one.error;
    ASSERT_TRUE(nccl.error.empty()) << nccl.error;
    EXPECT_EQ(nccl.prompt_logits, one.prompt_logits) << family;
    EXPECT_EQ(nccl.decode_logits, one.decode_logits) << family;
    EXPECT_EQ(nccl.greedy, one.greedy) << family;
    ASSERT_EQ(nccl.kept.size(), one.kept.size()) << family;
    for (size_t i = 0; i < one.kept.size(); ++i) {
      EXPECT_EQ(nccl.kept[i].kept, one.kept[i].kept) << family << " drop " << i;
    }
    std::printf("GPU TP 1 through NCCL vs no communicator, %s: %s\n", family.c_str(),
                nccl.prompt_logits == one.prompt_logits && nccl.greedy == one.greedy
                    ? "bit-identical"
                    : "DIFFERENT");
  }
#endif
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
