// KernelTimeline (backend/cuda/kernel_timeline.h): CUPTI's records of a kernel, a copy and
// memsets come back grouped by the group open when they were launched, with GPU times in stream
// order; a group taken once is gone; work outside any group is in none; one timeline a process.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backend/cuda/cuda_glue_kernels.h"
#include "backend/cuda/kernel_timeline.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "testing/cuda_test_util.h"

namespace uniprefill::cuda_backend {
namespace {

bool ByStart(const GpuActivity& a, const GpuActivity& b) { return a.start_ns < b.start_ns; }

TEST(KernelTimelineTest, GroupsHoldWhatTheyLaunchedWithGpuTimesInStreamOrder) {
  UP_CUDA_TEST_CONTEXT(ctx);
  Result<std::unique_ptr<KernelTimeline>> timeline = KernelTimeline::Open();
  if (!timeline.ok() && timeline.status().code() == ErrorCode::kUnimplemented) {
    GTEST_SKIP() << timeline.status().message();  // built without CUPTI's headers
  }
  ASSERT_TRUE(timeline.ok()) << timeline.status().message();
  KernelTimeline& t = **timeline;
  {
    Result<std::unique_ptr<KernelTimeline>> second = KernelTimeline::Open();
    ASSERT_FALSE(second.ok());
    EXPECT_NE(second.status().message().find("already open"), std::string::npos);
  }
  cudaStream_t stream = ctx.cuda().stream();
  constexpr int64_t T = 1024, H = 8, D = 128;
  const size_t bytes = T * H * D * 2;
  DeviceBuffer x(bytes), gate(bytes), copy(bytes);

  UP_CUDA_CHECK(cudaMemsetAsync(copy.data(), 0, bytes, stream));  // in no group
  ASSERT_TRUE(t.BeginGroup(7).ok());
  UP_CUDA_CHECK(cudaMemsetAsync(x.data(), 0, bytes, stream));
  UP_CUDA_CHECK(cudaMemsetAsync(gate.data(), 0, bytes, stream));
  SigmoidGateMul(ctx, TensorView::Contiguous(x.data(), DType::kBF16, {T, H, D}, Device::kCuda),
                 TensorView::Contiguous(gate.data(), DType::kBF16, {T, H, D}, Device::kCuda));
  UP_CUDA_CHECK(cudaMemcpyAsync(copy.data(), x.data(), bytes, cudaMemcpyDeviceToDevice, stream));
  ASSERT_TRUE(t.EndGroup().ok());
  ASSERT_TRUE(t.BeginGroup(8).ok());
  UP_CUDA_CHECK(cudaMemsetAsync(x.data(), 1, bytes, stream));
  ASSERT_TRUE(t.EndGroup().ok());
  UP_CUDA_CHECK(cudaStreamSynchronize(stream));

  Result<std::vector<GpuActivity>> seven = t.Take(7);
  ASSERT_TRUE(seven.ok()) << seven.status().message();
  std::vector<GpuActivity> a = *seven;
  std::sort(a.begin(), a.end(), ByStart);
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a[0].name, "[memset]");
  EXPECT_EQ(a[1].name, "[memset]");
  EXPECT_NE(a[2].name.find("Gate"), std::string::npos) << a[2].name;  // the kernel, by name
  EXPECT_EQ(a[3].name, "[memcpy]");
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_GT(a[i].end_ns, a[i].start_ns) << a[i].name;
    if (i > 0) {
      EXPECT_GE(a[i].start_ns, a[i - 1].end_ns) << "one stream runs in order";
    }
  }
  const GpuActivitySummary s = SummarizeGpuActivities(a, 2);
  EXPECT_GT(s.busy_ms, 0);
  EXPECT_NEAR(s.span_ms, s.busy_ms + s.gap_ms, 1e-9);
  // The kernel's name as the trace writes it: demangled, without its parameters.
  EXPECT_EQ(ReadableKernelName(a[2].name).find('('), std::string::npos)
      << ReadableKernelName(a[2].name);

  Result<std::vector<GpuActivity>> eight = t.Take(8);
  ASSERT_TRUE(eight.ok());
  ASSERT_EQ(eight->size(), 1u);
  EXPECT_EQ((*eight)[0].name, "[memset]");
  Result<std::vector<GpuActivity>> again = t.Take(7);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->empty()) << "a group is taken once";
}

}  // namespace
}  // namespace uniprefill::cuda_backend
