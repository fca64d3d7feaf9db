// The CUDA UniPrefill kernels (ops/cuda/cuda_uniprefill.h) against their CPU twins:
// - AttentionImportance vs ops::AttentionImportance on the same bf16-representable q and k (f32
//   softmax on both sides; the GPU's q.k runs on bf16 tensor cores with f32 accumulation, exact
//   products), normalised error < 1e-4, over odd key counts, GQA, head dims and gapped positions;
// - SelectTokens vs sparsity::SelectTokens: identical kept lists and counts on random, heavily tied
//   and all-zero importance, both modes;
// - the two chained, and every GPU result bit-identical when run again.
// The Timing test prints the kernels' times at 128K and 1M keys (no pass/fail on speed).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "ops/cuda/cuda_uniprefill.h"
#include "ops/ops.h"
#include "sparsity/token_selection.h"
#include "testing/cuda_test_util.h"

namespace uniprefill {
namespace {

using sparsity::SelectionMode;
using sparsity::SelectionParams;

// Waits for everything queued: DeviceBuffer's copies and fills go to the legacy stream, the ops to
// the context's own (non-blocking) stream.
void SyncDevice() { UP_CUDA_CHECK(cudaDeviceSynchronize()); }

DeviceContext& CpuContext() {
  static std::unique_ptr<DeviceContext> ctx = DeviceContext::Cpu(0);
  return *ctx;
}

// rows x width values as bf16 rows of `stride` elements on the device; the padding is NaN, so a
// kernel that reads it poisons its result.
DeviceBuffer UploadBf16Rows(const std::vector<float>& values, int64_t rows, int64_t width,
                            int64_t stride) {
  std::vector<uint16_t> host(static_cast<size_t>(rows * stride), 0x7fc0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < width; ++c) {
      host[r * stride + c] = testing::F32ToBf16Bits(values[r * width + c]);
    }
  }
  return DeviceBuffer::FromHost(host);
}

// A bf16 device view [rows, heads, head_dim] with row stride `stride`.
TensorView Bf16View(const DeviceBuffer& b, int64_t rows, int64_t heads, int64_t head_dim,
                    int64_t stride) {
  TensorView v = TensorView::Contiguous(b.data(), DType::kBF16, {rows, heads, head_dim},
                                        Device::kCuda);
  v.stride[0] = stride;
  return v;
}

// Ascending positions starting at 0..6 with a gap of 1..4 extra after about a quarter of them.
std::vector<int32_t> GappedPositions(std::mt19937& rng, int64_t n) {
  std::vector<int32_t> pos(n);
  int32_t p = static_cast<int32_t>(rng() % 7);
  for (int64_t i = 0; i < n; ++i) {
    pos[i] = p;
    p += 1 + (rng() % 4 == 0 ? static_cast<int32_t>(rng() % 5) : 0);
  }
  return pos;
}

struct ImportanceCase {
  int n_keys, n_queries, n_heads, n_kv_heads, head_dim;
  int q_pad = 0, k_pad = 0;  // extra elements per row (multiples of 8)
  float range = 1.0f;        // q, k uniform in [-range, range)
  float scale_mult = 1.0f;   // scale = scale_mult / sqrt(D)
  bool scattered_queries = false;  // query positions anywhere, some before every key
};

std::string CaseName(const ImportanceCase& c) {
  char name[128];
  std::snprintf(name, sizeof(name), "N%d_n%d_Hq%d_Hkv%d_D%d%s%s", c.n_keys, c.n_queries, c.n_heads,
                c.n_kv_heads, c.head_dim, c.scale_mult != 1.0f ? "_peaked" : "",
                c.scattered_queries ? "_scattered" : "");
  return name;
}

class CudaImportanceTest : public ::testing::TestWithParam<ImportanceCase> {};

TEST_P(CudaImportanceTest, MatchesCpuOnBf16Inputs) {
  UP_CUDA_TEST_CONTEXT(gpu);
  const ImportanceCase c = GetParam();
  const int64_t N = c.n_keys, n = c.n_queries, hq = c.n_heads, hkv = c.n_kv_heads,
                d = c.head_dim;
  std::mt19937 rng(static_cast<uint32_t>(N * 131 + n * 7 + d));
  const std::vector<float> q = testing::RandomBf16Values(rng, n * hq * d, -c.range, c.range);
  const std::vector<float> k = testing::RandomBf16Values(rng, N * hkv * d, -c.range, c.range);
  const std::vector<int32_t> k_pos = GappedPositions(rng, N);
  std::vector<int32_t> q_pos(k_pos.end() - n, k_pos.end());  // the last n tokens
  if (c.scattered_queries) {
    std::uniform_int_distribution<int32_t> any(k_pos.front() - 3, k_pos.back() + 3);
    for (int32_t& p : q_pos) p = any(rng);
  }
  const float scale = c.scale_mult / std::sqrt(static_cast<float>(d));
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> base(N);
  for (float& x : base) x = unit(rng);

  std::vector<float> want = base;
  ops::AttentionImportance(
      CpuContext(), want.data(),
      TensorView::Contiguous(const_cast<float*>(q.data()), DType::kF32, {n, hq, d}),
      TensorView::Contiguous(const_cast<float*>(k.data()), DType::kF32, {N, hkv, d}),
      q_pos.data(), k_pos.data(), scale);

  const int64_t q_stride = hq * d + c.q_pad, k_stride = hkv * d + c.k_pad;
  DeviceBuffer q_dev = UploadBf16Rows(q, n, hq * d, q_stride);
  DeviceBuffer k_dev = UploadBf16Rows(k, N, hkv * d, k_stride);
  DeviceBuffer q_pos_dev = DeviceBuffer::FromHost(q_pos);
  DeviceBuffer k_pos_dev = DeviceBuffer::FromHost(k_pos);
  DeviceBuffer importance = DeviceBuffer::FromHost(base);
  std::vector<float> runs[2];
  for (std::vector<float>& got : runs) {
    importance.CopyFromHost(base.data(), sizeof(float) * N);
    SyncDevice();
    ops::cuda::AttentionImportance(gpu, importance.as<float>(), Bf16View(q_dev, n, hq, d, q_stride),
                                   Bf16View(k_dev, N, hkv, d, k_stride),
                                   q_pos_dev.as<int32_t>(), k_pos_dev.as<int32_t>(), scale);
    SyncDevice();
    got = importance.ToHost<float>(N);
  }
  const std::vector<float>& got = runs[0];

  std::vector<float> got_inc(N), want_inc(N);
  double mass = 0;
  for (int64_t i = 0; i < N; ++i) {
    got_inc[i] = got[i] - base[i];
    want_inc[i] = want[i] - base[i];
    mass += got_inc[i];
  }
  EXPECT_LT(testing::NormalizedError(got, want), 1e-4);
  EXPECT_LT(testing::NormalizedError(got_inc, want_inc), 1e-4);
  // Each (query, head) with a visible key hands out probability 1.
  int64_t seeing = 0;
  for (int32_t p : q_pos) seeing += p >= k_pos.front();
  EXPECT_NEAR(mass, static_cast<double>(seeing * hq), 1e-4 * std::max<int64_t>(1, seeing * hq));
  for (int64_t i = 0; i < N; ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-4f * std::max(1.0f, std::fabs(want[i]))) << "key " << i;
  }
  int64_t differing = 0;
  for (int64_t i = 0; i < N; ++i) differing += std::memcmp(&runs[0][i], &runs[1][i], 4) != 0;
  EXPECT_EQ(differing, 0) << "keys whose importance differs in a second run";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaImportanceTest,
    ::testing::Values(
        ImportanceCase{1, 1, 4, 1, 64},                  // one key, one query, MQA
        ImportanceCase{7, 7, 8, 2, 128, 8, 8},           // every key is a query, strided rows
        ImportanceCase{130, 128, 8, 8, 64},              // MHA, N just above n
        ImportanceCase{257, 128, 32, 8, 128, 0, 16},     // the Llama-8B head layout
        ImportanceCase{1000, 77, 4, 1, 256, 24, 8},      // D = 256, odd n
        ImportanceCase{1000, 128, 8, 2, 96},             // D = 96 (zero-padded to 128)
        ImportanceCase{5000, 100, 6, 3, 40, 8, 0},       // D = 40, group of 2
        ImportanceCase{5000, 128, 8, 2, 128, 8, 8},      // several key splits
        ImportanceCase{1000, 64, 4, 2, 64, 0, 0, 3.0f, 8.0f},          // near one-hot softmax
        ImportanceCase{1000, 50, 4, 4, 128, 0, 0, 1.0f, 1.0f, true},   // scattered queries
        ImportanceCase{32768, 128, 32, 8, 128, 8, 8}),   // long context
    [](const ::testing::TestParamInfo<ImportanceCase>& param_info) {
      return CaseName(param_info.param);
    });

