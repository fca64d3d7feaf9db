// Attention vs the scalar reference (double softmax over an explicit score row): prefill, chunked
// prefill (queries offset from keys as with a KV cache), decode (key splits), GQA ratios 1/2/4,
// sliding windows smaller and larger than the sequence, odd head dims, gapped key positions,
// strided K/V rows, queries with no visible key, 1 and 2 threads, AVX2 and AVX-512 tile kernels.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "core/cpu_isa.h"
#include "ops/ops.h"
#include "ops/reference.h"
#include "ops_test_util.h"

namespace uniprefill::ops {
namespace {

using testing::MaxErrorOverRms;
using testing::RandomFloats;

struct Case {
  int64_t tq, tk, hq, hkv, d;
  int window;
  int32_t q_offset = -1;  // first query position; -1: the queries are the last tq keys
  int32_t key_gap = 1;    // k_pos[j] = j * key_gap
};

void RunCase(DeviceContext& ctx, const Case& c, std::mt19937& rng) {
  // K and V live interleaved in one [tk, 2 * hkv * d + 3] buffer: strided rows.
  const int64_t kv_stride = 2 * c.hkv * c.d + 3;
  std::vector<float> q = RandomFloats(rng, c.tq * c.hq * c.d, -2, 2);
  std::vector<float> kv = RandomFloats(rng, c.tk * kv_stride, -2, 2);
  std::vector<float> out(c.tq * c.hq * c.d, 7.0f), ref(c.tq * c.hq * c.d, 0.0f);
  std::vector<int32_t> k_pos(c.tk), q_pos(c.tq);
  for (int64_t j = 0; j < c.tk; ++j) k_pos[j] = static_cast<int32_t>(j * c.key_gap);
  const int32_t first = c.q_offset >= 0 ? c.q_offset : static_cast<int32_t>((c.tk - c.tq) * c.key_gap);
  for (int64_t i = 0; i < c.tq; ++i) q_pos[i] = first + static_cast<int32_t>(i * c.key_gap);
  TensorView qv = TensorView::Contiguous(q.data(), DType::kF32, {c.tq, c.hq, c.d});
  TensorView kv_k = TensorView::Contiguous(kv.data(), DType::kF32, {c.tk, c.hkv, c.d});
  kv_k.stride[0] = kv_stride;
  TensorView kv_v = kv_k;
  kv_v.data = kv.data() + c.hkv * c.d;
  TensorView ov = TensorView::Contiguous(out.data(), DType::kF32, {c.tq, c.hq, c.d});
  TensorView rv = TensorView::Contiguous(ref.data(), DType::kF32, {c.tq, c.hq, c.d});
  AttentionParams params;
  params.scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  params.window = c.window;
  Attention(ctx, ov, qv, kv_k, kv_v, q_pos.data(), k_pos.data(), params);
  reference::Attention(rv, qv, kv_k, kv_v, q_pos.data(), k_pos.data(), params);
  EXPECT_LT(MaxErrorOverRms(out, ref), 5e-5)
      << "tq " << c.tq << " tk " << c.tk << " hq " << c.hq << " hkv " << c.hkv << " d " << c.d
      << " window " << c.window << " q_offset " << c.q_offset << " gap " << c.key_gap
      << " threads " << ctx.threads();
}

// Parameters: threads, and the CPU ISA level of the tile kernels (core/cpu_isa.h); a level this
// CPU lacks skips, naming the missing features.
class AttentionTest : public ::testing::TestWithParam<std::tuple<int, CpuIsa>> {
 protected:
  void SetUp() override {
    const std::string missing = MissingCpuFeatures(std::get<1>(GetParam()), DetectCpuFeatures());
    if (!missing.empty()) GTEST_SKIP() << "this CPU lacks " << missing;
    ctx_ = DeviceContext::Cpu(std::get<0>(GetParam()), std::get<1>(GetParam()));
  }
  std::unique_ptr<DeviceContext> ctx_;
  std::mt19937 rng_{2024};
};

TEST_P(AttentionTest, PrefillMatchesReference) {
  for (int64_t t : {1, 2, 3, 7, 65, 130, 300}) {
    for (auto [hq, hkv] : {std::pair{1, 1}, {2, 1}, {4, 1}, {4, 2}, {8, 2}}) {
      for (int64_t d : {1, 7, 16, 33, 64}) {
        for (int window : {0, 3, 50, 1000}) RunCase(*ctx_, {t, t, hq, hkv, d, window}, rng_);
      }
    }
  }
}

TEST_P(AttentionTest, ChunkedPrefillAgainstACacheMatchesReference) {
  for (auto [tq, tk] : {std::pair{1, 9}, {3, 40}, {7, 300}, {65, 200}, {130, 1100}}) {
    for (auto [hq, hkv] : {std::pair{4, 1}, {4, 2}, {2, 2}}) {
      for (int window : {0, 5, 128, 512}) RunCase(*ctx_, {tq, tk, hq, hkv, 24, window}, rng_);
    }
  }
}

TEST_P(AttentionTest, GemmaShapesMatchReference) {
  RunCase(*ctx_, {200, 200, 4, 1, 256, 0}, rng_);
  RunCase(*ctx_, {200, 700, 4, 1, 256, 512}, rng_);
  RunCase(*ctx_, {1, 5000, 4, 1, 256, 0}, rng_);    // decode, split over keys
  RunCase(*ctx_, {1, 5000, 4, 1, 256, 512}, rng_);  // decode, window
  RunCase(*ctx_, {2, 4000, 4, 1, 256, 0}, rng_);
}

TEST_P(AttentionTest, GappedKeyPositionsUseRealPositions) {
  // After token dropping keys keep their original (gapped) positions.
  for (int window : {0, 4, 31}) {
    RunCase(*ctx_, {50, 50, 4, 1, 32, window, -1, 3}, rng_);
    RunCase(*ctx_, {5, 2100, 2, 1, 32, window, -1, 2}, rng_);
  }
}

TEST_P(AttentionTest, QueriesWithNoVisibleKeyGetZeros) {
  // Queries at positions 0..3 against keys at 10..: nothing visible.
  std::vector<float> q = RandomFloats(rng_, 4 * 2 * 8), kv = RandomFloats(rng_, 20 * 8);
  std::vector<float> out(4 * 2 * 8, 5.0f);
  std::vector<int32_t> k_pos(20), q_pos = {0, 1, 2, 3};
  std::iota(k_pos.begin(), k_pos.end(), 10);
  TensorView kt = TensorView::Contiguous(kv.data(), DType::kF32, {20, 1, 8});
  Attention(*ctx_, TensorView::Contiguous(out.data(), DType::kF32, {4, 2, 8}),
            TensorView::Contiguous(q.data(), DType::kF32, {4, 2, 8}), kt, kt, q_pos.data(),
            k_pos.data(), AttentionParams{});
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

INSTANTIATE_TEST_SUITE_P(ThreadsAndIsa, AttentionTest,
                         ::testing::Combine(::testing::Values(1, 2),
                                            ::testing::Values(CpuIsa::kAvx2, CpuIsa::kAvx512)),
                         [](const ::testing::TestParamInfo<std::tuple<int, CpuIsa>>& p) {
                           return std::to_string(std::get<0>(p.param)) + "_threads_" +
                                  std::string(CpuIsaName(std::get<1>(p.param)));
                         });

}  // namespace
}  // namespace uniprefill::ops
