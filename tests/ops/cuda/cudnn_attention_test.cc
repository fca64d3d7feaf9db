// cuDNN's fused attention (ops/cuda/cudnn_attention.h) against the CPU ops::Attention and our
// FlashAttention on the same bf16 inputs, for every mask kind the CUDA backend hands it: causal and
// sliding windows (1, short, long, >= the length) over packed varlen batches whose q, k, v are
// column slices of one fused QKV buffer (NaN in the columns nobody may read), sequences ending in
// padding rows (seq_len < capacity), odd lengths, GQA, D 64 / 128 / 256; and queries over a cached
// prefix read from a KV-pool layout through block tables (RunPaged) or from contiguous rows
// (RunPrefix). Outputs start NaN-poisoned, so
// an unwritten element fails. DISABLED_* print TFLOP/s of cuDNN (per autotuned plan too) against
// ours (run them with --gtest_also_run_disabled_tests). Builds without cuDNN skip with one line;
// so does a machine without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "ops/cuda/cuda_attention.h"
#include "ops/cuda/cudnn_attention.h"
#include "ops/ops.h"
#include "testing/compare.h"
#include "testing/cuda_test_util.h"

namespace uniprefill::ops::cuda {
namespace {

using ::uniprefill::testing::Bf16BitsToF32;
using ::uniprefill::testing::F32ToBf16Bits;
using ::uniprefill::testing::RandomBf16Values;
using ::uniprefill::testing::RelativeL2Error;
using ::uniprefill::testing::ToBf16;

// bf16 outputs of an f32 softmax against the f32 CPU op: ~4e-3 normalised error; a wrong mask or a
// missed tile gives O(1).
constexpr double kTolerance = 1e-2;
constexpr uint16_t kNaN = 0xFFFF;  // bf16 NaN: the poison of unwritten elements

TensorView Rows(const DeviceBuffer& buf, int64_t offset, int64_t t, int64_t h, int64_t d,
                int64_t row_stride) {
  TensorView v =
      TensorView::Contiguous(buf.as<uint16_t>() + offset, DType::kBF16, {t, h, d}, Device::kCuda);
  v.stride[0] = row_stride;
  return v;
}

TensorView Host(const std::vector<float>& x, int64_t row0, int64_t n, int64_t h, int64_t d) {
  return TensorView::Contiguous(const_cast<float*>(x.data()) + row0 * h * d, DType::kF32,
                                {n, h, d});
}

#define UP_CUDNN_OR_SKIP(name, ctx, ...)                                                  \
  auto _up_cudnn = CudnnAttention::Create(ctx, ##__VA_ARGS__);                            \
  if (!_up_cudnn.ok()) GTEST_SKIP() << "no cuDNN: " << _up_cudnn.status().message();     \
  CudnnAttention& name = **_up_cudnn

// One self-attention problem: sequence b has capacity rows[b], the first real[b] of them real.
struct SelfCase {
  int d = 128, hq = 8, hkv = 2, window = 0;
  std::vector<int32_t> rows, real;
  int rows_bucket = 0;  // CudnnVarlen::rows_bucket (0: a power of two)
};

std::string Describe(const SelfCase& c) {
  std::ostringstream os;
  os << "D " << c.d << " heads " << c.hq << "/" << c.hkv << " window " << c.window << " seqs";
  for (size_t b = 0; b < c.rows.size(); ++b) os << " " << c.real[b] << "/" << c.rows[b];
  return os.str();
}

// The real rows of `out` bf16 [T, width] (first hq d columns) as f32, sequence after sequence.
std::vector<float> RealRows(const std::vector<uint16_t>& out, int64_t width, int64_t cols,
                            const std::vector<int32_t>& begin, const std::vector<int32_t>& real) {
  std::vector<float> got;
  for (size_t b = 0; b < real.size(); ++b) {
    for (int64_t t = begin[b]; t < begin[b] + real[b]; ++t) {
      for (int64_t e = 0; e < cols; ++e) got.push_back(Bf16BitsToF32(out[t * width + e]));
    }
  }
  return got;
}

// Runs cuDNN and FlashAttention on random inputs for c and checks both against the CPU op.
void CheckSelf(DeviceContext& ctx, DeviceContext& cpu, CudnnAttention& cudnn, const SelfCase& c,
               uint32_t seed) {
  const int64_t hq = c.hq, hkv = c.hkv, d = c.d, nseq = c.rows.size();
  std::vector<int32_t> begin{0};
  for (int32_t r : c.rows) begin.push_back(begin.back() + r);
  const int64_t T = begin.back(), qd = hq * d, kvd = hkv * d;
  const int64_t width = qd + 2 * kvd + 8;  // fused q | k | v | 8 NaN columns
  const int64_t o_width = qd + 8;           // out rows: 8 columns nobody may write
  std::mt19937 rng(seed);
  const std::vector<float> q = RandomBf16Values(rng, T * qd);
  const std::vector<float> k = RandomBf16Values(rng, T * kvd);
  const std::vector<float> v = RandomBf16Values(rng, T * kvd);
  std::vector<uint16_t> fused(T * width, kNaN);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = 0; e < qd; ++e) fused[t * width + e] = F32ToBf16Bits(q[t * qd + e]);
    for (int64_t e = 0; e < kvd; ++e) {
      fused[t * width + qd + e] = F32ToBf16Bits(k[t * kvd + e]);
      fused[t * width + qd + kvd + e] = F32ToBf16Bits(v[t * kvd + e]);
    }
  }
  const DeviceBuffer qkv = DeviceBuffer::FromHost(fused);
  DeviceBuffer out_cudnn(T * o_width * 2), out_ours(T * o_width * 2);
  out_cudnn.Fill(0xFF);
  out_ours.Fill(0xFF);
  AttentionParams params;
  params.scale = 1.0f / std::sqrt(static_cast<float>(d));
  params.window = c.window;
  const TensorView qv = Rows(qkv, 0, T, hq, d, width), kv = Rows(qkv, qd, T, hkv, d, width);
  const TensorView vv = Rows(qkv, qd + kvd, T, hkv, d, width);

