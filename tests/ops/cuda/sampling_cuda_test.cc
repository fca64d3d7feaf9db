// The CUDA sampling ops (ops/cuda/cuda_sampling.h) against the CPU sampler (engine/sampler.h).
//   ArgMax: exact against a host argmax (ties -> lowest id, -inf and NaN entries, -0 == +0, an
//   all -inf row, odd V = 262144 + 7, strided rows, many rows), logprobs against the engine's
//   formula.
//   Sample: each logits row is launched as Q rows of stride 0 (the same data) with Q stratified
//   uniforms, so one CPU Sampler::Distribution serves Q draws; the GPU token must equal the CPU's
//   draw (Sampler::Sample's walk over the distribution with u) whenever the decision is not within
//   kTol of a boundary: |cumulative probability - u| at the drawn token's two ends and
//   |cumulative - top_p| at the top-p cut (the GPU sums f32 exponentials in double in another
//   order: ~1e-7 relative). Enough draws must be decidable for the test to mean something.
//   Logit families: peaked (LLM-like: a few tokens far above a normal background; kept prefixes
//   small, the exact in-shared-memory path), flat (uniform in [-1, 1]: top-p prefixes of
//   thousands to 250K tokens, the multi-pass path) and quantised (5 distinct values: ties
//   everywhere, the tie-resolution path). Greedy rows, infinite and NaN logits, V = 1, min_p = 1
//   ties and mixed batches are checked exactly.
//   TimingReport prints the ops' times at V = 262144 (no speed thresholds) and checks what every
//   timed call returned: ArgMax and greedy ids exact, sampled ids valid and equal to the CPU's
//   draw where decidable, times finite and positive.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "engine/sampler.h"
#include "ops/cuda/cuda_sampling.h"
#include "testing/cuda_test_util.h"

