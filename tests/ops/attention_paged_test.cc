// AttentionPaged (keys in runs read in place: a paged cache's blocks) against the gathering
// version (the runs copied into one buffer and given to Attention: equal bit for bit) and the
// scalar reference.
// Random run lengths (empty runs, single keys, 16-key blocks), each run in its own buffer with
// its own row stride; prefill, chunked prefill and decode (key splits) shapes; GQA; windows;
// f32 and f16 keys and values; 1 and 2 threads at every ISA level this CPU has.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/cpu_isa.h"
#include "kv/kv_rows.h"
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
  int max_run;  // run lengths are drawn from [0, max_run]; 0: every run is 16 keys (a block)
};

struct Outputs {
  std::vector<float> paged, gathered, reference;
};

// One problem's inputs: runs of random lengths summing to tk, each its own K and V buffer of
// rows with a padded stride, the gathered copy, positions, queries.
struct Inputs {
  std::vector<std::vector<float>> k_buf, v_buf;
  std::vector<KvRun> runs;
  std::vector<float> k_all, v_all;  // the gathered copy: f32 [tk, Hkv, D]
  std::vector<int32_t> k_pos, q_pos;
  std::vector<float> q;
};

Inputs MakeInputs(const Case& c, std::mt19937& rng) {
  Inputs in;
  std::vector<int64_t> lengths;
  std::uniform_int_distribution<int> len(0, std::max(c.max_run, 1));
  for (int64_t left = c.tk; left > 0;) {
    const int64_t n = std::min<int64_t>(left, c.max_run == 0 ? 16 : len(rng));
    lengths.push_back(n);
    left -= n;
  }
  const int64_t row = c.hkv * c.d;
  for (int64_t n : lengths) {
    // K and V rows padded differently: each run reads both with their own strides.
    const int64_t ks = row + static_cast<int64_t>(rng() % 5),
                  vs = row + static_cast<int64_t>(rng() % 7);
    in.k_buf.push_back(RandomFloats(rng, std::max<int64_t>(n * ks, 1), -2, 2));
    in.v_buf.push_back(RandomFloats(rng, std::max<int64_t>(n * vs, 1), -2, 2));
    const std::vector<float>& kb = in.k_buf.back();
    const std::vector<float>& vb = in.v_buf.back();
    TensorView k = TensorView::Contiguous(in.k_buf.back().data(), DType::kF32, {n, c.hkv, c.d});
    TensorView v = TensorView::Contiguous(in.v_buf.back().data(), DType::kF32, {n, c.hkv, c.d});
    k.stride[0] = ks;
    v.stride[0] = vs;
    in.runs.push_back({k, v});
    for (int64_t j = 0; j < n; ++j) {
      in.k_all.insert(in.k_all.end(), kb.begin() + j * ks, kb.begin() + j * ks + row);
      in.v_all.insert(in.v_all.end(), vb.begin() + j * vs, vb.begin() + j * vs + row);
    }
  }
  if (in.runs.empty()) {  // no key: one empty run carries the head count
    in.runs.push_back({TensorView::Contiguous(nullptr, DType::kF32, {0, c.hkv, c.d}),
                       TensorView::Contiguous(nullptr, DType::kF32, {0, c.hkv, c.d})});
  }
  in.k_pos.resize(c.tk);
  in.q_pos.resize(c.tq);
  for (int64_t j = 0; j < c.tk; ++j) in.k_pos[j] = static_cast<int32_t>(j);
  for (int64_t i = 0; i < c.tq; ++i) in.q_pos[i] = static_cast<int32_t>(c.tk - c.tq + i);
  in.q = RandomFloats(rng, c.tq * c.hq * c.d, -2, 2);
  return in;
}

AttentionParams Params(const Case& c, bool bf16_tiles = false) {
  AttentionParams params;
  params.bf16_tiles = bf16_tiles;
  params.scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  params.window = c.window;
  return params;
}