// ---- selection ----

struct GpuSelection {
  std::vector<int32_t> rows;
  int32_t count = -1;
};

// Runs cuda::SelectTokens on device importance, with poisoned outputs.
GpuSelection RunGpuSelection(DeviceContext& gpu, const DeviceBuffer& importance, int64_t n_tokens,
                             const SelectionParams& p, const DeviceBuffer& scratch,
                             DeviceBuffer& rows, DeviceBuffer& count) {
  rows.Fill(0xFF);
  count.Fill(0xFF);
  SyncDevice();
  ops::cuda::SelectTokens(gpu, rows.as<int32_t>(), count.as<int32_t>(), importance.as<float>(),
                          n_tokens, p, scratch.data(), scratch.size());
  SyncDevice();
  GpuSelection s;
  s.count = count.ToHost<int32_t>(1)[0];
  if (s.count >= 0 && s.count <= n_tokens) s.rows = rows.ToHost<int32_t>(s.count);
  return s;
}

// Empty when equal, else where the lists first differ.
std::string FirstDifference(const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  const size_t common = std::min(got.size(), want.size());
  for (size_t i = 0; i < common; ++i) {
    if (got[i] != want[i]) {
      return "kept[" + std::to_string(i) + "] = " + std::to_string(got[i]) + ", want " +
             std::to_string(want[i]) + " (sizes " + std::to_string(got.size()) + " vs " +
             std::to_string(want.size()) + ")";
    }
  }
  if (got.size() != want.size()) {
    return "sizes " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
  }
  return "";
}

