// The CUDA UniPrefill kernels (ops/cuda/cuda_uniprefill.h) against their CPU twins:
// - AttentionImportance vs ops::AttentionImportance on the same bf16-representable q and k (f32
//   softmax on both sides; the GPU's q.k runs on bf16 tensor cores with f32 accumulation, exact
//   products), normalised error < 1e-4, over odd key counts, GQA, head dims and gapped positions;
// - SelectTokens vs sparsity::SelectTokens: identical kept lists and counts on random, heavily tied
//   and all-zero importance, both modes;
// - SelectTokens with a device-side length (bounded segments) vs the CPU on that length, and the
//   bounded-segment index kernels (tail rows, compaction) vs a host reference;
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
#include "ops/cuda/cuda_dense_ops.h"
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
  EXPECT_LT(testing::RelativeL2Error(got, want), 1e-4);
  EXPECT_LT(testing::RelativeL2Error(got_inc, want_inc), 1e-4);
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

// A request whose length lives on the device (a bounded segment after a sync-free drop): the
// selection over the capacity with the device-side N equals the CPU's over the first N tokens, in
// every mode, whatever the (poisoned) scores beyond N; N at and around S + n, 0, and the capacity.
TEST(CudaSelectTokensTest, DeviceSideLengthEqualsCpuOnThatLength) {
  UP_CUDA_TEST_CONTEXT(gpu);
  constexpr int64_t kCapacity = 5000;
  SelectionParams g16;
  g16.block_size = 16;
  DeviceBuffer scratch(ops::cuda::SelectTokensScratchBytes(kCapacity, g16));
  DeviceBuffer rows(sizeof(int32_t) * kCapacity), count(sizeof(int32_t)), n_dev(sizeof(int32_t));
  std::mt19937 rng(31);
  for (Scores kind : {Scores::kSkewed, Scores::kTied}) {
    std::vector<float> importance = MakeImportance(rng, kCapacity, kind);
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{255}, int64_t{256}, int64_t{257},
                      int64_t{1000}, int64_t{4097}, kCapacity}) {
      std::vector<float> poisoned = importance;  // beyond N: scores that would win every block
      for (int64_t i = n; i < kCapacity; ++i) poisoned[i] = 1e6f;
      DeviceBuffer imp_dev = DeviceBuffer::FromHost(poisoned);
      const std::vector<float> head(importance.begin(), importance.begin() + n);
      const int32_t n32 = static_cast<int32_t>(n);
      n_dev.CopyFromHost(&n32, sizeof(n32));
      for (int block_size : {16, 64}) {
        for (const SelectionParams& p : AllModes(block_size, 128, 128)) {
          SCOPED_TRACE(Describe(p, n) + " capacity " + std::to_string(kCapacity));
          const std::vector<int32_t> want = sparsity::SelectTokens(head, p);
          rows.Fill(0xFF);
          count.Fill(0xFF);
          SyncDevice();
          ops::cuda::SelectTokens(gpu, rows.as<int32_t>(), count.as<int32_t>(),
                                  imp_dev.as<float>(), kCapacity, p, scratch.data(),
                                  scratch.size(), n_dev.as<int32_t>());
          SyncDevice();
          const int32_t got_count = count.ToHost<int32_t>(1)[0];
          ASSERT_EQ(got_count, static_cast<int32_t>(want.size()));
          ASSERT_EQ(FirstDifference(rows.ToHost<int32_t>(got_count), want), "");
        }
      }
    }
  }
}

// The fixed-ratio capacity bounds the kept count of every length up to it, and the minimum that
// of every length from it on.
TEST(CudaSelectTokensTest, FixedRatioCapacityBoundsEveryShorterLength) {
  std::mt19937 rng(5);
  for (float ratio : {0.1f, 0.3f, 0.5f, 0.77f, 1.0f}) {
    for (int block_size : {16, 64}) {
      SelectionParams p;
      p.mode = SelectionMode::kFixedRatio;
      p.keep_ratio = ratio;
      p.block_size = block_size;
      for (int64_t capacity : {1, 255, 256, 257, 300, 1000, 4096, 8191}) {
        const int64_t bound = ops::cuda::FixedRatioCapacity(capacity, p);
        const int64_t floor_bound = ops::cuda::FixedRatioMinimum(capacity, p);
        ASSERT_LE(bound, capacity);
        ASSERT_LE(floor_bound, bound);
        for (int64_t n = std::max<int64_t>(0, capacity - 300); n <= capacity; ++n) {
          const std::vector<float> importance = MakeImportance(rng, n, Scores::kSkewed);
          ASSERT_LE(static_cast<int64_t>(sparsity::SelectTokens(importance, p).size()), bound)
              << "capacity " << capacity << " n " << n << " ratio " << ratio;
        }
        // The minimum: every length from `capacity` on keeps at least floor_bound tokens.
        for (int64_t n = capacity; n <= capacity + 300; ++n) {
          const std::vector<float> importance = MakeImportance(rng, n, Scores::kSkewed);
          ASSERT_GE(static_cast<int64_t>(sparsity::SelectTokens(importance, p).size()),
                    floor_bound)
              << "minimum " << capacity << " n " << n << " ratio " << ratio;
        }
      }
    }
  }
}