  // Ours: row coordinates within each sequence; padding rows past every real one.
  std::vector<int32_t> coord(T);
  for (int64_t b = 0; b < nseq; ++b) {
    for (int32_t i = 0; i < c.rows[b]; ++i) coord[begin[b] + i] = i < c.real[b] ? i : 1 << 29;
  }
  const DeviceBuffer coord_dev = DeviceBuffer::FromHost(coord);
  const DeviceBuffer cu_dev = DeviceBuffer::FromHost(begin);
  const int max_rows = *std::max_element(c.rows.begin(), c.rows.end());
  UP_CUDA_CHECK(cudaDeviceSynchronize());  // the copies ran on the legacy stream
  VarlenBatch vb{cu_dev.as<int32_t>(), cu_dev.as<int32_t>(), static_cast<int>(nseq), max_rows,
                 max_rows};
  FlashAttention(ctx, Rows(out_ours, 0, T, hq, d, o_width), qv, kv, vv, coord_dev.as<int32_t>(),
                 coord_dev.as<int32_t>(), vb, params);

  const DeviceBuffer seq_dev = DeviceBuffer::FromHost(c.real);
  const DeviceBuffer in_off = DeviceBuffer::FromHost(RaggedOffsets(begin, width));
  const DeviceBuffer o_off = DeviceBuffer::FromHost(RaggedOffsets(begin, o_width));
  UP_CUDA_CHECK(cudaDeviceSynchronize());
  CudnnVarlen cb;
  cb.seq_len = seq_dev.as<int32_t>();
  cb.q_offsets = cb.k_offsets = cb.v_offsets = in_off.as<int32_t>();
  cb.o_offsets = o_off.as<int32_t>();
  cb.batch = static_cast<int>(nseq);
  cb.max_rows = max_rows;
  cb.rows_bucket = c.rows_bucket;
  const Status st = cudnn.Run(ctx, Rows(out_cudnn, 0, T, hq, d, o_width), qv, kv, vv, cb, params);
  ASSERT_TRUE(st.ok()) << Describe(c) << ": " << st.message();
  UP_CUDA_CHECK(cudaStreamSynchronize(ctx.cuda().stream()));

  // CPU reference, one sequence at a time over its real rows (coordinates 0..real-1).
  std::vector<float> ref;
  std::vector<int32_t> pos(max_rows);
  std::iota(pos.begin(), pos.end(), 0);
  for (int64_t b = 0; b < nseq; ++b) {
    std::vector<float> one(int64_t{c.real[b]} * qd);
    ::uniprefill::ops::Attention(cpu, Host(one, 0, c.real[b], hq, d),
                                 Host(q, begin[b], c.real[b], hq, d),
                                 Host(k, begin[b], c.real[b], hkv, d),
                                 Host(v, begin[b], c.real[b], hkv, d), pos.data(), pos.data(),
                                 params);
    ref.insert(ref.end(), one.begin(), one.end());
  }
  const std::vector<uint16_t> theirs_raw = out_cudnn.ToHost<uint16_t>(T * o_width);
  const std::vector<float> theirs = RealRows(theirs_raw, o_width, qd, begin, c.real);
  const std::vector<float> ours =
      RealRows(out_ours.ToHost<uint16_t>(T * o_width), o_width, qd, begin, c.real);
  const double err_cpu = RelativeL2Error(theirs, ref), err_ours = RelativeL2Error(theirs, ours);
  EXPECT_LT(err_cpu, kTolerance) << "cuDNN vs CPU, " << Describe(c);
  EXPECT_LT(err_ours, kTolerance) << "cuDNN vs FlashAttention, " << Describe(c);
  EXPECT_LT(RelativeL2Error(ours, ref), kTolerance) << "FlashAttention vs CPU, " << Describe(c);
  // The 8 columns past each output row belong to someone else.
  int touched = 0;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = qd; e < o_width; ++e) touched += theirs_raw[t * o_width + e] != kNaN;
  }
  EXPECT_EQ(touched, 0) << Describe(c);
  std::printf("%s: cuDNN vs CPU %.2e, vs ours %.2e\n", Describe(c).c_str(), err_cpu, err_ours);
}

