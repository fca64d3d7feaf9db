// The NCCL transport's bounded wait (dist::Communicator::WaitForDevice, issue 21): a device
// collective whose peer died never completes, and every stream sync behind it would hang. One GPU
// cannot host two NCCL ranks, so a host function that blocks the stream until the test releases
// it stands for the stuck collective: the wait returns Unavailable after the timeout (not before,
// not much later), saying what happened; the communicator is then aborted and refuses every
// device call with the same message; finished work is waited for without error. And the CUDA
// model under tensor parallelism waits that way: a decode step behind a stuck stream returns
// Unavailable within the timeout.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "dist/communicator.h"
#include "dist/cuda/nccl_communicator.h"
#include "model/model.h"
#include "testing/cuda_model_fixtures.h"
#include "testing/cuda_test_util.h"
#include "testing/tp_run.h"

namespace uniprefill {
namespace {

// Blocks its stream until *flag is set (a host function may not call CUDA; it only spins).
void CUDART_CB BlockUntilReleased(void* flag) {
  auto* released = static_cast<std::atomic<bool>*>(flag);
  while (!released->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

#ifdef UNIPREFILL_WITH_NCCL
// NCCL at world size 1 with a 0.5 s timeout (Unimplemented where libnccl.so.2 is missing).
Result<std::unique_ptr<dist::Communicator>> NcclWithHalfASecondTimeout() {
  dist::CommOptions options;
  options.timeout_s = 0.5;
  return dist::MakeNcclCommunicator(dist::MakeLocalCommunicator(), 0, options);
}
#endif

TEST(NcclBoundedWaitTest, AStuckStreamEndsInUnavailableAfterTheTimeout) {
  UP_CUDA_TEST_CONTEXT(ctx);
#ifndef UNIPREFILL_WITH_NCCL
  GTEST_SKIP() << "built without nccl.h";
#else
  auto comm = NcclWithHalfASecondTimeout();
  if (!comm.ok() && comm.status().code() == ErrorCode::kUnimplemented) {
    GTEST_SKIP() << comm.status().message();
  }
  ASSERT_TRUE(comm.ok()) << comm.status().message();
  cudaStream_t stream = ctx.cuda().stream();
  cudaEvent_t event = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), cudaSuccess);

  // Work that finishes: waited for without error (an all-reduce of one rank included).
  DeviceBuffer data(4 * 1024);
  data.Fill(0);
  ASSERT_TRUE((*comm)->AllReduceDevice(data.data(), 1024, DType::kF32, stream).ok());
  ASSERT_EQ(cudaEventRecord(event, stream), cudaSuccess);
  EXPECT_TRUE((*comm)->WaitForDevice(event).ok());

  // Work that does not finish until released, 1.5 s after the wait began: ncclCommAbort may
  // wait for the stream, which a stuck NCCL kernel would leave when aborted but this host
  // function only when released. (H200, session 7 call 2: released only after the wait
  // returned, the test hung.)
  std::atomic<bool> released{false};
  ASSERT_EQ(cudaLaunchHostFunc(stream, BlockUntilReleased, &released), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event, stream), cudaSuccess);
  const auto start = std::chrono::steady_clock::now();
  std::thread releaser([&] {
    std::this_thread::sleep_until(start + std::chrono::milliseconds(1500));
    released = true;
  });
  const Status st = (*comm)->WaitForDevice(event);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  releaser.join();
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  std::printf("stuck stream: %s after %.3f s\n", st.message().c_str(), waited);
  EXPECT_EQ(st.code(), ErrorCode::kUnavailable);
  EXPECT_NE(st.message().find("did not finish within 0.5 s"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("rank 0 of 1"), std::string::npos) << st.message();
  EXPECT_GE(waited, 0.5);
  EXPECT_LT(waited, 5.0);

  // Aborted: every later device call fails at once with the same message.
  const Status again = (*comm)->AllReduceDevice(data.data(), 1024, DType::kF32, stream);
  EXPECT_EQ(again.code(), ErrorCode::kUnavailable);
  EXPECT_EQ(again.message(), st.message());
  ASSERT_EQ(cudaEventRecord(event, stream), cudaSuccess);
  EXPECT_EQ((*comm)->WaitForDevice(event).code(), ErrorCode::kUnavailable);
  cudaEventDestroy(event);
#endif
}

TEST(NcclBoundedWaitTest, ATensorParallelStepBehindAStuckStreamFailsWithinTheTimeout) {
  UP_CUDA_TEST_CONTEXT(shared);
  (void)shared;
#ifndef UNIPREFILL_WITH_NCCL
  GTEST_SKIP() << "built without nccl.h";
#else
  auto comm = NcclWithHalfASecondTimeout();
  if (!comm.ok() && comm.status().code() == ErrorCode::kUnimplemented) {
    GTEST_SKIP() << comm.status().message();
  }
  ASSERT_TRUE(comm.ok()) << comm.status().message();
  auto ctx = DeviceContext::Cuda(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().message();
  LoadOptions lo;
  lo.communicator = comm->get();
  auto model = LoadModel(cuda_model_test::TinyDir("llama"), **ctx, lo);
  ASSERT_TRUE(model.ok()) << model.status().message();
  const std::vector<int32_t> prompt = testing::RandomPrompt(100, 500);
  auto cache = (*model)->NewCache(200, {});
  std::vector<float> logits((*model)->config().vocab_size);
  SequenceStep step{cache.get(), prompt, logits.data(), nullptr};
  const UniPrefillConfig dense;
  ASSERT_TRUE((*model)->ForwardBatch(**ctx, std::span<const SequenceStep>(&step, 1), dense).ok());

  std::atomic<bool> released{false};
  ASSERT_EQ(cudaLaunchHostFunc((*ctx)->cuda().stream(), BlockUntilReleased, &released),
            cudaSuccess);
  const int32_t next[1] = {testing::Argmax(logits)};
  SequenceStep decode{cache.get(), next, logits.data(), nullptr};
  const auto start = std::chrono::steady_clock::now();
  std::thread releaser([&] {  // as above: the abort may wait for the stream
    std::this_thread::sleep_until(start + std::chrono::milliseconds(1500));
    released = true;
  });
  const Status st = (*model)->ForwardBatch(**ctx, std::span<const SequenceStep>(&decode, 1), dense);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  releaser.join();
  (*ctx)->cuda().Synchronize();
  std::printf("decode behind a stuck stream: %s after %.3f s\n", st.message().c_str(), waited);
  EXPECT_EQ(st.code(), ErrorCode::kUnavailable) << st.message();
  EXPECT_NE(st.message().find("did not finish within 0.5 s"), std::string::npos) << st.message();
  EXPECT_LT(waited, 5.0);
#endif
}

}  // namespace
}  // namespace uniprefill
