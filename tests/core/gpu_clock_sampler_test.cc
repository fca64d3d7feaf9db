// GpuClockSampler: its pure part (SummarizeClockSamples), its errors where NVML is missing or
// misused, and its sampling thread against a stand-in NVML (tests/testing/fake_nvml.cc, built as
// a shared library: clock 1400 / 1500 / 1600 MHz in turn, 650 W). Sampling a real GPU is
// tests/core/cuda/gpu_clock_sampler_cuda_test.cc.
#include "core/gpu_clock_sampler.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace uniprefill {
namespace {

TEST(GpuClockSamplerTest, NoSamplesSummariseToZero) {
  const ClockSummary s = SummarizeClockSamples({});
  EXPECT_EQ(s.samples, 0);
  EXPECT_EQ(s.sm_mhz_mean, 0);
  EXPECT_EQ(s.sm_mhz_min, 0);
  EXPECT_EQ(s.sm_mhz_max, 0);
  EXPECT_EQ(s.power_w_mean, 0);
}

TEST(GpuClockSamplerTest, SummaryIsTheSamplesMeansAndClockRange) {
  const ClockSummary s =
      SummarizeClockSamples({{1980, 310.5}, {1500, 700.0}, {1620, 689.5}, {1500, 700.0}});
  EXPECT_EQ(s.samples, 4);
  EXPECT_DOUBLE_EQ(s.sm_mhz_mean, (1980 + 1500 + 1620 + 1500) / 4.0);
  EXPECT_DOUBLE_EQ(s.sm_mhz_min, 1500);
  EXPECT_DOUBLE_EQ(s.sm_mhz_max, 1980);
  EXPECT_DOUBLE_EQ(s.power_w_mean, (310.5 + 700.0 + 689.5 + 700.0) / 4.0);
}

TEST(GpuClockSamplerTest, AMissingLibraryIsUnavailableAndNamesIt) {
  GpuClockSamplerOptions o;
  o.library = "libnvidia-ml-that-does-not-exist.so.1";
  const Result<std::unique_ptr<GpuClockSampler>> s = GpuClockSampler::Create("0000:00:00.0", o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), ErrorCode::kUnavailable);
  EXPECT_NE(s.status().message().find("libnvidia-ml-that-does-not-exist.so.1"),
            std::string::npos)
      << s.status().message();
  EXPECT_NE(s.status().message().find("NVIDIA driver"), std::string::npos)
      << s.status().message();
}

TEST(GpuClockSamplerTest, ALibraryWithoutNvmlSaysWhatItLacks) {
  GpuClockSamplerOptions o;
  o.library = "libm.so.6";  // loads, has no NVML entry points
  const Result<std::unique_ptr<GpuClockSampler>> s = GpuClockSampler::Create("0000:00:00.0", o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), ErrorCode::kUnavailable);
  EXPECT_NE(s.status().message().find("nvmlInit_v2"), std::string::npos) << s.status().message();
}

TEST(GpuClockSamplerTest, APeriodUnderOneMillisecondIsRefused) {
  GpuClockSamplerOptions o;
  o.period_ms = 0;
  const Result<std::unique_ptr<GpuClockSampler>> s = GpuClockSampler::Create("0000:00:00.0", o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("period_ms"), std::string::npos);
}

GpuClockSamplerOptions FakeNvml(int period_ms) {
  GpuClockSamplerOptions o;
  o.library = UP_FAKE_NVML;
  o.period_ms = period_ms;
  return o;
}

TEST(GpuClockSamplerTest, AWindowSummarisesWhatTheThreadRead) {
  Result<std::unique_ptr<GpuClockSampler>> made =
      GpuClockSampler::Create("0000:01:00.0", FakeNvml(5));
  ASSERT_TRUE(made.ok()) << made.status().message();
  GpuClockSampler& sampler = **made;
  EXPECT_EQ(sampler.Stop().samples, 0) << "no window yet";
  sampler.Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const ClockSummary s = sampler.Stop();
  // ~40 reads at 5 ms; at least a few however slow the machine.
  EXPECT_GE(s.samples, 3);
  EXPECT_LE(s.samples, 41);
  EXPECT_GE(s.sm_mhz_min, 1400);
  EXPECT_LE(s.sm_mhz_max, 1600);
  EXPECT_GE(s.sm_mhz_mean, 1400);
  EXPECT_LE(s.sm_mhz_mean, 1600);
  EXPECT_DOUBLE_EQ(s.power_w_mean, 650);
  EXPECT_EQ(sampler.Stop().samples, 0) << "the window ended with the first Stop";
}

TEST(GpuClockSamplerTest, EachWindowStartsEmptyAndNothingIsReadBetweenWindows) {
  Result<std::unique_ptr<GpuClockSampler>> made =
      GpuClockSampler::Create("0000:01:00.0", FakeNvml(5));
  ASSERT_TRUE(made.ok()) << made.status().message();
  GpuClockSampler& sampler = **made;
  sampler.Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  const ClockSummary first = sampler.Stop();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // outside any window
  sampler.Start();
  const ClockSummary second = sampler.Stop();  // at once: the first read, if it came in time
  EXPECT_GE(first.samples, 1);
  EXPECT_LE(second.samples, 2) << "samples from between the windows were kept";
}

// Pause keeps the window's samples and reads nothing until Resume, which reads into the same
// window: 60 ms sampled, 300 ms paused, 60 ms sampled at 5 ms gives ~26 samples, not ~84.
TEST(GpuClockSamplerTest, APausedWindowKeepsItsSamplesAndReadsNothingUntilResumed) {
  Result<std::unique_ptr<GpuClockSampler>> made =
      GpuClockSampler::Create("0000:01:00.0", FakeNvml(5));
  ASSERT_TRUE(made.ok()) << made.status().message();
  GpuClockSampler& sampler = **made;
  sampler.Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  sampler.Pause();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  sampler.Resume();
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  const ClockSummary s = sampler.Stop();
  EXPECT_GE(s.samples, 2) << "each sampled part reads at once";
  EXPECT_LE(s.samples, 40) << "the paused 300 ms were sampled";
  EXPECT_DOUBLE_EQ(s.power_w_mean, 650);
  // bench step's use: a window that starts paused (after a Stop) holds only resumed reads.
  sampler.Stop();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(sampler.Stop().samples, 0) << "read while nothing was sampling";
  sampler.Resume();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  sampler.Pause();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const ClockSummary resumed = sampler.Stop();
  EXPECT_GE(resumed.samples, 1);
  EXPECT_LE(resumed.samples, 20) << "the paused 100 ms were sampled";
}

TEST(GpuClockSamplerTest, ReadAnswersAtOnce) {
  Result<std::unique_ptr<GpuClockSampler>> made =
      GpuClockSampler::Create("0000:01:00.0", FakeNvml(50));
  ASSERT_TRUE(made.ok()) << made.status().message();
  const Result<ClockSample> c = (*made)->Read();
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_GE(c->sm_mhz, 1400u);
  EXPECT_LE(c->sm_mhz, 1600u);
  EXPECT_DOUBLE_EQ(c->power_w, 650);
}

TEST(GpuClockSamplerTest, AGpuNvmlDoesNotKnowIsNotFoundAndNamed) {
  const Result<std::unique_ptr<GpuClockSampler>> s =
      GpuClockSampler::Create("0000:02:00.0", FakeNvml(50));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(s.status().message().find("0000:02:00.0"), std::string::npos)
      << s.status().message();
  EXPECT_NE(s.status().message().find("Not Found"), std::string::npos) << s.status().message();
}

}  // namespace
}  // namespace uniprefill