class CudnnAttentionTest : public ::testing::Test {
 protected:
  std::unique_ptr<DeviceContext> cpu_ = DeviceContext::Cpu(4);
  uint32_t seed_ = 7000;
};

constexpr std::tuple<int, int, int> kShapes[] = {{128, 8, 2}, {64, 4, 4}, {256, 4, 2}};

TEST_F(CudnnAttentionTest, CausalMatchesCpuAndOursAcrossLengthsHeadDimsAndGqa) {
  UP_CUDA_TEST_CONTEXT(ctx);
  UP_CUDNN_OR_SKIP(cudnn, ctx);
  for (auto [d, hq, hkv] : kShapes) {
    for (int n : {1, 17, 64, 65, 129, 1000}) {
      CheckSelf(ctx, *cpu_, cudnn, SelfCase{d, hq, hkv, 0, {n}, {n}}, ++seed_);
    }
  }
  CheckSelf(ctx, *cpu_, cudnn, SelfCase{128, 16, 2, 0, {300}, {300}}, ++seed_);  // GQA 8
}

TEST_F(CudnnAttentionTest, PackedBatchesWithPaddingRowsMatchCpuAndOurs) {
  UP_CUDA_TEST_CONTEXT(ctx);
  UP_CUDNN_OR_SKIP(cudnn, ctx);
  for (auto [d, hq, hkv] : kShapes) {
    // 37 rows; 300; 160 of which 129 real (the sync-free drop's capacity); 1; 64 of which 5 real.
    CheckSelf(ctx, *cpu_, cudnn,
              SelfCase{d, hq, hkv, 0, {37, 300, 160, 1, 64}, {37, 300, 129, 1, 5}}, ++seed_);
  }
}

TEST_F(CudnnAttentionTest, SlidingWindowsMatchCpuAndOurs) {
  UP_CUDA_TEST_CONTEXT(ctx);
  UP_CUDNN_OR_SKIP(cudnn, ctx);
  for (auto [d, hq, hkv] : kShapes) {
    // 1: each row sees itself only; 7, 64, 250: bands inside the tiles and across them; 300 and
    // 5000: no shorter than the longest sequence (the causal graph's job).
    for (int window : {1, 7, 64, 250, 300, 5000}) {
      CheckSelf(ctx, *cpu_, cudnn,
                SelfCase{d, hq, hkv, window, {37, 300, 160, 1, 513}, {37, 300, 129, 1, 511}},
                ++seed_);
    }
  }
}

// A server's graphs (CudaBackend::PrepareServing) are built for its step budget, more rows than
// most chunks have: the same results, windows included; a bucket below a sequence is refused.
TEST_F(CudnnAttentionTest, GraphsForAStepBudgetMatchCpuAndOurs) {
  UP_CUDA_TEST_CONTEXT(ctx);
  UP_CUDNN_OR_SKIP(cudnn, ctx);
  for (auto [d, hq, hkv] : kShapes) {
    for (int window : {0, 7, 250}) {
      CheckSelf(ctx, *cpu_, cudnn, SelfCase{d, hq, hkv, window, {17}, {17}, 2000}, ++seed_);
      CheckSelf(ctx, *cpu_, cudnn, SelfCase{d, hq, hkv, window, {300}, {300}, 2000}, ++seed_);
    }
  }
  const int64_t n = 100, qd = 8 * 128, kvd = 2 * 128;
  DeviceBuffer buf(n * (qd + 2 * kvd) * 2 + n * qd * 2);
  CudnnVarlen cb;
  const DeviceBuffer seq_dev = DeviceBuffer::FromHost(std::vector<int32_t>{100});
  const DeviceBuffer off = DeviceBuffer::FromHost(std::vector<int32_t>{0, 0});
  cb.seq_len = seq_dev.as<int32_t>();
  cb.q_offsets = cb.k_offsets = cb.v_offsets = cb.o_offsets = off.as<int32_t>();
  cb.batch = 1;
  cb.max_rows = 100;
  cb.rows_bucket = 64;
  AttentionParams params;
  params.scale = 0.1f;
  const Status st = cudnn.Run(ctx, Rows(buf, 0, n, 8, 128, qd), Rows(buf, 0, n, 8, 128, qd),
                              Rows(buf, 0, n, 2, 128, kvd), Rows(buf, 0, n, 2, 128, kvd), cb,
                              params);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << st.message();
}

