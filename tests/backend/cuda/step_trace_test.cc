// StepTrace (backend/cuda/step_trace.h) with phases: a forward's line splits its GPU time by
// the phases marked in it (first-run order, repeated phases summed, "begin" before the first
// mark), the split adds up to the forward's GPU time, marks outside a forward are ignored, and
// phases without a trace are a clear error. With the kernel view: each forward's own work
// counted from CUPTI. The trace writes on a thread of its own, out of the engine's time.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "backend/cuda/step_trace.h"
#include "core/cuda/cuda_context.h"
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
    unsetenv("UNIPREFILL_CUDA_STEP_TRACE_KERNELS");
  }
};

// A trace file in the temporary folder, removed at scope end.
struct TracePath : std::string {
  explicit TracePath(const char* name)
      : std::string((std::filesystem::temp_directory_path() / name).string()) {}
  ~TracePath() {
    std::error_code ignored;  // a test that failed before writing it leaves none
    std::filesystem::remove(std::filesystem::path(static_cast<const std::string&>(*this)), ignored);
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
  cudaStream_t stream = ctx.cuda().stream();
  const TracePath path("uniprefill_step_trace_test.jsonl");
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
  cudaStream_t stream = ctx.cuda().stream();
  const TracePath path("uniprefill_step_trace_plain.jsonl");
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
}

// UNIPREFILL_CUDA_STEP_TRACE_KERNELS=1: each forward's line counts the work it launched (CUPTI)
// and splits its span into busy and idle; the next forward's work is its own.
TEST(StepTraceTest, TheKernelViewCountsEachForwardsOwnWork) {
  UP_CUDA_TEST_CONTEXT(ctx);
  cudaStream_t stream = ctx.cuda().stream();
  const TracePath path("uniprefill_step_trace_kernels.jsonl");
  Result<DeviceBuffer> buffer = DeviceBuffer::Allocate(size_t{64} << 20);
  ASSERT_TRUE(buffer.ok());
  {
    TraceEnvironment env(path, nullptr);
    setenv("UNIPREFILL_CUDA_STEP_TRACE_KERNELS", "1", 1);
    Result<std::unique_ptr<StepTrace>> trace = StepTrace::FromEnvironment();
    if (!trace.ok() && trace.status().code() == ErrorCode::kUnimplemented) {
      GTEST_SKIP() << trace.status().message();  // built without CUPTI's headers
    }
    ASSERT_TRUE(trace.ok()) << trace.status().message();
    StepTrace& t = **trace;
    EXPECT_TRUE(t.kernels());
    for (int memsets : {3, 1}) {
      ASSERT_TRUE(t.Begin(stream, 1, 1).ok());
      for (int i = 0; i < memsets; ++i) {
        ASSERT_EQ(cudaMemsetAsync(buffer->data(), i, buffer->size(), stream), cudaSuccess);
      }
      ASSERT_TRUE(t.Launched(stream, /*will_sync=*/memsets == 1).ok());
    }
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ASSERT_TRUE(t.Synced().ok());
  }
  const std::vector<nlohmann::json> lines = Lines(path);
  ASSERT_EQ(lines.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(lines[i].contains("kernels")) << lines[i].dump();
    const nlohmann::json& k = lines[i]["kernels"];
    EXPECT_EQ(k["n"].get<int>(), i == 0 ? 3 : 1);
    EXPECT_GT(k["busy_ms"].get<double>(), 0.0);
    EXPECT_NEAR(k["span_ms"].get<double>(), k["busy_ms"].get<double>() + k["gap_ms"].get<double>(),
                0.002);
    // The span lies within the forward's GPU time (its events bracket the memsets).
    EXPECT_LE(k["span_ms"].get<double>(), lines[i]["gpu_ms"].get<double>() + 0.01);
    // By name: the memsets, all of them, their time the busy time (they ran one after another).
    ASSERT_EQ(k["by_name"].size(), 1u) << k.dump();
    const nlohmann::json& memsets = k["by_name"][0];
    EXPECT_EQ(memsets[0].get<std::string>(), "[memset]");
    EXPECT_EQ(memsets[1].get<int>(), i == 0 ? 3 : 1);
    EXPECT_NEAR(memsets[2].get<double>(), k["busy_ms"].get<double>(), 0.002);
    EXPECT_NEAR(memsets[3].get<double>(), k["gap_ms"].get<double>(), 0.002);
  }
}

// The lines of forwards that returned without a sync are handed over at the next sync and
// written by the trace's own thread: the engine's time between forwards holds none of that
// writing (H200, 27th session: written at the sync, 311 unsynced chunks' lines took 2.9 s and
// read as the engine's time between a prompt's last chunk and its first decode, which waited).
TEST(StepTraceTest, TheTracesWritingIsNotTheEnginesTimeBetweenForwards) {
  UP_CUDA_TEST_CONTEXT(ctx);
  cudaStream_t stream = ctx.cuda().stream();
  const TracePath path("uniprefill_step_trace_writing.jsonl");
  // Lines whose writing takes well over 1 ms: ~19K event times to read.
  constexpr int kUnsynced = 300, kMarks = 64;
  {
    TraceEnvironment env(path, "1");
    Result<std::unique_ptr<StepTrace>> trace = StepTrace::FromEnvironment();
    ASSERT_TRUE(trace.ok() && *trace) << trace.status().message();
    StepTrace& t = **trace;
    for (int f = 0; f <= kUnsynced; ++f) {
      ASSERT_TRUE(t.Begin(stream, 1, 1).ok());
      for (int m = 0; m < kMarks; ++m) ASSERT_TRUE(t.Mark(stream, "norm").ok());
      ASSERT_TRUE(t.Launched(stream, /*will_sync=*/f == kUnsynced).ok());
    }
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ASSERT_TRUE(t.Synced().ok());  // hands kUnsynced + 1 forwards over
    // The next forward at once: the engine took (almost) no time, the trace none of its own.
    ASSERT_TRUE(t.Begin(stream, 1, 1).ok());
    ASSERT_TRUE(t.Launched(stream, /*will_sync=*/true).ok());
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ASSERT_TRUE(t.Synced().ok());
  }  // the trace's end writes what it was handed
  const std::vector<nlohmann::json> lines = Lines(path);
  ASSERT_EQ(lines.size(), static_cast<size_t>(kUnsynced + 2));
  for (int i = 0; i <= kUnsynced; ++i) {  // in order, no hand-over before them
    ASSERT_EQ(lines[i]["host_trace_ms"].get<double>(), 0.0) << i;
    ASSERT_TRUE(lines[i].contains("phases")) << i;
  }
  const nlohmann::json& after = lines.back();
  EXPECT_GE(after["host_trace_ms"].get<double>(), 0.0);
  EXPECT_LT(after["host_trace_ms"].get<double>(), 1.0) << after.dump();
  EXPECT_GE(after["host_between_ms"].get<double>(), 0.0);
  EXPECT_LT(after["host_between_ms"].get<double>(), 1.0) << after.dump();
  EXPECT_FALSE(after.contains("phases"));  // its marks: none
}

TEST(StepTraceTest, TheKernelViewWithoutATraceIsAnErrorThatSaysWhatToSet) {
  TraceEnvironment env("", nullptr);
  setenv("UNIPREFILL_CUDA_STEP_TRACE_KERNELS", "1", 1);
  Result<std::unique_ptr<StepTrace>> trace = StepTrace::FromEnvironment();
  unsetenv("UNIPREFILL_CUDA_STEP_TRACE_KERNELS");
  ASSERT_FALSE(trace.ok());
  EXPECT_NE(trace.status().message().find("UNIPREFILL_CUDA_STEP_TRACE_KERNELS=1"),
            std::string::npos)
      << trace.status().message();
}

}  // namespace
}  // namespace uniprefill::cuda_backend