namespace uniprefill::ops {
namespace {

using cuda::SamplingRow;

constexpr double kTol = 2e-6;  // decisions closer than this to a boundary are not compared
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kPosInf = std::numeric_limits<float>::infinity();

// ---- Host references ----

float CanonicalHost(float f) { return std::isnan(f) ? kNegInf : f; }

// Index of the largest logit, lowest on ties, NaN as -inf (-0 == +0 by `>`).
int32_t HostArgMax(const float* x, int64_t n) {
  int32_t best = 0;
  float bv = CanonicalHost(x[0]);
  for (int64_t i = 1; i < n; ++i) {
    const float v = CanonicalHost(x[i]);
    if (v > bv) {
      bv = v;
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

// batch_engine.cc's WithLogprobs formula: logprob = x[id] - log_z.
float HostLogZ(const float* x, int64_t n) {
  float max = x[0];
  for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i] - max));
  return max + static_cast<float>(std::log(sum));
}
float HostLogProb(const float* x, int64_t n, int32_t id) { return x[id] - HostLogZ(x, n); }

SamplerConfig ConfigOf(const SamplingRow& r) {
  SamplerConfig c;
  c.temperature = r.temperature;
  c.top_k = r.top_k;
  c.top_p = r.top_p;
  c.min_p = r.min_p;
  return c;
}

// How far the CPU's top-p decision is from its threshold (infinity when top-p is off): the
// distance of top_p from the cumulative probabilities just before and at the cut, recomputed as
// sampler.cc's TopP does.
double TopPMargin(const std::vector<float>& logits, const SamplingRow& r) {
  if (!(r.temperature > 0) || r.top_p >= 1.0f) return INFINITY;
  struct C {
    int32_t id;
    float l;
  };
  std::vector<C> c(logits.size());
  for (size_t i = 0; i < logits.size(); ++i)
    c[i] = {static_cast<int32_t>(i), CanonicalHost(logits[i])};
  const auto by = [](const C& a, const C& b) { return a.l > b.l || (a.l == b.l && a.id < b.id); };
  if (r.top_k > 0 && r.top_k < static_cast<int>(c.size())) {
    std::partial_sort(c.begin(), c.begin() + r.top_k, c.end(), by);
    c.resize(r.top_k);
  } else {
    std::sort(c.begin(), c.end(), by);
  }
  if (c.size() <= 1) return INFINITY;
  const double max = c[0].l;
  std::vector<double> w(c.size());
  double total = 0;
  for (size_t i = 0; i < c.size(); ++i) total += w[i] = std::exp(c[i].l - max);
  double cum = 0, prev = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    prev = cum;
    cum += w[i] / total;
    if (cum >= r.top_p) return std::min(std::abs(cum - r.top_p), std::abs(prev - r.top_p));
  }
  return std::abs(cum - r.top_p);
}

struct CpuDraw {
  int32_t id;
  double margin;  // distance of u from the drawn token's cumulative interval ends
};
// Sampler::Sample's walk over its distribution with uniform u.
CpuDraw WalkDistribution(const std::vector<TokenProb>& dist, double u) {
  if (dist.size() == 1) return {dist[0].id, INFINITY};
  double cum = 0;
  for (const TokenProb& t : dist) {
    const double prev = cum;
    cum += t.prob;
    if (u < cum) return {t.id, std::min(u - prev, cum - u)};
  }
  for (auto it = dist.rbegin(); it != dist.rend(); ++it) {
    if (it->prob > 0) return {it->id, 0.0};
  }
  return {dist[0].id, 0.0};
}

// ---- Logit families ----

enum class Family { kPeaked, kFlat, kQuantised };
const char* FamilyName(Family f) {
  return f == Family::kPeaked ? "peaked" : f == Family::kFlat ? "flat" : "quantised";
}

std::vector<float> MakeLogits(Family f, int64_t v, std::mt19937& rng) {
  std::vector<float> x(v);
  switch (f) {
    case Family::kPeaked: {
      std::normal_distribution<float> bg(0.0f, 2.0f);
      for (float& l : x) l = bg(rng);
      std::uniform_int_distribution<int64_t> pick(0, v - 1);
      std::uniform_real_distribution<float> lift(10.0f, 16.0f);
      for (int i = 0; i < 20; ++i) x[pick(rng)] += lift(rng);
      break;
    }
    case Family::kFlat: {
      std::uniform_real_distribution<float> d(-1.0f, 1.0f);
      for (float& l : x) l = d(rng);
      break;
    }
    case Family::kQuantised: {
      std::uniform_int_distribution<int> d(0, 4);
      for (float& l : x) l = 0.5f * d(rng);
      break;
    }
  }
  return x;
}

const std::vector<SamplingRow>& Configs() {
  static const std::vector<SamplingRow> configs = {
      {1.0f, 0, 1.0f, 0.0f},        // plain sampling: id order
      {0.7f, 40, 0.95f, 0.0f},      // the engine's defaults at a typical temperature
      {1.0f, 0, 0.9f, 0.0f},        // top-p only
      {1.3f, 0, 0.5f, 0.05f},       // top-p and min-p
      {1.0f, 0, 1.0f, 0.1f},        // min-p only: id order over a cut
      {0.5f, 5000, 1.0f, 0.0f},     // top-k above the 4096 candidates of shared memory
      {1.0f, 1, 1.0f, 0.0f},        // top-k 1: the argmax
      {1.0f, 100000, 0.99f, 0.0f},  // large top-k and top-p
      {1.0f, 0, 0.999f, 0.0f},      // top-p close to 1
      {2.0f, 50, 1.0f, 0.2f},       // high temperature, top-k and min-p
      {0.0f, 40, 0.9f, 0.0f},       // greedy despite the filters
      {0.8f, 3000, 0.9f, 0.02f},    // top-k within shared memory, then top-p and min-p
  };
  return configs;
}

std::string Describe(const SamplingRow& r) {
  std::ostringstream s;
  s << "T " << r.temperature << " top_k " << r.top_k << " top_p " << r.top_p << " min_p "
    << r.min_p;
  return s.str();
}

constexpr double kNear =
    1e-5;  // every draw: the GPU token's CPU cumulative interval is this close to u

struct DrawStats {
  int draws = 0, decided = 0, mismatches = 0;
};

// Samples `q` uniforms on one logits row (a stride-0 batch of q rows) with config r and compares
// every decidable draw with the CPU sampler. Also checks the logprobs.
void CompareRow(DeviceContext& ctx, const std::vector<float>& logits, const SamplingRow& r, int q,
                std::mt19937& rng, DrawStats& stats, const std::string& what) {
  const int64_t v = static_cast<int64_t>(logits.size());
  std::vector<float> u(q);
  std::uniform_real_distribution<float> jitter(0.0f, 1.0f);
  for (int i = 0; i < q; ++i) u[i] = std::min((i + jitter(rng)) / q, 0.99999994f);
  u[0] = 0.0f;
  DeviceBuffer d_logits = DeviceBuffer::FromHost(logits);
  DeviceBuffer d_rows = DeviceBuffer::FromHost(std::vector<SamplingRow>(q, r));
  DeviceBuffer d_u = DeviceBuffer::FromHost(u);
  DeviceBuffer d_ids(q * sizeof(int32_t)), d_lp(q * sizeof(float));
  d_ids.Fill(0xFF);
  d_lp.Fill(0xFF);
  TensorView view = TensorView::Contiguous(d_logits.data(), DType::kF32, {q, v}, Device::kCuda);
  view.stride[0] = 0;  // every row is the same logits
  cuda::Sample(ctx, d_ids.as<int32_t>(), d_lp.as<float>(), view, d_rows.as<SamplingRow>(),
               d_u.as<float>());
  ctx.cuda().Synchronize();
  const std::vector<int32_t> ids = d_ids.ToHost<int32_t>(q);
  const std::vector<float> lps = d_lp.ToHost<float>(q);

  const Sampler sampler(ConfigOf(r));
  const std::vector<TokenProb> dist = sampler.Distribution(logits);
  const double p_margin = TopPMargin(logits, r);
  const float log_z = HostLogZ(logits.data(), v);
  // Each kept token's cumulative interval [begin, end) in the CPU's walk order.
  std::vector<double> begin(v, -1.0), end(v, -1.0);
  double cum = 0;
  for (const TokenProb& t : dist) {
    begin[t.id] = cum;
    cum += t.prob;
    end[t.id] = cum;
  }
  for (int i = 0; i < q; ++i) {
    ++stats.draws;
    ASSERT_GE(ids[i], 0) << what;
    ASSERT_LT(ids[i], v) << what;
    const CpuDraw want = WalkDistribution(dist, u[i]);
    EXPECT_NEAR(lps[i], logits[ids[i]] - log_z, 1e-4) << what << " draw " << i;
    // Decidable or not, the GPU token sits where u points up to rounding: in the CPU's kept set
    // with u in its cumulative interval (unless rounding may move the top-p cut itself).
    if (p_margin >= kNear) {
      EXPECT_TRUE(begin[ids[i]] >= 0.0 && begin[ids[i]] - kNear <= u[i] &&
                  u[i] < end[ids[i]] + kNear)
          << what << ": u " << u[i] << " GPU " << ids[i] << " has CPU interval [" << begin[ids[i]]
          << ", " << end[ids[i]] << ") (not kept if negative)";
    }
    if (std::min(want.margin, p_margin) < kTol) continue;
    ++stats.decided;
    if (ids[i] != want.id) {
      ++stats.mismatches;
      ADD_FAILURE() << what << ": u " << u[i] << " GPU " << ids[i] << " (logit " << logits[ids[i]]
                    << ") CPU " << want.id << " (logit " << logits[want.id] << ") draw margin "
                    << want.margin << " top-p margin " << p_margin;
    }
  }
}

void CompareFamily(DeviceContext& ctx, Family f, int64_t v, int rows, int q, uint32_t seed,
                   double min_decided) {
  std::mt19937 rng(seed);
  DrawStats total;
  for (int row = 0; row < rows; ++row) {
    const std::vector<float> logits = MakeLogits(f, v, rng);
    for (const SamplingRow& r : Configs()) {
      std::ostringstream what;
      what << FamilyName(f) << " V " << v << " row " << row << " " << Describe(r);
      CompareRow(ctx, logits, r, q, rng, total, what.str());
    }
  }
  EXPECT_EQ(total.mismatches, 0);
  EXPECT_GE(total.decided, min_decided * total.draws)
      << FamilyName(f) << " V " << v << ": only " << total.decided << " of " << total.draws
      << " draws were far enough from a boundary to compare";
}

// ---- ArgMax ----

TEST(CudaSamplingTest, ArgMaxIsExactWithTiesInfinitiesAndNaN) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(1);
  const int64_t v = 262144 + 7, stride = v + 5;
  const int rows = 7;
  std::vector<float> x(rows * stride, 123.0f);  // padding: larger than any logit
  std::uniform_real_distribution<float> d(-10.0f, 10.0f);
  for (int r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < v; ++i) x[r * stride + i] = d(rng);
  }
  float* r0 = &x[0 * stride];  // a tie for the max: the lower index wins
  r0[1000] = 50.0f;
  r0[200000] = 50.0f;
  r0[5] = 49.0f;
  float* r1 = &x[1 * stride];  // mostly -inf
  for (int64_t i = 0; i < v; ++i) r1[i] = (i % 97 == 3) ? d(rng) : kNegInf;
  float* r2 = &x[2 * stride];  // all -inf: index 0
  for (int64_t i = 0; i < v; ++i) r2[i] = kNegInf;
  x[3 * stride + v - 1] = 11.0f;  // the max at the last index
  float* r4 = &x[4 * stride];     // NaNs never win
  for (int64_t i = 0; i < v; i += 3) r4[i] = std::numeric_limits<float>::quiet_NaN();
  float* r5 = &x[5 * stride];  // -0 and +0 tie for the max: the lower index wins
  for (int64_t i = 0; i < v; ++i) r5[i] = -1.0f - (i % 13);
  r5[70000] = -0.0f;
  r5[90] = 0.0f;
  r5[100] = -0.0f;
  float* r6 = &x[6 * stride];  // +inf twice
  r6[77] = kPosInf;
  r6[66] = kPosInf;

  DeviceBuffer d_x = DeviceBuffer::FromHost(x);
  TensorView view = TensorView::Contiguous(d_x.data(), DType::kF32, {rows, v}, Device::kCuda);
  view.stride[0] = stride;
  const size_t scratch_bytes = cuda::ArgMaxScratchBytes(ctx, rows, v);
  DeviceBuffer scratch(std::max<size_t>(scratch_bytes, 16));
  scratch.Fill(0xFF);
  DeviceBuffer d_ids(rows * 4), d_lp(rows * 4);
  d_ids.Fill(0xFF);
  cuda::ArgMax(ctx, d_ids.as<int32_t>(), d_lp.as<float>(), view, scratch.data(), scratch.size());
  ctx.cuda().Synchronize();
  const std::vector<int32_t> ids = d_ids.ToHost<int32_t>(rows);
  const std::vector<float> lps = d_lp.ToHost<float>(rows);
  const std::vector<int32_t> expected_fixed = {1000, -1, 0, static_cast<int32_t>(v - 1),
                                               -1,   90, 66};
  for (int r = 0; r < rows; ++r) {
    const int32_t want = HostArgMax(&x[r * stride], v);
    if (expected_fixed[r] >= 0) {
      ASSERT_EQ(want, expected_fixed[r]) << "host reference, row " << r;
    }
    EXPECT_EQ(ids[r], want) << "row " << r;
  }
  for (int r : {0, 1, 3, 5}) {
    EXPECT_NEAR(lps[r], HostLogProb(&x[r * stride], v, ids[r]), 1e-4) << "row " << r;
  }
  EXPECT_TRUE(std::isnan(lps[2])) << "all -inf: the CPU's formula gives NaN";
  EXPECT_TRUE(std::isnan(lps[6])) << "+inf max: the CPU's formula gives NaN";
}