// Bounded segments: the tail rows and the compaction's gather list and positions equal a host
// reference on random layouts, and GatherRows turns the -1 entries into zero rows.
TEST(CudaBoundedSegmentsTest, TailRowsAndCompactionMatchHostReference) {
  UP_CUDA_TEST_CONTEXT(gpu);
  std::mt19937 rng(77);
  for (int trial = 0; trial < 20; ++trial) {
    const int batch = 1 + static_cast<int>(rng() % 7);
    std::vector<int32_t> old_cu(batch + 1, 0), new_cu(batch + 1, 0), counts(batch),
        kept_count(batch);
    std::vector<int32_t> pass(batch), index_base(batch);
    std::vector<std::vector<int32_t>> kept(batch);
    for (int r = 0; r < batch; ++r) {
      const int32_t capacity = 1 + static_cast<int32_t>(rng() % 300);
      counts[r] = 1 + static_cast<int32_t>(rng() % capacity);
      old_cu[r + 1] = old_cu[r] + capacity;
      pass[r] = rng() % 4 == 0;  // keeps its rows without a selection
      index_base[r] = static_cast<int32_t>(rng() % 1000);
      for (int32_t i = 0; i < counts[r]; ++i) {
        if (pass[r] || rng() % 3 != 0) kept[r].push_back(i);
      }
      kept_count[r] = static_cast<int32_t>(kept[r].size());
      new_cu[r + 1] = new_cu[r] + kept_count[r] + static_cast<int32_t>(rng() % 20);  // + padding
    }
    const int32_t old_rows = old_cu[batch], new_rows = new_cu[batch];
    std::vector<int32_t> kept_rows(old_rows, -7), old_pos(old_rows);
    for (int32_t i = 0; i < old_rows; ++i) old_pos[i] = 3 * i + 1;
    for (int r = 0; r < batch; ++r) {  // a pass-through request's list stays poisoned
      if (!pass[r]) std::copy(kept[r].begin(), kept[r].end(), kept_rows.begin() + old_cu[r]);
    }
    DeviceBuffer old_cu_dev = DeviceBuffer::FromHost(old_cu);
    DeviceBuffer new_cu_dev = DeviceBuffer::FromHost(new_cu);
    DeviceBuffer counts_dev = DeviceBuffer::FromHost(counts);
    DeviceBuffer kept_count_dev = DeviceBuffer::FromHost(kept_count);
    DeviceBuffer kept_rows_dev = DeviceBuffer::FromHost(kept_rows);
    DeviceBuffer old_pos_dev = DeviceBuffer::FromHost(old_pos);
    DeviceBuffer pass_dev = DeviceBuffer::FromHost(pass);
    DeviceBuffer index_base_dev = DeviceBuffer::FromHost(index_base);
    DeviceBuffer new_index(sizeof(int32_t) * new_rows);
    new_index.Fill(0x55);
    DeviceBuffer source(sizeof(int32_t) * new_rows), new_pos(sizeof(int32_t) * new_rows);
    DeviceBuffer last(sizeof(int32_t) * batch);
    source.Fill(0x55);
    new_pos.Fill(0x55);
    last.Fill(0x55);
    SyncDevice();
    ops::cuda::SegmentTailRows(gpu, last.as<int32_t>(), old_cu_dev.as<int32_t>(),
                               counts_dev.as<int32_t>(), batch, 1);
    ops::cuda::CompactSegments(gpu, source.as<int32_t>(), new_pos.as<int32_t>(),
                               kept_rows_dev.as<int32_t>(), kept_count_dev.as<int32_t>(),
                               old_cu_dev.as<int32_t>(), new_cu_dev.as<int32_t>(),
                               old_pos_dev.as<int32_t>(), batch, new_rows,
                               new_index.as<int32_t>(), index_base_dev.as<int32_t>(),
                               pass_dev.as<int32_t>());
    DeviceBuffer gathered_pos(sizeof(int32_t) * new_rows);
    ops::cuda::GatherPositions(gpu, gathered_pos.as<int32_t>(), old_pos_dev.as<int32_t>(),
                               source.as<int32_t>(), new_rows);
    // Gather 3-wide f32 rows (value = 10 * row + column) through the list.
    std::vector<float> values(old_rows * 3);
    for (int32_t i = 0; i < old_rows * 3; ++i) {
      values[i] = static_cast<float>(10 * (i / 3) + i % 3 + 1);
    }
    DeviceBuffer values_dev = DeviceBuffer::FromHost(values);
    DeviceBuffer gathered(sizeof(float) * new_rows * 3);
    gathered.Fill(0x55);
    SyncDevice();
    ops::cuda::GatherRows(gpu, gathered.View(DType::kF32, {new_rows, 3}),
                          values_dev.View(DType::kF32, {old_rows, 3}), source.as<int32_t>());
    SyncDevice();
    const std::vector<int32_t> got_last = last.ToHost<int32_t>(batch);
    const std::vector<int32_t> got_source = source.ToHost<int32_t>(new_rows);
    const std::vector<int32_t> got_pos = new_pos.ToHost<int32_t>(new_rows);
    const std::vector<int32_t> got_index = new_index.ToHost<int32_t>(new_rows);
    EXPECT_EQ(gathered_pos.ToHost<int32_t>(new_rows), got_pos);  // the same rule
    const std::vector<float> got_rows = gathered.ToHost<float>(new_rows * 3);
    for (int r = 0; r < batch; ++r) {
      EXPECT_EQ(got_last[r], old_cu[r] + counts[r] - 1) << "request " << r;
      for (int32_t j = new_cu[r]; j < new_cu[r + 1]; ++j) {
        const int32_t local = j - new_cu[r];
        const int32_t want = local < kept_count[r] ? old_cu[r] + kept[r][local] : -1;
        ASSERT_EQ(got_source[j], want) << "trial " << trial << " request " << r << " row " << j;
        ASSERT_EQ(got_pos[j], want >= 0 ? old_pos[want] : ops::cuda::kPaddingPosition);
        ASSERT_EQ(got_index[j], want >= 0 ? index_base[r] + local : ops::cuda::kPaddingPosition);
        for (int c = 0; c < 3; ++c) {
          ASSERT_EQ(got_rows[j * 3 + c], want >= 0 ? values[want * 3 + c] : 0.0f);
        }
      }
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