Outputs RunCase(DeviceContext& ctx, const Case& c, std::mt19937& rng, bool bf16_tiles = false) {
  Inputs in = MakeInputs(c, rng);
  const TensorView qv = TensorView::Contiguous(in.q.data(), DType::kF32, {c.tq, c.hq, c.d});
  const TensorView kv = TensorView::Contiguous(in.k_all.data(), DType::kF32, {c.tk, c.hkv, c.d});
  const TensorView vv = TensorView::Contiguous(in.v_all.data(), DType::kF32, {c.tk, c.hkv, c.d});
  const AttentionParams params = Params(c, bf16_tiles);
  Outputs r;
  for (std::vector<float>* o : {&r.paged, &r.gathered, &r.reference}) {
    o->assign(c.tq * c.hq * c.d, 7.0f);
  }
  auto view = [&](std::vector<float>& o) {
    return TensorView::Contiguous(o.data(), DType::kF32, {c.tq, c.hq, c.d});
  };
  AttentionPaged(ctx, view(r.paged), qv, in.runs, in.q_pos.data(), in.k_pos.data(), params);
  Attention(ctx, view(r.gathered), qv, kv, vv, in.q_pos.data(), in.k_pos.data(), params);
  reference::Attention(view(r.reference), qv, kv, vv, in.q_pos.data(), in.k_pos.data(), params);
  return r;
}

class AttentionPagedTest : public ::testing::TestWithParam<std::tuple<int, CpuIsa>> {
 protected:
  void SetUp() override {
    const std::string missing = MissingCpuFeatures(std::get<1>(GetParam()), DetectCpuFeatures());
    if (!missing.empty()) GTEST_SKIP() << "this CPU lacks " << missing;
    ctx_ = DeviceContext::Cpu(std::get<0>(GetParam()), std::get<1>(GetParam()));
  }
  std::unique_ptr<DeviceContext> ctx_;
  std::mt19937 rng_{777};
};

// Prefill, chunked prefill and decode shapes with random runs (both the f32 and the f16 tests).
constexpr Case kRandomRunCases[] = {
    {1, 1, 4, 1, 32, 0, 3},       {7, 7, 2, 1, 17, 0, 5},        {65, 300, 4, 2, 24, 0, 40},
    {130, 130, 4, 1, 64, 50, 0},  {33, 500, 8, 2, 40, 128, 200}, {1, 3000, 4, 1, 64, 0, 0},
    {1, 3000, 4, 1, 64, 512, 37}, {2, 2500, 2, 2, 33, 0, 300},   {3, 40, 4, 4, 16, 5, 1},
};

TEST_P(AttentionPagedTest, RandomRunsMatchTheGatheredKeys) {
  for (const Case& c : kRandomRunCases) {
    const Outputs r = RunCase(*ctx_, c, rng_);
    const std::string what = "tq " + std::to_string(c.tq) + " tk " + std::to_string(c.tk) +
                             " window " + std::to_string(c.window) + " max_run " +
                             std::to_string(c.max_run);
    // The same key tiles and the same order of sums as one buffer: equal bit for bit.
    EXPECT_EQ(r.paged, r.gathered) << what;
    EXPECT_LT(MaxErrorOverRms(r.paged, r.reference), 5e-5) << what;
  }
}