TEST_F(CudnnAttentionTest, WithoutAutotuneTheHeuristicPlanMatchesToo) {
  UP_CUDA_TEST_CONTEXT(ctx);
  CudnnOptions options;
  options.autotune = false;
  UP_CUDNN_OR_SKIP(cudnn, ctx, options);
  CheckSelf(ctx, *cpu_, cudnn, SelfCase{128, 8, 2, 0, {100, 333}, {100, 300}}, ++seed_);
  CheckSelf(ctx, *cpu_, cudnn, SelfCase{128, 8, 2, 33, {100, 333}, {100, 300}}, ++seed_);
  EXPECT_TRUE(cudnn.PlanTimings().empty());
}

// kAuto: the plans of every implementation this cuDNN builds (COMPOSITE alone on 9.14; UNIFIED
// too on >= 9.21), one of them chosen, the fastest.
TEST_F(CudnnAttentionTest, AutotuneTimesPlansAndKeepsTheFastest) {
  UP_CUDA_TEST_CONTEXT(ctx);
  CudnnOptions options;
  options.implementation = CudnnSdpaImplementation::kAuto;
  UP_CUDNN_OR_SKIP(cudnn, ctx, options);
  CheckSelf(ctx, *cpu_, cudnn, SelfCase{128, 8, 2, 0, {1000}, {1000}}, ++seed_);
  const std::vector<CudnnPlanTiming> plans = cudnn.PlanTimings();
  ASSERT_FALSE(plans.empty());
  int chosen = 0;
  double best = 1e30;
  for (const CudnnPlanTiming& p : plans) {
    std::printf("  plan %s: %.3f ms%s\n", p.name.c_str(), p.ms, p.chosen ? " (chosen)" : "");
    if (p.ms >= 0) best = std::min(best, p.ms);
  }
  for (const CudnnPlanTiming& p : plans) {
    if (!p.chosen) continue;
    ++chosen;
    EXPECT_EQ(p.ms, best);
  }
  EXPECT_EQ(chosen, 1);
}

// Queries over a cached prefix, read from a paged pool: bf16 [blocks, 2, 16, kv_dim] with K | V
// interleaved per block (RunPaged reads the view's strides; CudaKvPool's planes are the other
// layout) and kv_dim wider than Hkv D (NaN columns), blocks handed out in shuffled order.
struct PagedSeq {
  int prefix = 0, queries = 0;
};

