// PinnedStaging (backend/cuda/pinned_staging.h): a forward that returns without a host sync
// leaves its uploads queued; the forward after next reuses the same half, and its Reserve must
// wait for them. The stream is held back by a sleeping host function, so without that wait the
// third forward's host writes would land before the first forward's copy ran, and the first
// forward's device data would read the third's values. PutAll puts several arrays in one upload,
// each where its pointer says, as separate Puts do.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "backend/cuda/pinned_staging.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device_buffer.h"
#include "testing/cuda_test_util.h"

namespace uniprefill::cuda_backend {
namespace {

void CUDART_CB Sleep100Ms(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(100)); }

TEST(PinnedStagingTest, AForwardTwoBackKeepsItsUploadsUntilTheyRan) {
  UP_CUDA_TEST_CONTEXT(ctx);
  (void)ctx;  // the shared context made the device current
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const std::vector<int32_t> first = {1, 2, 3, 4, 5}, second = {6, 7}, third = {9, 9, 9, 9, 9};
  Result<DeviceBuffer> seen = DeviceBuffer::Allocate(first.size() * 4);  // the first's data
  ASSERT_TRUE(seen.ok());
  PinnedStaging staging;

  // Forward 1: its upload waits behind the host function; a copy of it is what it read.
  ASSERT_TRUE(staging.Reserve(64).ok());
  ASSERT_EQ(cudaLaunchHostFunc(stream, Sleep100Ms, nullptr), cudaSuccess);
  Result<const int32_t*> d_first = staging.Put(first, stream);
  ASSERT_TRUE(d_first.ok());
  ASSERT_EQ(cudaMemcpyAsync(seen->data(), *d_first, first.size() * 4, cudaMemcpyDeviceToDevice,
                            stream),
            cudaSuccess);
  ASSERT_TRUE(staging.MarkInFlight(stream).ok());
  // Forward 2 (the other half), then forward 3 (the first half again), both without syncs.
  ASSERT_TRUE(staging.Reserve(64).ok());
  ASSERT_TRUE(staging.Put(second, stream).ok());
  ASSERT_TRUE(staging.MarkInFlight(stream).ok());
  ASSERT_TRUE(staging.Reserve(64).ok());
  Result<const int32_t*> d_third = staging.Put(third, stream);
  ASSERT_TRUE(d_third.ok());
  EXPECT_EQ(*d_third, *d_first);  // the same half and offset: the case that needs the wait
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);

  std::vector<int32_t> got(first.size());
  ASSERT_EQ(cudaMemcpy(got.data(), seen->data(), got.size() * 4, cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(got, first);
  cudaStreamDestroy(stream);
}

std::vector<int32_t> Back(const int32_t* d, size_t n) {
  std::vector<int32_t> v(n);
  if (n > 0) {
    EXPECT_EQ(cudaMemcpy(v.data(), d, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  }
  return v;
}

TEST(PinnedStagingTest, PutAllPutsEachArrayWhereItsPointerSays) {
  UP_CUDA_TEST_CONTEXT(ctx);
  (void)ctx;
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const std::vector<int32_t> a = {1, 2, 3}, empty, c = {4, 5, 6, 7, 8}, d = {9};
  for (bool separate : {false, true}) {
    PinnedStaging staging;
    staging.set_separate_uploads(separate);
    ASSERT_TRUE(staging.Reserve(64).ok());
    Result<const int32_t*> before = staging.Put(std::vector<int32_t>{42}, stream);
    ASSERT_TRUE(before.ok());
    Result<std::vector<const int32_t*>> put = staging.PutAll({&a, &empty, &c, &d}, stream);
    ASSERT_TRUE(put.ok());
    ASSERT_EQ(put->size(), 4u);
    Result<const int32_t*> after = staging.Put(std::vector<int32_t>{43, 44}, stream);
    ASSERT_TRUE(after.ok());
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(Back(*before, 1), std::vector<int32_t>{42}) << separate;
    EXPECT_EQ(Back((*put)[0], a.size()), a) << separate;
    EXPECT_EQ(Back((*put)[2], c.size()), c) << separate;
    EXPECT_EQ(Back((*put)[3], d.size()), d) << separate;
    EXPECT_EQ(Back(*after, 2), (std::vector<int32_t>{43, 44})) << separate;
    // 16-byte aligned, in order, none overlapping the next.
    const int32_t* prev_end = *before + 1;
    for (size_t i = 0; i < put->size(); ++i) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>((*put)[i]) % 16, 0u) << i;
      EXPECT_GE((*put)[i], prev_end) << i;
      const size_t n = std::vector<size_t>{a.size(), 0, c.size(), d.size()}[i];
      prev_end = (*put)[i] + n;
    }
    EXPECT_GE(*after, prev_end);
    // More than the half holds: an error, not an overrun.
    const std::vector<int32_t> big(100, 1);
    EXPECT_FALSE(staging.PutAll({&big}, stream).ok());
  }
  cudaStreamDestroy(stream);
}

// A half that must grow at least doubles (each growth frees and pins memory and syncs, so a
// request count climbing one by one grows it a few times, not at every new count); Presize sizes
// both halves exactly and never shrinks them; what a grown half holds still arrives.
TEST(PinnedStagingTest, HalvesGrowGeometricallyAndPresizeExactly) {
  UP_CUDA_TEST_CONTEXT(ctx);
  (void)ctx;
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  PinnedStaging staging;
  ASSERT_TRUE(staging.Reserve(100).ok());  // half A
  EXPECT_EQ(staging.capacity(), 100u);
  ASSERT_TRUE(staging.Reserve(100).ok());  // half B
  EXPECT_EQ(staging.capacity(), 100u);
  ASSERT_TRUE(staging.Reserve(150).ok());  // A: doubled
  EXPECT_EQ(staging.capacity(), 200u);
  ASSERT_TRUE(staging.Reserve(500).ok());  // B: more than double asked
  EXPECT_EQ(staging.capacity(), 500u);
  const std::vector<int32_t> v(480, 7);
  Result<const int32_t*> d = staging.Put(v, stream);
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(Back(*d, v.size()), v);
  ASSERT_TRUE(staging.Presize(1000).ok());
  for (int half = 0; half < 2; ++half) {
    ASSERT_TRUE(staging.Reserve(10).ok());
    EXPECT_EQ(staging.capacity(), 1000u) << half;
  }
  ASSERT_TRUE(staging.Presize(10).ok());  // never shrinks
  ASSERT_TRUE(staging.Reserve(10).ok());
  EXPECT_EQ(staging.capacity(), 1000u);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace uniprefill::cuda_backend