TEST(CudaSamplingTest, ArgMaxManyRowsAndSmallVocabularies) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(2);
  for (int64_t v : {1, 2, 31, 1000, 4097, 50000}) {
    for (int rows : {1, 3, 300}) {
      std::vector<float> x(rows * v);
      std::uniform_int_distribution<int> d(-20, 20);  // few distinct values: many ties
      for (float& l : x) l = 0.25f * d(rng);
      DeviceBuffer d_x = DeviceBuffer::FromHost(x);
      const size_t scratch_bytes = cuda::ArgMaxScratchBytes(ctx, rows, v);
      DeviceBuffer scratch(std::max<size_t>(scratch_bytes, 16));
      DeviceBuffer d_ids(rows * 4);
      d_ids.Fill(0xFF);
      cuda::ArgMax(ctx, d_ids.as<int32_t>(), nullptr, d_x.View(DType::kF32, {rows, v}),
                   scratch.data(), scratch.size());
      ctx.cuda().Synchronize();
      const std::vector<int32_t> ids = d_ids.ToHost<int32_t>(rows);
      for (int r = 0; r < rows; ++r) {
        ASSERT_EQ(ids[r], HostArgMax(&x[r * v], v))
            << "V " << v << " rows " << rows << " row " << r;
      }
    }
  }
}