void CheckPaged(DeviceContext& ctx, DeviceContext& cpu, CudnnAttention& cudnn, int d, int hq,
                int hkv, const std::vector<PagedSeq>& seqs, uint32_t seed) {
  constexpr int kBlock = 16, kMaxBlocks = 32, kPoolBlocks = 96;
  const int64_t qd = int64_t{hq} * d, kvd_used = int64_t{hkv} * d, kvd = kvd_used + 8;
  const int nseq = static_cast<int>(seqs.size());
  std::mt19937 rng(seed);
  std::vector<int32_t> blocks(kPoolBlocks);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::vector<uint16_t> pool(int64_t{kPoolBlocks} * 2 * kBlock * kvd, kNaN);
  std::vector<int32_t> table(int64_t{nseq} * kMaxBlocks, 0), q_len, kv_len, q_begin{0};
  std::vector<std::vector<float>> keys, values;
  int next_block = 0, max_q = 0;
  for (int b = 0; b < nseq; ++b) {
    const int L = seqs[b].prefix + seqs[b].queries;
    ASSERT_LE((L + kBlock - 1) / kBlock, kMaxBlocks);
    keys.push_back(RandomBf16Values(rng, int64_t{L} * kvd_used));
    values.push_back(RandomBf16Values(rng, int64_t{L} * kvd_used));
    for (int a = 0; a < L; ++a) {
      if (a % kBlock == 0) table[b * kMaxBlocks + a / kBlock] = blocks[next_block++];
      const int64_t base = (int64_t{table[b * kMaxBlocks + a / kBlock]} * 2 * kBlock +
                            a % kBlock) * kvd;
      for (int64_t e = 0; e < kvd_used; ++e) {
        pool[base + e] = F32ToBf16Bits(keys[b][a * kvd_used + e]);
        pool[base + kBlock * kvd + e] = F32ToBf16Bits(values[b][a * kvd_used + e]);
      }
    }
    q_len.push_back(seqs[b].queries);
    kv_len.push_back(L);
    q_begin.push_back(q_begin.back() + seqs[b].queries);
    max_q = std::max(max_q, seqs[b].queries);
  }
  const int64_t tq = q_begin.back(), q_width = qd + 8;
  const std::vector<float> q = RandomBf16Values(rng, tq * qd);
  std::vector<uint16_t> q_bits(tq * q_width, kNaN);
  for (int64_t t = 0; t < tq; ++t) {
    for (int64_t e = 0; e < qd; ++e) q_bits[t * q_width + e] = F32ToBf16Bits(q[t * qd + e]);
  }
  const DeviceBuffer pool_dev = DeviceBuffer::FromHost(pool);
  const DeviceBuffer q_dev = DeviceBuffer::FromHost(q_bits);
  const DeviceBuffer table_dev = DeviceBuffer::FromHost(table);
  const DeviceBuffer q_len_dev = DeviceBuffer::FromHost(q_len);
  const DeviceBuffer kv_len_dev = DeviceBuffer::FromHost(kv_len);
  const DeviceBuffer q_off = DeviceBuffer::FromHost(RaggedOffsets(q_begin, q_width));
  const DeviceBuffer o_off = DeviceBuffer::FromHost(RaggedOffsets(q_begin, qd));
  DeviceBuffer out(tq * qd * 2);
  out.Fill(0xFF);
  UP_CUDA_CHECK(cudaDeviceSynchronize());
  CudnnPagedBatch pb;
  pb.q_len = q_len_dev.as<int32_t>();
  pb.kv_len = kv_len_dev.as<int32_t>();
  pb.q_offsets = q_off.as<int32_t>();
  pb.o_offsets = o_off.as<int32_t>();
  pb.block_table = table_dev.as<int32_t>();
  pb.batch = nseq;
  pb.max_q_rows = max_q;
  pb.max_blocks = kMaxBlocks;
  const TensorView kv = TensorView::Contiguous(pool_dev.data(), DType::kBF16,
                                               {kPoolBlocks, 2, kBlock, kvd}, Device::kCuda);
  AttentionParams params;
  params.scale = 1.0f / std::sqrt(static_cast<float>(d));
  const Status st = cudnn.RunPaged(ctx, Rows(out, 0, tq, hq, d, qd),
                                   Rows(q_dev, 0, tq, hq, d, q_width), kv, hkv, pb, params);
  ASSERT_TRUE(st.ok()) << "D " << d << ": " << st.message();
  UP_CUDA_CHECK(cudaStreamSynchronize(ctx.cuda().stream()));

  std::vector<float> ref;
  for (int b = 0; b < nseq; ++b) {
    const int n = seqs[b].queries, L = kv_len[b];
    std::vector<int32_t> k_pos(L), q_pos(n);
    std::iota(k_pos.begin(), k_pos.end(), 0);
    std::iota(q_pos.begin(), q_pos.end(), seqs[b].prefix);
    std::vector<float> one(int64_t{n} * qd);
    ::uniprefill::ops::Attention(cpu, Host(one, 0, n, hq, d), Host(q, q_begin[b], n, hq, d),
                                 Host(keys[b], 0, L, hkv, d), Host(values[b], 0, L, hkv, d),
                                 q_pos.data(), k_pos.data(), params);
    ref.insert(ref.end(), one.begin(), one.end());
  }
  std::vector<float> got(tq * qd);
  const std::vector<uint16_t> raw = out.ToHost<uint16_t>(tq * qd);
  for (int64_t i = 0; i < tq * qd; ++i) got[i] = Bf16BitsToF32(raw[i]);
  const double err = RelativeL2Error(got, ref);
  std::printf("cuDNN paged prefix D %d heads %d/%d, %d sequences: vs CPU %.2e\n", d, hq, hkv, nseq,
              err);
  EXPECT_LT(err, kTolerance) << "D " << d;

  // RunPrefix on the same keys and values in contiguous rows (kvd wide: NaN past Hkv D).
  std::vector<int32_t> kv_begin{0};
  for (int b = 0; b < nseq; ++b) kv_begin.push_back(kv_begin.back() + kv_len[b]);
  const int64_t tk = kv_begin.back();
  std::vector<uint16_t> k_bits(tk * kvd, kNaN), v_bits(tk * kvd, kNaN);
  for (int b = 0; b < nseq; ++b) {
    for (int a = 0; a < kv_len[b]; ++a) {
      for (int64_t e = 0; e < kvd_used; ++e) {
        k_bits[(kv_begin[b] + a) * kvd + e] = F32ToBf16Bits(keys[b][a * kvd_used + e]);
        v_bits[(kv_begin[b] + a) * kvd + e] = F32ToBf16Bits(values[b][a * kvd_used + e]);
      }
    }
  }
  const DeviceBuffer k_dev = DeviceBuffer::FromHost(k_bits), v_dev = DeviceBuffer::FromHost(v_bits);
  const DeviceBuffer kv_off = DeviceBuffer::FromHost(RaggedOffsets(kv_begin, kvd));
  CudnnPrefixBatch xb;
  xb.q_len = pb.q_len;
  xb.kv_len = pb.kv_len;
  xb.q_offsets = pb.q_offsets;
  xb.o_offsets = pb.o_offsets;
  xb.k_offsets = xb.v_offsets = kv_off.as<int32_t>();
  xb.batch = nseq;
  xb.max_q_rows = max_q;
  xb.max_kv_rows = *std::max_element(kv_len.begin(), kv_len.end());
  // One RunPrefix of xb into a poisoned out; the output as f32 when it ran.
  auto run_prefix = [&](std::vector<float>* result) -> Status {
    out.Fill(0xFF);
    UP_CUDA_CHECK(cudaDeviceSynchronize());
    const Status ran = cudnn.RunPrefix(ctx, Rows(out, 0, tq, hq, d, qd),
                                       Rows(q_dev, 0, tq, hq, d, q_width),
                                       Rows(k_dev, 0, tk, hkv, d, kvd),
                                       Rows(v_dev, 0, tk, hkv, d, kvd), xb, params);
    if (!ran.ok()) return ran;
    UP_CUDA_CHECK(cudaStreamSynchronize(ctx.cuda().stream()));
    const std::vector<uint16_t> bits = out.ToHost<uint16_t>(tq * qd);
    result->resize(tq * qd);
    for (int64_t i = 0; i < tq * qd; ++i) (*result)[i] = Bf16BitsToF32(bits[i]);
    return OkStatus();
  };
  const Status xst = run_prefix(&got);
  ASSERT_TRUE(xst.ok()) << "D " << d << ": " << xst.message();
  const double err_x = RelativeL2Error(got, ref);
  std::printf("cuDNN prefix rows D %d heads %d/%d, %d sequences: vs CPU %.2e\n", d, hq, hkv,
              nseq, err_x);
  EXPECT_LT(err_x, kTolerance) << "D " << d;

  // The same with a graph built for more key rows than any sequence has (a cache's capacity).
  xb.kv_rows_bucket = 4096;
  ASSERT_TRUE(run_prefix(&got).ok());
  EXPECT_LT(RelativeL2Error(got, ref), kTolerance) << "D " << d << ", 4096 key rows";
  // And for more query rows than any sequence has (a server's step budget; PrepareServing).
  xb.q_rows_bucket = 1000;
  ASSERT_TRUE(run_prefix(&got).ok());
  EXPECT_LT(RelativeL2Error(got, ref), kTolerance) << "D " << d << ", 1000 query rows";
  xb.kv_rows_bucket = 8;  // fewer than the longest prefix: refused
  EXPECT_FALSE(run_prefix(&got).ok());
  xb.kv_rows_bucket = 4096;
  xb.q_rows_bucket = 1;  // fewer than the most query rows: refused
  EXPECT_FALSE(run_prefix(&got).ok());
}

