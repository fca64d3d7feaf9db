// CUDA FlashAttention vs the CPU ops::Attention, run per sequence on the same bf16-rounded inputs:
// head dims 64/128/256, GQA ratios 1/4/8, lengths around the tile sizes, packed batches, sliding
// windows, gapped positions, fewer queries than keys (chunked prefill, decode), queries with no
// visible key (exact zeros), q/k/v as column slices of one fused buffer with a strided out, and
// bit-identical repeats. Every run poisons the output with NaN (0xFFFF) first, so an unwritten
// element fails. DISABLED_Throughput* measures TFLOP/s at 32K (run it with
// --gtest_also_run_disabled_tests).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "ops/cuda/cuda_attention.h"
#include "ops/ops.h"
#include "testing/cuda_test_util.h"

namespace uniprefill::ops::cuda {
namespace {

using ::uniprefill::testing::Bf16BitsToF32;
using ::uniprefill::testing::F32ToBf16Bits;
using ::uniprefill::testing::RelativeL2Error;
using ::uniprefill::testing::RandomBf16Values;
using ::uniprefill::testing::ToBf16;

// bf16 output vs the f32 CPU reference on the same inputs: P is rounded to bf16 for the P V MMA
// and the output to bf16, so the normalised error is ~3e-3; 1e-2 leaves margin, while a wrong
// mask, a missed tile or a bad fragment index gives O(1).
constexpr double kTolerance = 1e-2;

// One sequence's positions (ascending): queries are rows of q, keys rows of k and v.
struct Sequence {
  std::vector<int32_t> q_pos, k_pos;
};

struct Problem {
  int hq = 8, hkv = 8, d = 128;
  AttentionParams params;
  std::vector<Sequence> seqs;
  // q, k, v are column slices of one bf16 [T, (Hq + 2 Hkv) D + 8] buffer (the extra columns are
  // NaN, so reading them shows), and out rows have stride Hq D + 24 (the extra columns must stay
  // untouched). Needs as many queries as keys per sequence.
  bool fused = false;
  float q_range = 1.0f;  // q values in [-q_range, q_range)
};

// n ascending positions from `start`, consecutive ones max_gap apart at most (1: no gaps).
std::vector<int32_t> GappedPositions(std::mt19937& rng, int n, int max_gap, int32_t start = 0) {
  std::uniform_int_distribution<int32_t> gap(1, max_gap);
  std::vector<int32_t> pos(n);
  int32_t p = start;
  for (int i = 0; i < n; ++i) {
    pos[i] = p;
    p += gap(rng);
  }
  return pos;
}

// A prefill (tq == tk) or a chunk / decode step against a longer cache: the queries are the last
// tq keys (their positions are the largest).
Sequence LastRows(std::mt19937& rng, int tq, int tk, int max_gap = 1) {
  Sequence s;
  s.k_pos = GappedPositions(rng, tk, max_gap, std::uniform_int_distribution<int32_t>(0, 5)(rng));
  s.q_pos.assign(s.k_pos.end() - tq, s.k_pos.end());
  return s;
}

// tq distinct query positions anywhere in [0, last key + 4): some before the first key, some in
// gaps, so some rows may see no key at all.
Sequence RandomQueries(std::mt19937& rng, int tq, int tk, int max_gap) {
  Sequence s;
  s.k_pos = GappedPositions(rng, tk, max_gap, 3);
  std::uniform_int_distribution<int32_t> any(0, s.k_pos.back() + 3);
  std::set<int32_t> picked;
  while (static_cast<int>(picked.size()) < tq) picked.insert(any(rng));
  s.q_pos.assign(picked.begin(), picked.end());
  return s;
}

std::string Describe(const Problem& p) {
  std::ostringstream os;
  os << "D " << p.d << " Hq " << p.hq << " Hkv " << p.hkv << " window " << p.params.window
     << (p.fused ? " fused" : "") << " seqs (tq, tk):";
  for (const Sequence& s : p.seqs) os << " (" << s.q_pos.size() << ", " << s.k_pos.size() << ")";
  return os.str();
}

// A bf16 [t, h, d] device view at `base` + offset elements with row stride `row`.
TensorView DeviceView(const DeviceBuffer& buf, int64_t offset, int64_t t, int64_t h, int64_t d,
                      int64_t row) {
  TensorView v =
      TensorView::Contiguous(buf.as<uint16_t>() + offset, DType::kBF16, {t, h, d}, Device::kCuda);
  v.stride[0] = row;
  return v;
}

struct Outcome {
  std::vector<uint16_t> out;  // the raw output buffer, [Tq, out row stride] bf16 bits
  int empty_rows = 0;         // queries with no visible key (checked to be exactly zero)
};

// Runs FlashAttention on p with random inputs drawn from `seed`, checks it against the CPU
// ops::Attention per sequence, and returns the raw output.
Outcome RunAndCheck(DeviceContext& gpu, DeviceContext& cpu, const Problem& p, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t hq = p.hq, hkv = p.hkv, d = p.d;
  std::vector<int32_t> cu_q{0}, cu_k{0}, q_pos, k_pos;
  int max_q = 0, max_k = 0;
  for (const Sequence& s : p.seqs) {
    cu_q.push_back(cu_q.back() + static_cast<int32_t>(s.q_pos.size()));
    cu_k.push_back(cu_k.back() + static_cast<int32_t>(s.k_pos.size()));
    q_pos.insert(q_pos.end(), s.q_pos.begin(), s.q_pos.end());
    k_pos.insert(k_pos.end(), s.k_pos.begin(), s.k_pos.end());
    max_q = std::max(max_q, static_cast<int>(s.q_pos.size()));
    max_k = std::max(max_k, static_cast<int>(s.k_pos.size()));
  }
  const int64_t tq = cu_q.back(), tk = cu_k.back();
  // f32 [Tq, Hq, D], [Tk, Hkv, D] x 2, all bf16-representable.
  const std::vector<float> q = RandomBf16Values(rng, tq * hq * d, -p.q_range, p.q_range);
  const std::vector<float> k = RandomBf16Values(rng, tk * hkv * d);
  const std::vector<float> v = RandomBf16Values(rng, tk * hkv * d);

  // Device layout: either q | k | v one after the other, or one fused [T, ld] buffer.
  int64_t q_row = hq * d, k_row = hkv * d, v_row = hkv * d, o_row = hq * d;
  int64_t q_off = 0, k_off = tq * hq * d, v_off = k_off + tk * hkv * d;
  std::vector<uint16_t> in;
  if (p.fused) {
    EXPECT_EQ(tq, tk) << "a fused QKV buffer has one row per token";
    const int64_t ld = (hq + 2 * hkv) * d + 8;
    q_row = k_row = v_row = ld;
    k_off = hq * d;
    v_off = (hq + hkv) * d;
    o_row = hq * d + 24;
    in.assign(tq * ld, 0xFFFF);  // NaN in the 8 columns nobody may read
    for (int64_t t = 0; t < tq; ++t) {
      for (int64_t e = 0; e < hq * d; ++e) in[t * ld + e] = F32ToBf16Bits(q[t * hq * d + e]);
      for (int64_t e = 0; e < hkv * d; ++e) {
        in[t * ld + k_off + e] = F32ToBf16Bits(k[t * hkv * d + e]);
        in[t * ld + v_off + e] = F32ToBf16Bits(v[t * hkv * d + e]);
      }
    }
  } else {
    for (const std::vector<float>* part : {&q, &k, &v}) {
      const std::vector<uint16_t> bits = ToBf16(*part);
      in.insert(in.end(), bits.begin(), bits.end());
    }
  }
  const DeviceBuffer in_dev = DeviceBuffer::FromHost(in);
  DeviceBuffer out_dev(tq * o_row * sizeof(uint16_t));
  out_dev.Fill(0xFF);  // bf16 0xFFFF is NaN: any element left unwritten fails
  const DeviceBuffer q_pos_dev = DeviceBuffer::FromHost(q_pos);
  const DeviceBuffer k_pos_dev = DeviceBuffer::FromHost(k_pos);
  const DeviceBuffer cu_q_dev = DeviceBuffer::FromHost(cu_q);
  const DeviceBuffer cu_k_dev = DeviceBuffer::FromHost(cu_k);
  // The copies and the fill run on the legacy stream, which does not order with the context's
  // non-blocking stream.
  UP_CUDA_CHECK(cudaDeviceSynchronize());

  VarlenBatch batch;
  batch.cu_seqlens_q = cu_q_dev.as<int32_t>();
  batch.cu_seqlens_k = cu_k_dev.as<int32_t>();
  batch.batch = static_cast<int>(p.seqs.size());
  batch.max_seqlen_q = max_q;
  batch.max_seqlen_k = max_k;
  FlashAttention(
      gpu, DeviceView(out_dev, 0, tq, hq, d, o_row), DeviceView(in_dev, q_off, tq, hq, d, q_row),
      DeviceView(in_dev, k_off, tk, hkv, d, k_row), DeviceView(in_dev, v_off, tk, hkv, d, v_row),
      q_pos_dev.as<int32_t>(), k_pos_dev.as<int32_t>(), batch, p.params);
  gpu.cuda().Synchronize();
  Outcome result;
  result.out = out_dev.ToHost<uint16_t>(tq * o_row);

  // CPU reference, one sequence at a time: f32 [Tq, Hq, D].
  std::vector<float> ref(tq * hq * d, 0.0f);
  for (size_t b = 0; b < p.seqs.size(); ++b) {
    const int64_t q0 = cu_q[b], nq = cu_q[b + 1] - q0, k0 = cu_k[b], nk = cu_k[b + 1] - k0;
    if (nq == 0) continue;
    auto host = [](const std::vector<float>& x, int64_t row0, int64_t n, int64_t h, int64_t dd) {
      return TensorView::Contiguous(const_cast<float*>(x.data()) + row0 * h * dd, DType::kF32,
                                    {n, h, dd});
    };
    ::uniprefill::ops::Attention(cpu, host(ref, q0, nq, hq, d), host(q, q0, nq, hq, d),
                                 host(k, k0, nk, hkv, d), host(v, k0, nk, hkv, d),
                                 q_pos.data() + q0, k_pos.data() + k0, p.params);
  }

  std::vector<float> got(tq * hq * d);
  for (int64_t t = 0; t < tq; ++t) {
    for (int64_t e = 0; e < hq * d; ++e)
      got[t * hq * d + e] = Bf16BitsToF32(result.out[t * o_row + e]);
  }
  EXPECT_LT(RelativeL2Error(got, ref), kTolerance) << Describe(p);

  // A query with no visible key must give exact zeros (not NaN, not a stale or uniform average).
  int bad_zero_rows = 0;
  for (size_t b = 0; b < p.seqs.size(); ++b) {
    for (int32_t i = cu_q[b]; i < cu_q[b + 1]; ++i) {
      bool any = false;
      for (int32_t j = cu_k[b]; j < cu_k[b + 1] && !any; ++j) {
        any =
            k_pos[j] <= q_pos[i] && (p.params.window == 0 || k_pos[j] > q_pos[i] - p.params.window);
      }
      if (any) continue;
      ++result.empty_rows;
      for (int64_t e = 0; e < hq * d; ++e) {
        if (result.out[i * o_row + e] != 0) {  // +0.0 exactly
          ++bad_zero_rows;
          break;
        }
      }
    }
  }
  EXPECT_EQ(bad_zero_rows, 0) << "rows with no visible key must be exactly zero; " << Describe(p);

  if (p.fused) {  // the columns past Hq * D of each out row stay poisoned
    int64_t touched = 0;
    for (int64_t t = 0; t < tq; ++t) {
      for (int64_t e = hq * d; e < o_row; ++e) touched += result.out[t * o_row + e] != 0xFFFF;
    }
    EXPECT_EQ(touched, 0) << "wrote past Hq * D in an out row; " << Describe(p);
  }
  return result;
}

Problem MakeProblem(int d, int hq, int hkv, int window, std::vector<Sequence> seqs) {
  Problem p;
  p.d = d;
  p.hq = hq;
  p.hkv = hkv;
  p.params.scale = 1.0f / std::sqrt(static_cast<float>(d));
  p.params.window = window;
  p.seqs = std::move(seqs);
  return p;
}

constexpr int kHeadDims[] = {64, 128, 256};
// GQA ratios 1, 4, 8.
constexpr std::pair<int, int> kHeads[] = {{8, 8}, {8, 2}, {16, 2}};

class CudaFlashAttentionTest : public ::testing::Test {
 protected:
  std::unique_ptr<DeviceContext> cpu_ = DeviceContext::Cpu(2);
  uint32_t seed_ = 1000;  // each case draws from its own seed
};

TEST_F(CudaFlashAttentionTest, SingleSequencesMatchCpuAcrossHeadDimsGqaAndLengths) {
  UP_CUDA_TEST_CONTEXT(ctx);
  for (int d : kHeadDims) {
    for (auto [hq, hkv] : kHeads) {
      for (int t : {1, 17, 63, 64, 65, 129, 300, 1000}) {
        std::mt19937 rng(++seed_);
        RunAndCheck(ctx, *cpu_, MakeProblem(d, hq, hkv, 0, {LastRows(rng, t, t)}), seed_);
      }
    }
  }
}

TEST_F(CudaFlashAttentionTest, PackedBatchOfDifferentLengthsMatchesCpu) {
  UP_CUDA_TEST_CONTEXT(ctx);
  for (int d : kHeadDims) {
    for (auto [hq, hkv] : kHeads) {
      std::mt19937 rng(++seed_);
      std::vector<Sequence> seqs;
      for (int t : {300, 1, 64, 1000, 17, 129, 63, 65}) seqs.push_back(LastRows(rng, t, t));
      RunAndCheck(ctx, *cpu_, MakeProblem(d, hq, hkv, 0, std::move(seqs)), seed_);
    }
  }
}

TEST_F(CudaFlashAttentionTest, SlidingWindowsMatchCpu) {
  UP_CUDA_TEST_CONTEXT(ctx);
  for (int d : kHeadDims) {
    for (int window : {16, 100}) {
      for (auto [hq, hkv] : kHeads) {
        std::mt19937 rng(++seed_);
        std::vector<Sequence> seqs;
        for (int t : {1000, 17, 129, 300, 1}) seqs.push_back(LastRows(rng, t, t));
        RunAndCheck(ctx, *cpu_, MakeProblem(d, hq, hkv, window, std::move(seqs)), seed_);
      }
    }
  }
}

TEST_F(CudaFlashAttentionTest, GappedPositionsMatchCpu) {
  // After a UniPrefill drop positions are the kept tokens' original ones: gaps of 1..7.
  UP_CUDA_TEST_CONTEXT(ctx);
  for (int d : kHeadDims) {
    for (int window : {0, 16, 100}) {
      std::mt19937 rng(++seed_);
      std::vector<Sequence> seqs;
      for (int t : {65, 1000, 300, 64}) seqs.push_back(LastRows(rng, t, t, /*max_gap=*/7));
      RunAndCheck(ctx, *cpu_, MakeProblem(d, 8, 2, window, std::move(seqs)), seed_);
    }
  }
}

TEST_F(CudaFlashAttentionTest, ChunksAndDecodeStepsAgainstLongerKeysMatchCpu) {
  // Fewer queries than keys: the queries are the last rows (a prefill chunk against a cache, or
  // a single decode query), packed together with a plain prefill.
  UP_CUDA_TEST_CONTEXT(ctx);
  for (int d : kHeadDims) {
    for (int window : {0, 100}) {
      for (int max_gap : {1, 4}) {
        std::mt19937 rng(++seed_);
        std::vector<Sequence> seqs;
        for (auto [tq, tk] :
             {std::pair{1, 1000}, {17, 300}, {1, 1}, {64, 129}, {130, 1000}, {1, 65}, {200, 200}}) {
          seqs.push_back(LastRows(rng, tq, tk, max_gap));
        }
        RunAndCheck(ctx, *cpu_, MakeProblem(d, 16, 2, window, std::move(seqs)), seed_);
      }
    }
  }
}

TEST_F(CudaFlashAttentionTest, DecodeOnlyBatchMatchesCpu) {
  UP_CUDA_TEST_CONTEXT(ctx);
  for (int d : kHeadDims) {
    std::mt19937 rng(++seed_);
    std::vector<Sequence> seqs;
    for (int tk : {1, 7, 64, 65, 500, 1000}) seqs.push_back(LastRows(rng, 1, tk, 3));
    RunAndCheck(ctx, *cpu_, MakeProblem(d, 8, 2, 0, std::move(seqs)), seed_);
  }
}

TEST_F(CudaFlashAttentionTest, QueriesAnywhereAmongGappedKeysMatchCpu) {
  // Query positions independent of the keys' (before the first key, inside gaps, past the last):
  // per-row visible ranges of every shape, including empty ones.
  UP_CUDA_TEST_CONTEXT(ctx);
  for (int d : kHeadDims) {
    for (int window : {0, 16}) {
      std::mt19937 rng(++seed_);
      std::vector<Sequence> seqs;
      for (auto [tq, tk] : {std::pair{200, 300}, {1, 50}, {64, 64}, {300, 129}}) {
        seqs.push_back(RandomQueries(rng, tq, tk, 20));
      }
      RunAndCheck(ctx, *cpu_, MakeProblem(d, 8, 2, window, std::move(seqs)), seed_);
    }
  }
}

TEST_F(CudaFlashAttentionTest, QueryWithNoVisibleKeyGivesExactZeros) {
  // Keys at 0..63 and 200..263; queries at 60..123 with a window of 16: queries 60..78 still
  // see some of the first block, 79..123 see nothing (the gap is wider than the window).
  UP_CUDA_TEST_CONTEXT(ctx);
  Sequence s;
  for (int32_t p = 0; p < 64; ++p) s.k_pos.push_back(p);
  for (int32_t p = 200; p < 264; ++p) s.k_pos.push_back(p);
  for (int32_t p = 60; p < 124; ++p) s.q_pos.push_back(p);
  for (int d : kHeadDims) {
    const Outcome r = RunAndCheck(ctx, *cpu_, MakeProblem(d, 8, 2, 16, {s}), ++seed_);
    EXPECT_EQ(r.empty_rows, 124 - 79) << "D " << d;
  }
}

TEST_F(CudaFlashAttentionTest, FusedQkvColumnSlicesWithStridedOutMatchCpu) {
  UP_CUDA_TEST_CONTEXT(ctx);
  for (int d : kHeadDims) {
    for (auto [hq, hkv] : kHeads) {
      std::mt19937 rng(++seed_);
      std::vector<Sequence> seqs;
      for (int t : {129, 1, 300, 64}) seqs.push_back(LastRows(rng, t, t, 2));
      Problem p = MakeProblem(d, hq, hkv, 100, std::move(seqs));
      p.fused = true;
      RunAndCheck(ctx, *cpu_, p, seed_);
    }
  }
}

TEST_F(CudaFlashAttentionTest, PeakedSoftmaxMatchesCpu) {
  // Larger scores (q in [-4, 4), scale 2 / sqrt(D)): the running max moves often and most
  // probabilities underflow, which exercises the rescaling of O.
  UP_CUDA_TEST_CONTEXT(ctx);
  for (int d : kHeadDims) {
    std::mt19937 rng(++seed_);
    std::vector<Sequence> seqs;
    for (int t : {1000, 65}) seqs.push_back(LastRows(rng, t, t));
    Problem p = MakeProblem(d, 8, 2, 0, std::move(seqs));
    p.q_range = 4.0f;
    p.params.scale = 2.0f / std::sqrt(static_cast<float>(d));
    RunAndCheck(ctx, *cpu_, p, seed_);
  }
}

TEST_F(CudaFlashAttentionTest, RepeatedRunsAreBitIdentical) {
  UP_CUDA_TEST_CONTEXT(ctx);
  for (int d : kHeadDims) {
    std::mt19937 rng(++seed_);
    std::vector<Sequence> seqs;
    for (auto [tq, tk] : {std::pair{1000, 1000}, {1, 300}, {129, 129}, {65, 400}}) {
      seqs.push_back(LastRows(rng, tq, tk, 3));
    }
    const Problem p = MakeProblem(d, 16, 2, 100, std::move(seqs));
    const Outcome first = RunAndCheck(ctx, *cpu_, p, seed_);
    const Outcome second = RunAndCheck(ctx, *cpu_, p, seed_);
    EXPECT_TRUE(first.out == second.out) << "two runs on the same inputs differ; D " << d;
  }
}

TEST_F(CudaFlashAttentionTest, UnsupportedHeadDimAbortsWithMessage) {
  UP_CUDA_TEST_CONTEXT(ctx);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  DeviceBuffer buf(4 * 96 * sizeof(uint16_t));
  const TensorView view = DeviceView(buf, 0, 4, 1, 96, 96);
  VarlenBatch batch;
  batch.batch = 1;
  batch.max_seqlen_q = batch.max_seqlen_k = 4;
  EXPECT_DEATH(FlashAttention(ctx, view, view, view, view, nullptr, nullptr, batch, {}),
               "head dim 96 is not supported");
}

// Causal prefill of one 32K sequence: TFLOP/s counting 4 * N^2 / 2 * D * Hq, plus a spot check
// of a few query rows (including the last) against the CPU.
TEST_F(CudaFlashAttentionTest, DISABLED_Throughput32kCausal) {
  UP_CUDA_TEST_CONTEXT(ctx);
  constexpr int kN = 32768;
  for (auto [d, hq, hkv] : {std::tuple{128, 32, 8}, {64, 32, 8}, {256, 16, 8}}) {
    std::mt19937 rng(++seed_);
    const std::vector<float> q = RandomBf16Values(rng, int64_t{kN} * hq * d);
    const std::vector<float> k = RandomBf16Values(rng, int64_t{kN} * hkv * d);
    const std::vector<float> v = RandomBf16Values(rng, int64_t{kN} * hkv * d);
    std::vector<int32_t> pos(kN);
    for (int i = 0; i < kN; ++i) pos[i] = i;
    const std::vector<int32_t> cu = {0, kN};
    const DeviceBuffer q_dev = DeviceBuffer::FromHost(ToBf16(q));
    const DeviceBuffer k_dev = DeviceBuffer::FromHost(ToBf16(k));
    const DeviceBuffer v_dev = DeviceBuffer::FromHost(ToBf16(v));
    const DeviceBuffer pos_dev = DeviceBuffer::FromHost(pos);
    const DeviceBuffer cu_dev = DeviceBuffer::FromHost(cu);
    DeviceBuffer out_dev(int64_t{kN} * hq * d * sizeof(uint16_t));
    out_dev.Fill(0xFF);
    UP_CUDA_CHECK(cudaDeviceSynchronize());
    VarlenBatch batch{cu_dev.as<int32_t>(), cu_dev.as<int32_t>(), 1, kN, kN};
    AttentionParams params;
    params.scale = 1.0f / std::sqrt(static_cast<float>(d));
    auto run = [&] {
      FlashAttention(ctx, DeviceView(out_dev, 0, kN, hq, d, int64_t{hq} * d),
                     DeviceView(q_dev, 0, kN, hq, d, int64_t{hq} * d),
                     DeviceView(k_dev, 0, kN, hkv, d, int64_t{hkv} * d),
                     DeviceView(v_dev, 0, kN, hkv, d, int64_t{hkv} * d), pos_dev.as<int32_t>(),
                     pos_dev.as<int32_t>(), batch, params);
    };
    const double seconds = ::uniprefill::testing::MeanCudaMs(ctx, 5, run) / 1e3;
    const double flops = 4.0 * kN * static_cast<double>(kN) / 2 * d * hq;
    std::printf("FlashAttention causal N %d D %d Hq %d Hkv %d: %.3f ms, %.1f TFLOP/s\n", kN, d, hq,
                hkv, seconds * 1e3, flops / seconds / 1e12);

    // Spot check: rows spread over the sequence, the last one included.
    const std::vector<uint16_t> out = out_dev.ToHost<uint16_t>(int64_t{kN} * hq * d);
    for (int row : {0, 1, 127, 128, 4095, 20000, kN - 65, kN - 1}) {
      std::vector<float> ref(hq * d), got(hq * d);
      TensorView rq = TensorView::Contiguous(const_cast<float*>(q.data()) + int64_t{row} * hq * d,
                                             DType::kF32, {1, hq, d});
      TensorView rk =
          TensorView::Contiguous(const_cast<float*>(k.data()), DType::kF32, {row + 1, hkv, d});
      TensorView rv =
          TensorView::Contiguous(const_cast<float*>(v.data()), DType::kF32, {row + 1, hkv, d});
      ::uniprefill::ops::Attention(*cpu_,
                                   TensorView::Contiguous(ref.data(), DType::kF32, {1, hq, d}), rq,
                                   rk, rv, pos.data() + row, pos.data(), params);
      for (int e = 0; e < hq * d; ++e) got[e] = Bf16BitsToF32(out[int64_t{row} * hq * d + e]);
      EXPECT_LT(RelativeL2Error(got, ref), kTolerance) << "row " << row << " D " << d;
    }
  }
}

}  // namespace
}  // namespace uniprefill::ops::cuda