// ---- Sample ----

TEST(CudaSamplingTest, SampleCoversTheLargestVocabulary) {
  UP_CUDA_TEST_CONTEXT(ctx);
  EXPECT_GE(cuda::MaxSampleVocab(ctx), 262144 + 7);
}

TEST(CudaSamplingTest, SampleMatchesCpuOnPeakedLogits) {
  UP_CUDA_TEST_CONTEXT(ctx);
  CompareFamily(ctx, Family::kPeaked, 1000, 2, 64, 10, 0.75);
  CompareFamily(ctx, Family::kPeaked, 32000, 2, 64, 11, 0.75);
  CompareFamily(ctx, Family::kPeaked, 262144, 2, 64, 12, 0.75);
}

TEST(CudaSamplingTest, SampleMatchesCpuOnFlatLogits) {
  UP_CUDA_TEST_CONTEXT(ctx);
  CompareFamily(ctx, Family::kFlat, 20000, 2, 64, 20, 0.5);
  CompareFamily(ctx, Family::kFlat, 262144 + 7, 1, 64, 21, 0.2);
}

TEST(CudaSamplingTest, SampleMatchesCpuOnQuantisedLogitsWithManyTies) {
  UP_CUDA_TEST_CONTEXT(ctx);
  CompareFamily(ctx, Family::kQuantised, 5000, 2, 64, 30, 0.5);
  CompareFamily(ctx, Family::kQuantised, 262144, 1, 64, 31, 0.2);
}

