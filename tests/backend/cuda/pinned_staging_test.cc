// PinnedStaging (backend/cuda/pinned_staging.h): a forward that returns without a host sync
// leaves its uploads queued; the forward after next reuses the same half, and its Reserve must
// wait for them. The stream is held back by a sleeping host function, so without that wait the
// third forward's host writes would land before the first forward's copy ran, and the first
// forward's device data would read the third's values.
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

}  // namespace
}  // namespace uniprefill::cuda_backend
