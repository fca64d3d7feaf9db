// GpuClockSampler on a real GPU: NVML finds the CUDA context's device by its PCI bus id and
// reads a plausible SM clock and board power while GEMMs keep the GPU busy. The driver that
// runs CUDA installs NVML, so a GPU machine without it fails here rather than skipping.
#include "core/gpu_clock_sampler.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "core/device_context.h"
#include "ops/cuda/cuda_dense_ops.h"
#include "testing/cuda_test_util.h"

namespace uniprefill {
namespace {

TEST(GpuClockSamplerCudaTest, ReadsTheClockAndPowerWhileGemmsRun) {
  UP_CUDA_TEST_CONTEXT(ctx);
  const std::string bus = ctx.cuda().PciBusId();
  ASSERT_FALSE(bus.empty());
  Result<std::unique_ptr<GpuClockSampler>> made = GpuClockSampler::Create(bus, {});
  ASSERT_TRUE(made.ok()) << made.status().message();
  GpuClockSampler& sampler = **made;

  // bf16 4096 x 4096 x 4096 GEMMs (137 GFLOP each) for about half a second.
  constexpr int64_t n = 4096;
  Result<DeviceBuffer> a = DeviceBuffer::Allocate(n * n * 2), b = DeviceBuffer::Allocate(n * n * 2),
                       c = DeviceBuffer::Allocate(n * n * 2);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  ASSERT_EQ(cudaMemsetAsync(a->data(), 0, a->size(), ctx.cuda().stream()), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(b->data(), 0, b->size(), ctx.cuda().stream()), cudaSuccess);
  const TensorView va = a->View(DType::kBF16, {n, n}), vb = b->View(DType::kBF16, {n, n}),
                   vc = c->View(DType::kBF16, {n, n});
  sampler.Start();
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(500)) {
    for (int i = 0; i < 20; ++i) ops::cuda::Gemm(ctx, vc, va, vb);
    ctx.Synchronize();
  }
  const ClockSummary s = sampler.Stop();
  std::printf("[ clock ] %d samples: SM %.0f MHz (%.0f-%.0f), %.0f W\n", s.samples, s.sm_mhz_mean,
              s.sm_mhz_min, s.sm_mhz_max, s.power_w_mean);
  EXPECT_GE(s.samples, 5);  // 500 ms at 50 ms a sample
  EXPECT_GE(s.sm_mhz_min, 100);
  EXPECT_LE(s.sm_mhz_max, 4000);
  EXPECT_GT(s.power_w_mean, 20);  // GEMMs keep a datacentre GPU well above idle
  EXPECT_LT(s.power_w_mean, 2000);
  EXPECT_EQ(sampler.Stop().samples, 0) << "a second Stop has no window";
}

TEST(GpuClockSamplerCudaTest, AnUnknownBusIdIsNotFound) {
  UP_CUDA_TEST_CONTEXT(ctx);
  (void)ctx;
  Result<std::unique_ptr<GpuClockSampler>> made = GpuClockSampler::Create("00ff:ff:1f.7", {});
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), ErrorCode::kNotFound) << made.status().message();
  EXPECT_NE(made.status().message().find("00ff:ff:1f.7"), std::string::npos);
}

}  // namespace
}  // namespace uniprefill