// Draws exactly where every cumulative boundary is far from the uniforms.
std::vector<int32_t> SampleRows(DeviceContext& ctx, const std::vector<float>& x, int rows,
                                int64_t v, const std::vector<SamplingRow>& params,
                                const std::vector<float>& u) {
  DeviceBuffer d_x = DeviceBuffer::FromHost(x);
  DeviceBuffer d_rows = DeviceBuffer::FromHost(params);
  DeviceBuffer d_u = DeviceBuffer::FromHost(u);
  DeviceBuffer d_ids(rows * 4);
  d_ids.Fill(0xFF);
  cuda::Sample(ctx, d_ids.as<int32_t>(), nullptr, d_x.View(DType::kF32, {rows, v}),
               d_rows.as<SamplingRow>(), d_u.as<float>());
  ctx.cuda().Synchronize();
  return d_ids.ToHost<int32_t>(rows);
}

TEST(CudaSamplingTest, DegenerateRowsFollowTheCpuRules) {
  UP_CUDA_TEST_CONTEXT(ctx);
  const int64_t v = 100;
  std::vector<float> x;
  std::vector<SamplingRow> params;
  std::vector<float> u;
  std::vector<int32_t> want;
  const SamplingRow plain{1.0f, 0, 1.0f, 0.0f};
  // All -inf: the CPU's softmax has no weight, the first maximal token (id 0) takes it.
  x.insert(x.end(), v, kNegInf);
  params.push_back(plain);
  u.push_back(0.7f);
  want.push_back(0);
  // +inf twice: the first of them in the CPU's order (lower id).
  std::vector<float> row(v, 1.0f);
  row[40] = kPosInf;
  row[12] = kPosInf;
  x.insert(x.end(), row.begin(), row.end());
  params.push_back(plain);
  u.push_back(0.9f);
  want.push_back(12);
  // NaN everywhere but two tokens: NaN counts as -inf (no weight).
  row.assign(v, std::numeric_limits<float>::quiet_NaN());
  row[30] = 0.0f;
  row[60] = 0.0f;
  x.insert(x.end(), row.begin(), row.end());
  params.push_back(plain);
  u.push_back(0.75f);
  want.push_back(60);
  // min_p = 1 keeps the three tied maxima; the draw walks them in id order.
  for (float uu : {0.1f, 0.5f, 0.9f}) {
    row.assign(v, -3.0f);
    row[70] = row[5] = row[33] = 2.0f;
    x.insert(x.end(), row.begin(), row.end());
    params.push_back({1.0f, 0, 1.0f, 1.0f});
    u.push_back(uu);
  }
  want.insert(want.end(), {5, 33, 70});
  // The same with top-p on: sorted order, ties by id (the same here).
  row.assign(v, -30.0f);
  row[70] = row[5] = row[33] = 2.0f;
  x.insert(x.end(), row.begin(), row.end());
  params.push_back({1.0f, 0, 0.99f, 0.0f});
  u.push_back(0.5f);
  want.push_back(33);
  // Temperature 0 is greedy whatever the uniform.
  row.assign(v, 0.0f);
  row[99] = 0.5f;
  x.insert(x.end(), row.begin(), row.end());
  params.push_back({0.0f, 0, 1.0f, 0.0f});
  u.push_back(0.0f);
  want.push_back(99);
  // u = 0 draws the first token with weight (id order without top-k / top-p).
  row.assign(v, kNegInf);
  row[17] = 1.0f;
  row[3] = 1.0f;
  x.insert(x.end(), row.begin(), row.end());
  params.push_back(plain);
  u.push_back(0.0f);
  want.push_back(3);
  const int rows = static_cast<int>(params.size());
  const std::vector<int32_t> ids = SampleRows(ctx, x, rows, v, params, u);
  for (int r = 0; r < rows; ++r) {
    EXPECT_EQ(ids[r], want[r]) << "row " << r;
    // The CPU sampler agrees with the expectation.
    const std::vector<float> logits(x.begin() + r * v, x.begin() + (r + 1) * v);
    EXPECT_EQ(WalkDistribution(Sampler(ConfigOf(params[r])).Distribution(logits), u[r]).id, want[r])
        << "CPU, row " << r;
  }
  // V = 1: always token 0.
  const std::vector<int32_t> one = SampleRows(
      ctx, {3.0f, -1.0f}, 2, 1, {{1.0f, 0, 0.5f, 0.5f}, {0.7f, 5, 1.0f, 0.0f}}, {0.99f, 0.3f});
  EXPECT_EQ(one[0], 0);
  EXPECT_EQ(one[1], 0);
}

