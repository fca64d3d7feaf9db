// StepTrace (backend/cuda/step_trace.h) with phases: a forward's line splits its GPU time by
// the phases marked in it (first-run order, repeated phases summed, "begin" before the first
// mark), the split adds up to the forward's GPU time, marks outside a forward are ignored, and
// phases without a trace are a clear error.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "backend/cuda/step_trace.h"
#include "core/cuda/device_buffer.h"
#include "testing/cuda_test_util.h"

namespace uniprefill::cuda_backend {
namespace {

// Sets the two variables for the test's scope and unsets them after.
class TraceEnvironment {
 public:
  TraceEnvironment(const std::string& path, const char* phases) {
    if (path.empty()) {
      unsetenv("UNIPREFILL_CUDA_STEP_TRACE");
    } else {
      setenv("UNIPREFILL_CUDA_STEP_TRACE", path.c_str(), 1);
    }
    if (phases) setenv("UNIPREFILL_CUDA_STEP_TRACE_PHASES", phases, 1);
  }
  ~TraceEnvironment() {
    unsetenv("UNIPREFILL_CUDA_STEP_TRACE");
    unsetenv("UNIPREFILL_CUDA_STEP_TRACE_PHASES");
  }
};

std::vector<nlohmann::json> Lines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

TEST(StepTraceTest, PhasesSplitAForwardsGpuTimeInTheOrderTheyRan) {
  UP_CUDA_TEST_CONTEXT(ctx);
  (void)ctx;
  const std::string path =
      (std::filesystem::temp_directory_path() / "uniprefill_step_trace_test.jsonl").string();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  Result<DeviceBuffer> buffer = DeviceBuffer::Allocate(size_t{256} << 20);
  ASSERT_TRUE(buffer.ok());
  const auto work = [&](int times) {  // GPU time between marks: 256 MiB memsets
    for (int i = 0; i < times; ++i) {
      ASSERT_EQ(cudaMemsetAsync(buffer->data(), i, buffer->size(), stream), cudaSuccess);
    }
  };
  {
    TraceEnvironment env(path, "1");
    Result<std::unique_ptr<StepTrace>> trace = StepTrace::FromEnvironment();
    ASSERT_TRUE(trace.ok()) << trace.status().message();
    ASSERT_TRUE(*trace && (*trace)->phases());
    StepTrace& t = **trace;
    ASSERT_TRUE(t.Mark(stream, "outside").ok());  // before any forward: ignored

    // Forward 1: begin (1 memset), norm (1), attention (4), norm (1), ffn (2); a mark after
    // Launched is ignored.
    ASSERT_TRUE(t.Begin(stream, 100, 1).ok());
    work(1);
    for (const auto& [name, n] : std::vector<std::pair<const char*, int>>{
             {"norm", 1}, {"attention", 4}, {"norm", 1}, {"ffn", 2}}) {
      ASSERT_TRUE(t.Mark(stream, name).ok());
      work(n);
    }
    ASSERT_TRUE(t.Launched(stream, /*will_sync=*/false).ok());
    ASSERT_TRUE(t.Mark(stream, "late").ok());
    // Forward 2: no marks, no phases in its line.
    ASSERT_TRUE(t.Begin(stream, 1, 1).ok());
    work(1);
    ASSERT_TRUE(t.Launched(stream, /*will_sync=*/true).ok());
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ASSERT_TRUE(t.Synced().ok());
  }
  const std::vector<nlohmann::json> lines = Lines(path);
  ASSERT_EQ(lines.size(), 2u);
  ASSERT_TRUE(lines[0].contains("phases"));
  const nlohmann::json& p = lines[0]["phases"];
  std::vector<std::string> order;
  double sum = 0;
  for (const auto& [name, ms] : p.items()) {
    order.push_back(name);
    sum += ms.get<double>();
  }
  // nlohmann::json sorts keys: check the written order from the raw line instead.
  std::ifstream in(path);
  std::string first;
  std::getline(in, first);
  const size_t b = first.find("\"begin\""), n = first.find("\"norm\""),
               a = first.find("\"attention\""), f = first.find("\"ffn\"");
  ASSERT_NE(b, std::string::npos);
  ASSERT_NE(f, std::string::npos);
  EXPECT_LT(b, n);
  EXPECT_LT(n, a);
  EXPECT_LT(a, f);
  EXPECT_EQ(order.size(), 4u) << first;  // begin, norm (twice, summed), attention, ffn
  EXPECT_FALSE(p.contains("outside"));
  EXPECT_FALSE(p.contains("late"));
  const double gpu = lines[0]["gpu_ms"].get<double>();
  EXPECT_GT(gpu, 0.0);
  EXPECT_NEAR(sum, gpu, 0.02 * gpu + 0.01);
  // Proportions of the memsets: attention ran 4 of 9, norm 2, ffn 2, begin 1.
  const double per = gpu / 9;
  EXPECT_NEAR(p["attention"].get<double>(), 4 * per, 1.5 * per);
  EXPECT_NEAR(p["norm"].get<double>(), 2 * per, 1.0 * per);
  EXPECT_NEAR(p["ffn"].get<double>(), 2 * per, 1.0 * per);
  EXPECT_GT(p["attention"].get<double>(), p["ffn"].get<double>());
  EXPECT_FALSE(lines[1].contains("phases"));
  std::filesystem::remove(path);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST(StepTraceTest, PhasesWithoutATraceAreAnErrorThatSaysWhatToSet) {
  TraceEnvironment env("", "1");
  Result<std::unique_ptr<StepTrace>> trace = StepTrace::FromEnvironment();
  ASSERT_FALSE(trace.ok());
  EXPECT_NE(trace.status().message().find("UNIPREFILL_CUDA_STEP_TRACE=path"), std::string::npos)
      << trace.status().message();
}

TEST(StepTraceTest, ATraceWithoutPhasesMarksNothing) {
  UP_CUDA_TEST_CONTEXT(ctx);
  (void)ctx;
  const std::string path =
      (std::filesystem::temp_directory_path() / "uniprefill_step_trace_plain.jsonl").string();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  {
    TraceEnvironment env(path, nullptr);
    Result<std::unique_ptr<StepTrace>> trace = StepTrace::FromEnvironment();
    ASSERT_TRUE(trace.ok() && *trace);
    EXPECT_FALSE((*trace)->phases());
    ASSERT_TRUE((*trace)->Begin(stream, 1, 1).ok());
    ASSERT_TRUE((*trace)->Mark(stream, "norm").ok());
    ASSERT_TRUE((*trace)->Launched(stream, true).ok());
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ASSERT_TRUE((*trace)->Synced().ok());
  }
  const std::vector<nlohmann::json> lines = Lines(path);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_FALSE(lines[0].contains("phases"));
  std::filesystem::remove(path);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

}  // namespace
}  // namespace uniprefill::cuda_backend