// f16 runs (the CPU caches' default element type): each run's K and V rounded to f16 in buffers
// of their own (strides of their own, in f16 elements), against the gathered f32 copy of the
// same rounded values: equal bit for bit (the kernel widens a key tile to f32 and runs the f32
// kernels on it), and near the reference on the unrounded keys (f16 keeps 11 significant bits).
TEST_P(AttentionPagedTest, F16RunsEqualF32RunsOfTheRoundedValues) {
  std::vector<Case> cases(std::begin(kRandomRunCases), std::end(kRandomRunCases));
  cases.push_back({1, 700, 4, 1, 256, 0, 16});  // Gemma 3's head size, paged blocks
  for (const Case& c : cases) {
    Inputs in = MakeInputs(c, rng_);
    const int64_t row = c.hkv * c.d;
    std::vector<std::vector<uint16_t>> k16, v16;
    std::vector<KvRun> runs16;
    std::vector<float> k_round, v_round;  // gathered f32 [tk, Hkv, D] of the rounded values
    for (const KvRun& r : in.runs) {
      const int64_t n = r.k.dim(0), ks = r.k.stride[0], vs = r.v.stride[0];
      k16.emplace_back(std::max<int64_t>(n * ks, 1));
      v16.emplace_back(std::max<int64_t>(n * vs, 1));
      if (n > 0) {
        StoreKvValues(k16.back().data(), DType::kF16, r.k.as<float>(), n * ks);
        StoreKvValues(v16.back().data(), DType::kF16, r.v.as<float>(), n * vs);
      }
      TensorView k = TensorView::Contiguous(n > 0 ? k16.back().data() : nullptr, DType::kF16,
                                            {n, c.hkv, c.d});
      TensorView v = TensorView::Contiguous(n > 0 ? v16.back().data() : nullptr, DType::kF16,
                                            {n, c.hkv, c.d});
      k.stride[0] = ks;
      v.stride[0] = vs;
      runs16.push_back({k, v});
      std::vector<float> wide(row);
      for (int64_t j = 0; j < n; ++j) {
        LoadKvValues(wide.data(), k16.back().data() + j * ks, DType::kF16, row);
        k_round.insert(k_round.end(), wide.begin(), wide.end());
        LoadKvValues(wide.data(), v16.back().data() + j * vs, DType::kF16, row);
        v_round.insert(v_round.end(), wide.begin(), wide.end());
      }
    }
    const TensorView qv = TensorView::Contiguous(in.q.data(), DType::kF32, {c.tq, c.hq, c.d});
    const AttentionParams params = Params(c);
    std::vector<float> got(c.tq * c.hq * c.d, 7.0f), want(got.size(), 7.0f), ref(got.size());
    auto view = [&](std::vector<float>& o) {
      return TensorView::Contiguous(o.data(), DType::kF32, {c.tq, c.hq, c.d});
    };
    AttentionPaged(*ctx_, view(got), qv, runs16, in.q_pos.data(), in.k_pos.data(), params);
    Attention(*ctx_, view(want), qv,
              TensorView::Contiguous(k_round.data(), DType::kF32, {c.tk, c.hkv, c.d}),
              TensorView::Contiguous(v_round.data(), DType::kF32, {c.tk, c.hkv, c.d}),
              in.q_pos.data(), in.k_pos.data(), params);
    reference::Attention(
        view(ref), qv, TensorView::Contiguous(in.k_all.data(), DType::kF32, {c.tk, c.hkv, c.d}),
        TensorView::Contiguous(in.v_all.data(), DType::kF32, {c.tk, c.hkv, c.d}),
        in.q_pos.data(), in.k_pos.data(), params);
    const std::string what = "tq " + std::to_string(c.tq) + " tk " + std::to_string(c.tk) +
                             " d " + std::to_string(c.d) + " window " + std::to_string(c.window);
    EXPECT_EQ(got, want) << what;
    EXPECT_LT(MaxErrorOverRms(got, ref), 3e-3) << what;
  }
}

// AttentionParams::bf16_tiles (--prefill-gemm bf16): at amx-bf16, query tiles of more than 4
// rows run Q K^T and P V on bf16 AMX tiles. The K and V rows of a key tile are packed from their
// row pointers whatever the runs, so paged still equals gathered bit for bit; against the f32
// reference the bf16 rounding of Q, K, P and V shows: 1.1-3.2e-2 of the RMS here, what a numpy
// emulation of the same roundings gives (1.8-2.1e-2 on one head of these shapes; the output of a
// softmax average is small against its inputs). Below amx-bf16 the flag changes nothing (the f32
// bound).
TEST_P(AttentionPagedTest, Bf16TilesKeepPagedEqualToGatheredAndStayNearTheReference) {
  const bool amx = ctx_->cpu_isa() >= CpuIsa::kAmxBf16;
  const Case cases[] = {
      {65, 300, 4, 2, 32, 0, 40},   {130, 130, 4, 1, 64, 50, 0}, {33, 500, 8, 2, 64, 128, 200},
      {200, 700, 4, 1, 256, 0, 37}, {2, 2500, 2, 2, 32, 0, 300}, {40, 40, 4, 4, 96, 5, 1},
  };
  for (const Case& c : cases) {
    const Outputs r = RunCase(*ctx_, c, rng_, /*bf16_tiles=*/true);
    const std::string what = "tq " + std::to_string(c.tq) + " tk " + std::to_string(c.tk) +
                             " d " + std::to_string(c.d) + " window " + std::to_string(c.window);
    EXPECT_EQ(r.paged, r.gathered) << what;
    const double err = MaxErrorOverRms(r.paged, r.reference);
    EXPECT_LT(err, amx ? 6e-2 : 5e-5) << what;
    if (amx) std::printf("bf16 tiles, %s: max error / RMS %.3g\n", what.c_str(), err);
  }
}