TEST(CudaSamplingTest, MixedBatchOfConfigsAndStridedRows) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(40);
  const int64_t v = 32000, stride = v + 3;
  const std::vector<SamplingRow>& configs = Configs();
  const int rows = static_cast<int>(configs.size()) * 2;
  std::vector<float> x(rows * stride, 1e30f);  // padding would win any draw it leaked into
  std::vector<SamplingRow> params(rows);
  std::vector<float> u(rows);
  std::vector<std::vector<float>> logits(rows);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  for (int r = 0; r < rows; ++r) {
    logits[r] = MakeLogits(r % 2 ? Family::kPeaked : Family::kFlat, v, rng);
    std::copy(logits[r].begin(), logits[r].end(), x.begin() + r * stride);
    params[r] = configs[r / 2];
    u[r] = ud(rng);
  }
  DeviceBuffer d_x = DeviceBuffer::FromHost(x);
  DeviceBuffer d_rows = DeviceBuffer::FromHost(params);
  DeviceBuffer d_u = DeviceBuffer::FromHost(u);
  DeviceBuffer d_ids(rows * 4);
  d_ids.Fill(0xFF);
  TensorView view = TensorView::Contiguous(d_x.data(), DType::kF32, {rows, v}, Device::kCuda);
  view.stride[0] = stride;
  cuda::Sample(ctx, d_ids.as<int32_t>(), nullptr, view, d_rows.as<SamplingRow>(), d_u.as<float>());
  ctx.cuda().Synchronize();
  const std::vector<int32_t> ids = d_ids.ToHost<int32_t>(rows);
  int decided = 0;
  for (int r = 0; r < rows; ++r) {
    ASSERT_GE(ids[r], 0);
    ASSERT_LT(ids[r], v);
    const CpuDraw want =
        WalkDistribution(Sampler(ConfigOf(params[r])).Distribution(logits[r]), u[r]);
    if (std::min(want.margin, TopPMargin(logits[r], params[r])) < kTol) continue;
    ++decided;
    EXPECT_EQ(ids[r], want.id) << "row " << r << " " << Describe(params[r]) << " u " << u[r];
  }
  EXPECT_GE(decided, rows / 2);
}