std::string Describe(const SelectionParams& p, int64_t n_tokens) {
  return "N=" + std::to_string(n_tokens) + " G=" + std::to_string(p.block_size) +
         " S=" + std::to_string(p.sink) + " n=" + std::to_string(p.last_n) +
         (p.mode == SelectionMode::kTopP ? " top_p=" + std::to_string(p.top_p)
                                         : " ratio=" + std::to_string(p.keep_ratio));
}

// Every (mode, value) of the spec: top-p {0.5, 0.9, 0.99, 1} and keep ratio {0.1, 0.3, 0.5, 1}.
std::vector<SelectionParams> AllModes(int block_size, int sink, int last_n) {
  std::vector<SelectionParams> out;
  for (float p : {0.5f, 0.9f, 0.99f, 1.0f}) {
    SelectionParams s;
    s.block_size = block_size;
    s.sink = sink;
    s.last_n = last_n;
    s.mode = SelectionMode::kTopP;
    s.top_p = p;
    out.push_back(s);
  }
  for (float r : {0.1f, 0.3f, 0.5f, 1.0f}) {
    SelectionParams s;
    s.block_size = block_size;
    s.sink = sink;
    s.last_n = last_n;
    s.mode = SelectionMode::kFixedRatio;
    s.keep_ratio = r;
    out.push_back(s);
  }
  return out;
}