TEST_P(AttentionPagedTest, EmptyRunsAndNoKeysGiveZeros) {
  std::vector<float> qd = RandomFloats(rng_, 2 * 4 * 8), out(2 * 4 * 8, 7.0f);
  const std::vector<KvRun> runs = {{TensorView::Contiguous(nullptr, DType::kF32, {0, 1, 8}),
                                    TensorView::Contiguous(nullptr, DType::kF32, {0, 1, 8})}};
  const int32_t q_pos[2] = {0, 1};
  AttentionPaged(*ctx_, TensorView::Contiguous(out.data(), DType::kF32, {2, 4, 8}),
                 TensorView::Contiguous(qd.data(), DType::kF32, {2, 4, 8}), runs, q_pos, nullptr,
                 AttentionParams{});
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

// A step's requests in one AttentionPagedBatch call equal one AttentionPaged call each, bit for
// bit: decode requests (one work item each), a long one (key splits), a prefill chunk, a request
// with no key; same head shape and window for all, as in one layer of a step.
TEST_P(AttentionPagedTest, BatchOfRequestsEqualsOneCallPerRequest) {
  for (int window : {0, 100}) {
    const Case cases[] = {
        {1, 300, 4, 1, 64, window, 0},   {1, 17, 4, 1, 64, window, 5},
        {1, 3000, 4, 1, 64, window, 0},  {40, 200, 4, 1, 64, window, 30},
        {1, 0, 4, 1, 64, window, 0},     {1, 520, 4, 1, 64, window, 16},
    };
    std::vector<Inputs> inputs;
    for (const Case& c : cases) inputs.push_back(MakeInputs(c, rng_));
    std::vector<std::vector<float>> batched, single;
    std::vector<PagedAttentionSeq> seqs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Case& c = cases[i];
      batched.emplace_back(c.tq * c.hq * c.d, 7.0f);
      single.emplace_back(c.tq * c.hq * c.d, 7.0f);
      const TensorView qv =
          TensorView::Contiguous(inputs[i].q.data(), DType::kF32, {c.tq, c.hq, c.d});
      const auto view = [&](std::vector<float>& o) {
        return TensorView::Contiguous(o.data(), DType::kF32, {c.tq, c.hq, c.d});
      };
      AttentionPaged(*ctx_, view(single[i]), qv, inputs[i].runs, inputs[i].q_pos.data(),
                     inputs[i].k_pos.data(), Params(c));
      seqs.push_back({view(batched[i]), qv, &inputs[i].runs, inputs[i].q_pos.data(),
                      inputs[i].k_pos.data()});
    }
    AttentionPagedBatch(*ctx_, seqs, Params(cases[0]));
    for (size_t i = 0; i < inputs.size(); ++i) {
      EXPECT_EQ(batched[i], single[i]) << "request " << i << " window " << window;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ThreadsAndIsa, AttentionPagedTest,
                         ::testing::Combine(::testing::Values(1, 2),
                                            ::testing::Values(CpuIsa::kAvx2, CpuIsa::kAvx512,
                                                              CpuIsa::kAmxBf16)),
                         [](const ::testing::TestParamInfo<std::tuple<int, CpuIsa>>& p) {
                           std::string isa(CpuIsaName(std::get<1>(p.param)));
                           for (char& c : isa) c = c == '-' ? '_' : c;
                           return std::to_string(std::get<0>(p.param)) + "_threads_" + isa;
                         });

}  // namespace
}  // namespace uniprefill::ops