TEST_F(CudnnAttentionTest, PagedPrefixQueriesMatchCpu) {
  UP_CUDA_TEST_CONTEXT(ctx);
  UP_CUDNN_OR_SKIP(cudnn, ctx);
  // Prefixes inside a block, on a block edge and long; query runs of 1 (a decode step) to 65.
  const std::vector<PagedSeq> seqs = {{37, 20}, {16, 1}, {300, 65}, {3, 16}};
  for (auto [d, hq, hkv] : kShapes) CheckPaged(ctx, *cpu_, cudnn, d, hq, hkv, seqs, ++seed_);
}

// One small causal sequence through cudnn: Unimplemented when its cuDNN has no such graph.
Status Probe(DeviceContext& ctx, CudnnAttention& cudnn) {
  const int64_t n = 64, qd = 8 * 128, kvd = 2 * 128;
  DeviceBuffer buf(n * (qd + 2 * kvd) * 2 + n * qd * 2);
  const DeviceBuffer seq_dev = DeviceBuffer::FromHost(std::vector<int32_t>{64});
  const DeviceBuffer off = DeviceBuffer::FromHost(std::vector<int32_t>{0, 0});
  CudnnVarlen cb;
  cb.seq_len = seq_dev.as<int32_t>();
  cb.q_offsets = cb.k_offsets = cb.v_offsets = cb.o_offsets = off.as<int32_t>();
  cb.batch = 1;
  cb.max_rows = n;
  AttentionParams params;
  params.scale = 0.1f;
  const Status st = cudnn.Run(ctx, Rows(buf, 0, n, 8, 128, qd), Rows(buf, 0, n, 8, 128, qd),
                              Rows(buf, 0, n, 2, 128, kvd), Rows(buf, 0, n, 2, 128, kvd), cb,
                              params);
  UP_CUDA_CHECK(cudaStreamSynchronize(ctx.cuda().stream()));
  return st;
}