// The time of ArgMax and Sample on V = 262144 rows (distinct rows, so every row is read from
// memory), one warm-up and 5 timed calls each, printed for the performance notes. "flat" rows make
// top-p keep ~230K tokens: the multi-pass worst case. A report, not a speed test (no thresholds):
// what it asserts is that every timed call computed the right thing (the times would mean nothing
// otherwise) and that each time is a finite positive number:
// - ArgMax: every row's id equals the host argmax, its logprob the engine's formula;
// - greedy Sample: every row's id equals the host argmax;
// - the other Sample configs: every id is a valid index, and the first and last rows' draws equal
//   the CPU sampler's (Sampler::Distribution walked with the same u) when the decision is not
//   within kTol of a boundary (as in CompareRow; the host sort of 262144 logits limits the rows).
TEST(CudaSamplingTest, TimingReport) {
  UP_CUDA_TEST_CONTEXT(ctx);
  const int64_t v = 262144;
  for (int rows : {1, 64}) {
    for (Family f : {Family::kPeaked, Family::kFlat}) {
      std::mt19937 rng(50);
      std::vector<float> x;
      x.reserve(rows * v);
      const std::vector<float> base = MakeLogits(f, v, rng);
      for (int r = 0; r < rows; ++r) {  // distinct rows: rotated copies
        x.insert(x.end(), base.begin() + (r * 4099) % v, base.end());
        x.insert(x.end(), base.begin(), base.begin() + (r * 4099) % v);
      }
      DeviceBuffer d_x = DeviceBuffer::FromHost(x);
      const TensorView view = d_x.View(DType::kF32, {rows, v});
      DeviceBuffer d_ids(rows * 4), d_lp(rows * 4);
      std::vector<float> u(rows);
      for (int r = 0; r < rows; ++r) u[r] = (r + 0.5f) / rows;
      DeviceBuffer d_u = DeviceBuffer::FromHost(u);
      const size_t scratch_bytes = cuda::ArgMaxScratchBytes(ctx, rows, v);
      DeviceBuffer scratch(std::max<size_t>(scratch_bytes, 16));
      std::ostringstream shape;
      shape << rows << " x " << v << " " << FamilyName(f) << " logits";
      // Times `run` (printed), then returns the ids of its last call (-1 where nothing was written).
      const auto time = [&](const char* what, const std::function<void()>& run) {
        d_ids.Fill(0xFF);
        const double ms = ::uniprefill::testing::MeanCudaMs(ctx, 5, run);
        std::printf("[ timing ] %s, %s: %.1f us\n", what, shape.str().c_str(), 1000.0 * ms);
        EXPECT_TRUE(std::isfinite(ms) && ms > 0.0) << what << ", " << shape.str() << ": " << ms;
        ctx.cuda().Synchronize();
        return d_ids.ToHost<int32_t>(rows);
      };
      const auto row_of = [&](int r) {
        return std::vector<float>(x.begin() + r * v, x.begin() + (r + 1) * v);
      };

      const std::vector<int32_t> argmax = time("ArgMax with logprobs", [&] {
        cuda::ArgMax(ctx, d_ids.as<int32_t>(), d_lp.as<float>(), view, scratch.data(),
                     scratch.size());
      });
      const std::vector<float> lps = d_lp.ToHost<float>(rows);
      std::vector<int32_t> host_argmax(rows);
      for (int r = 0; r < rows; ++r) {
        host_argmax[r] = HostArgMax(&x[r * v], v);
        EXPECT_EQ(argmax[r], host_argmax[r]) << "ArgMax, " << shape.str() << ", row " << r;
        EXPECT_NEAR(lps[r], HostLogProb(&x[r * v], v, host_argmax[r]), 1e-4)
            << "ArgMax logprob, " << shape.str() << ", row " << r;
      }
      const std::pair<const char*, SamplingRow> configs[] = {
          {"Sample greedy", {0.0f, 0, 1.0f, 0.0f}},
          {"Sample T 1 (id order)", {1.0f, 0, 1.0f, 0.0f}},
          {"Sample T 0.7 top-k 40 top-p 0.95", {0.7f, 40, 0.95f, 0.0f}},
          {"Sample T 1 top-p 0.9", {1.0f, 0, 0.9f, 0.0f}},
          {"Sample T 1 top-k 5000 min-p 0.05", {1.0f, 5000, 1.0f, 0.05f}},
      };
      for (const auto& [name, row] : configs) {
        DeviceBuffer d_rows = DeviceBuffer::FromHost(std::vector<SamplingRow>(rows, row));
        const std::vector<int32_t> ids = time(name, [&] {
          cuda::Sample(ctx, d_ids.as<int32_t>(), nullptr, view, d_rows.as<SamplingRow>(),
                       d_u.as<float>());
        });
        const std::string what = std::string(name) + ", " + shape.str();
        for (int r = 0; r < rows; ++r) {
          ASSERT_GE(ids[r], 0) << what << ", row " << r;
          ASSERT_LT(ids[r], v) << what << ", row " << r;
          if (!(row.temperature > 0.0f)) {
            EXPECT_EQ(ids[r], host_argmax[r]) << what << ", row " << r;
          }
        }
        if (!(row.temperature > 0.0f)) continue;
        const std::vector<int> checked = rows > 1 ? std::vector<int>{0, rows - 1}
                                                  : std::vector<int>{0};
        for (int r : checked) {
          const std::vector<float> logits = row_of(r);
          const CpuDraw want =
              WalkDistribution(Sampler(ConfigOf(row)).Distribution(logits), u[r]);
          if (std::min(want.margin, TopPMargin(logits, row)) < kTol) {
            std::printf("[ timing ] %s, row %d: within %.0e of a boundary, not compared\n",
                        what.c_str(), r, kTol);
            continue;
          }
          EXPECT_EQ(ids[r], want.id) << what << ", row " << r << ", u " << u[r];
        }
      }
    }
  }
}

}  // namespace
}  // namespace uniprefill::ops