enum class Scores { kSkewed, kTied, kZero };

std::vector<float> MakeImportance(std::mt19937& rng, int64_t n, Scores kind) {
  std::vector<float> v(n, 0.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const float tie_values[4] = {0.0f, 0.5f, 1.0f, 2.0f};  // sums of these are exact: many ties
  for (float& x : v) {
    if (kind == Scores::kSkewed) {
      const float u = unit(rng);
      x = 10.0f * u * u * u;
    } else if (kind == Scores::kTied) {
      x = tie_values[rng() % 4];
    }
  }
  return v;
}

// Checks GPU selection == CPU selection for every mode on one importance vector (twice each).
void ExpectSelectionMatchesCpu(DeviceContext& gpu, const std::vector<float>& importance,
                               const std::vector<SelectionParams>& all_params,
                               const DeviceBuffer& scratch, DeviceBuffer& rows,
                               DeviceBuffer& count) {
  const int64_t n_tokens = static_cast<int64_t>(importance.size());
  DeviceBuffer imp_dev = DeviceBuffer::FromHost(importance);
  for (const SelectionParams& p : all_params) {
    SCOPED_TRACE(Describe(p, n_tokens));
    ASSERT_GE(scratch.size(), ops::cuda::SelectTokensScratchBytes(n_tokens, p));
    const std::vector<int32_t> want = sparsity::SelectTokens(importance, p);
    const GpuSelection first = RunGpuSelection(gpu, imp_dev, n_tokens, p, scratch, rows, count);
    ASSERT_EQ(first.count, static_cast<int32_t>(want.size()));
    ASSERT_EQ(FirstDifference(first.rows, want), "");
    const GpuSelection again = RunGpuSelection(gpu, imp_dev, n_tokens, p, scratch, rows, count);
    ASSERT_EQ(again.count, first.count);
    ASSERT_EQ(again.rows, first.rows) << "a second run differs";
  }
}

TEST(CudaSelectTokensTest, MatchesCpuOnSkewedTiedAndZeroImportance) {
  UP_CUDA_TEST_CONTEXT(gpu);
  constexpr int64_t kMaxTokens = 131072;
  SelectionParams smallest_blocks;
  smallest_blocks.block_size = 16;
  DeviceBuffer scratch(ops::cuda::SelectTokensScratchBytes(kMaxTokens, smallest_blocks));
  DeviceBuffer rows(sizeof(int32_t) * kMaxTokens), count(sizeof(int32_t));
  std::mt19937 rng(2024);
  for (Scores kind : {Scores::kSkewed, Scores::kTied, Scores::kZero}) {
    for (int64_t n_tokens : {256, 257, 300, 1000, 4097, 131072}) {  // S + n = 256
      SCOPED_TRACE("scores kind " + std::to_string(static_cast<int>(kind)));
      const std::vector<float> importance = MakeImportance(rng, n_tokens, kind);
      for (int block_size : {16, 64}) {
        ExpectSelectionMatchesCpu(gpu, importance, AllModes(block_size, 128, 128), scratch, rows,
                                  count);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

TEST(CudaSelectTokensTest, MatchesCpuWithOtherSinkAndWindowSizes) {
  UP_CUDA_TEST_CONTEXT(gpu);
  constexpr int64_t kMaxTokens = 5000;
  SelectionParams smallest_blocks;
  smallest_blocks.block_size = 1;
  DeviceBuffer scratch(ops::cuda::SelectTokensScratchBytes(kMaxTokens, smallest_blocks));
  DeviceBuffer rows(sizeof(int32_t) * kMaxTokens), count(sizeof(int32_t));
  std::mt19937 rng(7);
  struct Shape {
    int sink, last_n;
  };
  for (Shape s : {Shape{0, 1}, Shape{5, 3}, Shape{64, 200}}) {
    for (int64_t n_tokens : {0, 1, 2, 9, 100, 1000, 5000}) {
      const std::vector<float> importance = MakeImportance(rng, n_tokens, Scores::kSkewed);
      for (int block_size : {1, 7, 64}) {
        ExpectSelectionMatchesCpu(gpu, importance, AllModes(block_size, s.sink, s.last_n),
                                  scratch, rows, count);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

TEST(CudaSelectTokensTest, ScratchBytesGrowWithTokensAndShrinkWithBlockSize) {
  SelectionParams g64, g16;
  g16.block_size = 16;
  EXPECT_GT(ops::cuda::SelectTokensScratchBytes(131072, g64), 0u);
  EXPECT_GE(ops::cuda::SelectTokensScratchBytes(131072, g64),
            ops::cuda::SelectTokensScratchBytes(4096, g64));
  EXPECT_GE(ops::cuda::SelectTokensScratchBytes(131072, g16),
            ops::cuda::SelectTokensScratchBytes(131072, g64));
}

// The GPU chain (importance, then selection on the device) selects what the CPU selects on the
// importance the GPU computed.
TEST(CudaUniPrefillPipelineTest, GpuImportanceThenGpuSelectionEqualsCpuSelection) {
  UP_CUDA_TEST_CONTEXT(gpu);
  const int64_t N = 5000, n = 128, hq = 8, hkv = 2, d = 128;
  std::mt19937 rng(99);
  const std::vector<float> q = testing::RandomBf16Values(rng, n * hq * d);
  const std::vector<float> k = testing::RandomBf16Values(rng, N * hkv * d);
  const std::vector<int32_t> k_pos = GappedPositions(rng, N);
  const std::vector<int32_t> q_pos(k_pos.end() - n, k_pos.end());
  DeviceBuffer q_dev = UploadBf16Rows(q, n, hq * d, hq * d);
  DeviceBuffer k_dev = UploadBf16Rows(k, N, hkv * d, hkv * d);
  DeviceBuffer q_pos_dev = DeviceBuffer::FromHost(q_pos);
  DeviceBuffer k_pos_dev = DeviceBuffer::FromHost(k_pos);
  DeviceBuffer importance(sizeof(float) * N);
  importance.Fill(0);
  SyncDevice();
  ops::cuda::AttentionImportance(gpu, importance.as<float>(), Bf16View(q_dev, n, hq, d, hq * d),
                                 Bf16View(k_dev, N, hkv, d, hkv * d), q_pos_dev.as<int32_t>(),
                                 k_pos_dev.as<int32_t>(), 1.0f / std::sqrt(float(d)));
  SyncDevice();
  const std::vector<float> host_importance = importance.ToHost<float>(N);

  SelectionParams g16;
  g16.block_size = 16;
  DeviceBuffer scratch(ops::cuda::SelectTokensScratchBytes(N, g16));
  DeviceBuffer rows(sizeof(int32_t) * N), count(sizeof(int32_t));
  for (int block_size : {16, 64}) {
    for (const SelectionParams& p : AllModes(block_size, 128, 128)) {
      SCOPED_TRACE(Describe(p, N));
      const std::vector<int32_t> want = sparsity::SelectTokens(host_importance, p);
      const GpuSelection got = RunGpuSelection(gpu, importance, N, p, scratch, rows, count);
      ASSERT_EQ(got.count, static_cast<int32_t>(want.size()));
      ASSERT_EQ(FirstDifference(got.rows, want), "");
    }
  }
}

// ---- timing (printed; the only checks are sanity) ----

TEST(CudaUniPrefillTiming, ImportanceAndSelectionAt128KAnd1MKeys) {
  UP_CUDA_TEST_CONTEXT(gpu);
  const int64_t n = 128, hq = 32, hkv = 8, d = 128, pattern_rows = 8192;
  std::mt19937 rng(5);
  const std::vector<float> q = testing::RandomBf16Values(rng, n * hq * d);
  const std::vector<float> k_pattern = testing::RandomBf16Values(rng, pattern_rows * hkv * d);
  DeviceBuffer q_dev = UploadBf16Rows(q, n, hq * d, hq * d);
  for (int64_t N : {int64_t{131072}, int64_t{1} << 20}) {
    // k: the random pattern repeated (device-to-device), positions 0..N-1.
    const size_t pattern_bytes = sizeof(uint16_t) * pattern_rows * hkv * d;
    DeviceBuffer k_dev(pattern_bytes * (N / pattern_rows));
    k_dev.CopyFromHost(testing::ToBf16(k_pattern).data(), pattern_bytes);
    for (int64_t r = pattern_rows; r < N; r += pattern_rows) {
      UP_CUDA_CHECK(cudaMemcpy(k_dev.as<char>() + r / pattern_rows * pattern_bytes, k_dev.data(),
                               pattern_bytes, cudaMemcpyDeviceToDevice));
    }
    std::vector<int32_t> k_pos(N);
    for (int64_t i = 0; i < N; ++i) k_pos[i] = static_cast<int32_t>(i);
    const std::vector<int32_t> q_pos(k_pos.end() - n, k_pos.end());
    DeviceBuffer q_pos_dev = DeviceBuffer::FromHost(q_pos);
    DeviceBuffer k_pos_dev = DeviceBuffer::FromHost(k_pos);
    DeviceBuffer importance(sizeof(float) * N);
    importance.Fill(0);
    SyncDevice();
    constexpr int kRuns = 5;
    const double importance_ms = ::uniprefill::testing::MeanCudaMs(gpu, kRuns, [&] {
      ops::cuda::AttentionImportance(gpu, importance.as<float>(), Bf16View(q_dev, n, hq, d, hq * d),
                                     Bf16View(k_dev, N, hkv, d, hkv * d),
                                     q_pos_dev.as<int32_t>(), k_pos_dev.as<int32_t>(),
                                     1.0f / std::sqrt(float(d)));
    });
    const std::vector<float> host_importance = importance.ToHost<float>(N);
    double mass = 0;
    for (float x : host_importance) mass += x;
    const double want_mass = double(kRuns + 1) * n * hq;
    EXPECT_NEAR(mass, want_mass, 1e-3 * want_mass) << "N=" << N;

    SelectionParams p;
    DeviceBuffer scratch(ops::cuda::SelectTokensScratchBytes(N, p));
    DeviceBuffer rows(sizeof(int32_t) * N), count(sizeof(int32_t));
    double select_ms[2];
    for (SelectionMode mode : {SelectionMode::kTopP, SelectionMode::kFixedRatio}) {
      p.mode = mode;
      select_ms[mode == SelectionMode::kTopP ? 0 : 1] = ::uniprefill::testing::MeanCudaMs(gpu, kRuns, [&] {
        ops::cuda::SelectTokens(gpu, rows.as<int32_t>(), count.as<int32_t>(),
                                importance.as<float>(), N, p, scratch.data(), scratch.size());
      });
      const int32_t kept = count.ToHost<int32_t>(1)[0];
      ASSERT_TRUE(kept >= 0 && kept <= N) << "kept count " << kept;
      EXPECT_EQ(FirstDifference(rows.ToHost<int32_t>(kept),
                                sparsity::SelectTokens(host_importance, p)),
                "")
          << "N=" << N;
    }
    std::printf(
        "[ timing ] N=%lld n=%lld Hq=%lld Hkv=%lld D=%lld: AttentionImportance %.3f ms "
        "(%.0f TFLOP/s), SelectTokens G=64 top-p %.3f ms, fixed-ratio %.3f ms\n",
        static_cast<long long>(N), static_cast<long long>(n), static_cast<long long>(hq),
        static_cast<long long>(hkv), static_cast<long long>(d), importance_ms,
        4.0 * n * hq * N * d / (importance_ms * 1e9), select_ms[0], select_ms[1]);
  }
}

}  // namespace
}  // namespace uniprefill