// Each SDPA implementation forced alone: the same results for every mask kind, and plans named
// after it. A cuDNN without UNIFIED for our masks (the H200's 9.14: bands need 9.21) says so at
// the first run, and that implementation is skipped with its reason (paged prefixes: the default
// picks per bucket; the backend does not use RunPaged).
TEST_F(CudnnAttentionTest, EachSdpaImplementationMatchesCpuAndOurs) {
  UP_CUDA_TEST_CONTEXT(ctx);
  int ran = 0;
  for (CudnnSdpaImplementation impl :
       {CudnnSdpaImplementation::kComposite, CudnnSdpaImplementation::kUnified}) {
    const std::string name = CudnnSdpaImplementationName(impl);
    CudnnOptions options;
    options.implementation = impl;
    UP_CUDNN_OR_SKIP(cudnn, ctx, options);
    const Status probe = Probe(ctx, cudnn);
    if (impl == CudnnSdpaImplementation::kUnified && probe.code() == ErrorCode::kUnimplemented) {
      std::printf("%s: not on this cuDNN (%s)\n", name.c_str(), probe.message().c_str());
      continue;
    }
    ASSERT_TRUE(probe.ok()) << name << ": " << probe.message();
    ++ran;
    for (auto [d, hq, hkv] : kShapes) {
      for (int window : {0, 7, 250}) {
        CheckSelf(ctx, *cpu_, cudnn,
                  SelfCase{d, hq, hkv, window, {37, 300, 160, 1, 513}, {37, 300, 129, 1, 511}},
                  ++seed_);
      }
    }
    for (const CudnnPlanTiming& p : cudnn.PlanTimings()) {
      EXPECT_EQ(p.name.rfind(name + " ", 0), 0u) << p.name;
    }
  }
  EXPECT_GE(ran, 1);
}

// ---- Throughput (DISABLED_: run with --gtest_also_run_disabled_tests) ----

// FLOPs of causal attention over n rows with window w (0: none): 4 d hq per visible pair.
double AttentionFlops(int64_t n, int64_t w, int d, int hq) {
  double pairs = static_cast<double>(n) * (n + 1) / 2;
  if (w > 0 && w < n) pairs = static_cast<double>(w) * (w + 1) / 2 + static_cast<double>(n - w) * w;
  return 4.0 * pairs * d * hq;
}

struct Shape {
  int n, d, hq, hkv, window;
};

// cuDNN (autotuned, its plans printed) and ours on one packed sequence of n rows (fused QKV).
void Throughput(DeviceContext& ctx, CudnnAttention& cudnn, const Shape& s) {
  const int64_t n = s.n, qd = int64_t{s.hq} * s.d, kvd = int64_t{s.hkv} * s.d;
  const int64_t width = qd + 2 * kvd;
  std::mt19937 rng(s.d + s.window);
  const DeviceBuffer qkv = DeviceBuffer::FromHost(ToBf16(RandomBf16Values(rng, n * width)));
  DeviceBuffer out(n * qd * 2);
  const std::vector<int32_t> begin = {0, s.n}, len = {s.n};
  std::vector<int32_t> pos(n);
  std::iota(pos.begin(), pos.end(), 0);
  const DeviceBuffer seq_dev = DeviceBuffer::FromHost(len), cu_dev = DeviceBuffer::FromHost(begin);
  const DeviceBuffer pos_dev = DeviceBuffer::FromHost(pos);
  const DeviceBuffer in_off = DeviceBuffer::FromHost(RaggedOffsets(begin, width));
  const DeviceBuffer o_off = DeviceBuffer::FromHost(RaggedOffsets(begin, qd));
  UP_CUDA_CHECK(cudaDeviceSynchronize());
  CudnnVarlen cb;
  cb.seq_len = seq_dev.as<int32_t>();
  cb.q_offsets = cb.k_offsets = cb.v_offsets = in_off.as<int32_t>();
  cb.o_offsets = o_off.as<int32_t>();
  cb.batch = 1;
  cb.max_rows = s.n;
  AttentionParams params;
  params.scale = 1.0f / std::sqrt(static_cast<float>(s.d));
  params.window = s.window;
  const TensorView o = Rows(out, 0, n, s.hq, s.d, qd), q = Rows(qkv, 0, n, s.hq, s.d, width);
  const TensorView k = Rows(qkv, qd, n, s.hkv, s.d, width);
  const TensorView v = Rows(qkv, qd + kvd, n, s.hkv, s.d, width);
  Status st;
  const double flops = AttentionFlops(n, s.window, s.d, s.hq);
  auto run_cudnn = [&] { st = cudnn.Run(ctx, o, q, k, v, cb, params); };
  const double cudnn_s = ::uniprefill::testing::MeanCudaMs(ctx, 5, run_cudnn) / 1e3;
  ASSERT_TRUE(st.ok()) << st.message();
  int failed = 0;
  for (const CudnnPlanTiming& p : cudnn.PlanTimings()) {
    failed += p.ms < 0;
    if (p.ms < 0) continue;
    std::printf("  plan %-40s %9.3f ms %7.1f TFLOP/s%s\n", p.name.c_str(), p.ms,
                flops / (p.ms / 1e3) / 1e12, p.chosen ? "  <- chosen" : "");
  }
  if (failed > 0) std::printf("  (%d more configs did not build or run)\n", failed);
  // The chosen plan alone after the GPU idled (boost clocks), and over 20 back-to-back runs (the
  // clocks a long prefill settles at).
  UP_CUDA_CHECK(cudaDeviceSynchronize());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double single_s = ::uniprefill::testing::MeanCudaMs(ctx, 1, run_cudnn) / 1e3;
  const double sustained_s = ::uniprefill::testing::MeanCudaMs(ctx, 20, run_cudnn) / 1e3;
  std::printf("  cuDNN chosen plan: one run after idle %.3f ms %.1f TFLOP/s; 20 back-to-back "
              "%.3f ms %.1f TFLOP/s\n",
              single_s * 1e3, flops / single_s / 1e12, sustained_s * 1e3,
              flops / sustained_s / 1e12);
  VarlenBatch vb{cu_dev.as<int32_t>(), cu_dev.as<int32_t>(), 1, s.n, s.n};
  const double ours_s = ::uniprefill::testing::MeanCudaMs(ctx, 5, [&] {
                          FlashAttention(ctx, o, q, k, v, pos_dev.as<int32_t>(),
                                         pos_dev.as<int32_t>(), vb, params);
                        }) / 1e3;
  std::printf("N %6d D %3d Hq %2d Hkv %d window %5d: cuDNN %8.3f ms %6.1f TFLOP/s | ours %8.3f ms "
              "%6.1f TFLOP/s\n",
              s.n, s.d, s.hq, s.hkv, s.window, cudnn_s * 1e3, flops / cudnn_s / 1e12, ours_s * 1e3,
              flops / ours_s / 1e12);
  std::fflush(stdout);
}

TEST(CudnnAttentionThroughputTest, DISABLED_CausalAndWindowsVsOurs) {
  UP_CUDA_TEST_CONTEXT(ctx);
  UP_CUDNN_OR_SKIP(cudnn, ctx);
  for (const Shape& s : {Shape{8192, 128, 32, 8, 0}, Shape{32768, 128, 32, 8, 0},
                         Shape{32768, 64, 32, 8, 0}, Shape{32768, 256, 16, 8, 0},
                         Shape{32768, 128, 32, 8, 512}, Shape{32768, 128, 32, 8, 4096}}) {
    Throughput(ctx, cudnn, s);
  }
}

// Each SDPA implementation forced alone on the shapes issue 17 measures (an implementation this
// cuDNN lacks fails its first shape and is skipped).
TEST(CudnnAttentionThroughputTest, DISABLED_EachSdpaImplementation) {
  UP_CUDA_TEST_CONTEXT(ctx);
  for (CudnnSdpaImplementation impl :
       {CudnnSdpaImplementation::kComposite, CudnnSdpaImplementation::kUnified}) {
    CudnnOptions options;
    options.implementation = impl;
    UP_CUDNN_OR_SKIP(cudnn, ctx, options);
    const Status probe = Probe(ctx, cudnn);
    std::printf("== %s%s%s\n", CudnnSdpaImplementationName(impl), probe.ok() ? "" : ": ",
                probe.message().c_str());
    if (!probe.ok()) continue;
    for (const Shape& s : {Shape{32768, 128, 32, 8, 0}, Shape{32768, 64, 32, 8, 0},
                           Shape{32768, 256, 16, 8, 0}, Shape{32768, 128, 32, 8, 4096},
                           Shape{131072, 128, 32, 8, 0}}) {
      Throughput(ctx, cudnn, s);
      if (::testing::Test::HasFatalFailure()) break;
    }
  }
}

TEST(CudnnAttentionThroughputTest, DISABLED_AllHeuristicPlansIncludingFallback32k) {
  UP_CUDA_TEST_CONTEXT(ctx);
  CudnnOptions options;
  options.fallback_plans = true;
  UP_CUDNN_OR_SKIP(cudnn, ctx, options);
  Throughput(ctx, cudnn, Shape{32768, 128, 32, 8, 0});
}

TEST(CudnnAttentionThroughputTest, DISABLED_KnobSweep32k) {
  UP_CUDA_TEST_CONTEXT(ctx);
  CudnnOptions options;
  options.sweep_knobs = true;
  UP_CUDNN_OR_SKIP(cudnn, ctx, options);
  for (const Shape& s : {Shape{32768, 128, 32, 8, 0}, Shape{32768, 64, 32, 8, 0},
                         Shape{32768, 256, 16, 8, 0}}) {
    Throughput(ctx, cudnn, s);
  }
}

}  // namespace
}  // namespace uniprefill::ops::cuda
