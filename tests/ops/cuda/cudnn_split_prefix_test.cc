// Split-KV prefix attention (ops/cuda/cudnn_split_prefix.h) and its merge
// (ops/cuda/cuda_attention_merge.h): the merge kernel against a scalar merge on random pieces;
// RunSplitPrefix against the CPU ops::Attention and against RunPrefix on the whole prefix, for
// D 64 / 128 / 256, GQA, odd prefix and chunk lengths, 1 to 15 pieces, graphs keyed by fixed
// buckets (as a server's) and by powers of two, the chunk's rows inside a larger step (q, k, v
// strided with NaN columns; rows outside the chunk and columns past its heads must stay NaN).
// DISABLED_* times split against unsplit on the 8B shape over 32K and 128K prefixes.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "ops/cuda/cuda_attention_merge.h"
#include "ops/cuda/cudnn_attention.h"
#include "ops/cuda/cudnn_split_prefix.h"
#include "ops/ops.h"
#include "testing/compare.h"
#include "testing/cuda_test_util.h"

namespace uniprefill::ops::cuda {
namespace {

using ::uniprefill::testing::Bf16BitsToF32;
using ::uniprefill::testing::F32ToBf16Bits;
using ::uniprefill::testing::RandomBf16Values;
using ::uniprefill::testing::RelativeL2Error;

constexpr double kTolerance = 1e-2;  // bf16 outputs of f32 math vs the f32 CPU op (~4e-3)
constexpr uint16_t kNaN = 0xFFFF;

TensorView View(const DeviceBuffer& buf, int64_t t, int64_t h, int64_t d, int64_t row_stride,
                int64_t offset = 0) {
  TensorView v =
      TensorView::Contiguous(buf.as<uint16_t>() + offset, DType::kBF16, {t, h, d}, Device::kCuda);
  v.stride[0] = row_stride;
  return v;
}

TEST(AttentionMergeTest, MatchesAScalarMergeOfRandomPieces) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(4100);
  for (const auto& [pieces, rows, hq, d] : {std::tuple{1, 5, 2, 64}, std::tuple{3, 17, 4, 128},
                                           std::tuple{9, 33, 3, 256}, std::tuple{16, 2, 8, 2}}) {
    const int64_t piece_rows = rows + 3, lse_rows = rows + 5, out_stride = hq * d + 6;
    const std::vector<float> partial =
        RandomBf16Values(rng, static_cast<size_t>(pieces) * piece_rows * hq * d);
    std::vector<float> lse(static_cast<size_t>(pieces) * hq * lse_rows);
    std::uniform_real_distribution<float> spread(-8.0f, 30.0f);
    for (float& x : lse) x = spread(rng);
    const DeviceBuffer partial_dev = DeviceBuffer::FromHost(::uniprefill::testing::ToBf16(partial));
    const DeviceBuffer lse_dev = DeviceBuffer::FromHost(lse);
    DeviceBuffer out(rows * out_stride * 2);
    out.Fill(0xFF);
    UP_CUDA_CHECK(cudaDeviceSynchronize());
    MergeAttentionPieces(ctx, View(out, rows, hq, d, out_stride), partial_dev.as<uint16_t>(),
                         piece_rows, lse_dev.as<float>(), lse_rows, pieces);
    const std::vector<uint16_t> got = out.ToHost<uint16_t>(rows * out_stride);
    std::vector<float> want, have;
    int touched = 0;
    for (int i = 0; i < rows; ++i) {
      for (int h = 0; h < hq; ++h) {
        double m = -INFINITY;
        for (int s = 0; s < pieces; ++s) m = std::max<double>(m, lse[(s * hq + h) * lse_rows + i]);
        std::vector<double> w(pieces);
        double total = 0;
        for (int s = 0; s < pieces; ++s) {
          w[s] = std::exp(lse[(s * hq + h) * lse_rows + i] - m);
          total += w[s];
        }
        for (int e = 0; e < d; ++e) {
          double acc = 0;
          for (int s = 0; s < pieces; ++s) {
            acc += w[s] * partial[((s * piece_rows + i) * hq + h) * d + e];
          }
          want.push_back(static_cast<float>(acc / total));
          have.push_back(Bf16BitsToF32(got[i * out_stride + h * d + e]));
        }
      }
      for (int64_t e = hq * d; e < out_stride; ++e) touched += got[i * out_stride + e] != kNaN;
    }
    EXPECT_LT(RelativeL2Error(have, want), 5e-3) << pieces << " pieces, D " << d;
    EXPECT_EQ(touched, 0) << "columns past the heads were written";
  }
}

struct SplitCase {
  int d, hq, hkv, prefix, queries, pieces;
  bool buckets;  // fixed graph buckets (a server's) instead of powers of two
};

// A step of 3 + queries + 5 rows whose rows [3, 3 + queries) are the chunk (q | 8 NaN columns),
// over keys in rows [2, 2 + prefix + queries) of k and v (Hkv D | 8 NaN columns).
void CheckSplit(DeviceContext& ctx, DeviceContext& cpu, CudnnAttention& cudnn, const SplitCase& c,
                uint32_t seed) {
  const int64_t d = c.d, hq = c.hq, hkv = c.hkv, qd = hq * d, kvd = hkv * d;
  const int q_row = 3, kv_row = 2, L = c.prefix + c.queries;
  const int64_t tq = q_row + c.queries + 5, tk = kv_row + L + 4;
  const int64_t q_width = qd + 8, kv_width = kvd + 8;
  std::mt19937 rng(seed);
  const std::vector<float> q = RandomBf16Values(rng, c.queries * qd);
  const std::vector<float> k = RandomBf16Values(rng, int64_t{L} * kvd);
  const std::vector<float> v = RandomBf16Values(rng, int64_t{L} * kvd);
  std::vector<uint16_t> q_bits(tq * q_width, kNaN), k_bits(tk * kv_width, kNaN),
      v_bits(tk * kv_width, kNaN);
  for (int i = 0; i < c.queries; ++i) {
    for (int64_t e = 0; e < qd; ++e) q_bits[(q_row + i) * q_width + e] = F32ToBf16Bits(q[i * qd + e]);
  }
  for (int a = 0; a < L; ++a) {
    for (int64_t e = 0; e < kvd; ++e) {
      k_bits[(kv_row + a) * kv_width + e] = F32ToBf16Bits(k[a * kvd + e]);
      v_bits[(kv_row + a) * kv_width + e] = F32ToBf16Bits(v[a * kvd + e]);
    }
  }
  const DeviceBuffer q_dev = DeviceBuffer::FromHost(q_bits), k_dev = DeviceBuffer::FromHost(k_bits);
  const DeviceBuffer v_dev = DeviceBuffer::FromHost(v_bits);
  DeviceBuffer out(tq * q_width * 2);
  out.Fill(0xFF);
  SplitPrefix s;
  s.q_row = q_row;
  s.q_len = c.queries;
  s.kv_row = kv_row;
  s.prefix = c.prefix;
  s.pieces = c.pieces;
  if (c.buckets) {
    s.q_rows_bucket = c.queries + 40;
    s.kv_rows_bucket = 4096;
  }
  DeviceBuffer scratch(SplitPrefixScratchBytes(s, hq, d));
  std::vector<DeviceBuffer> uploads;
  const UploadInts upload = [&](const std::vector<int32_t>& a) -> Result<const int32_t*> {
    uploads.push_back(DeviceBuffer::FromHost(a));
    return uploads.back().as<int32_t>();
  };
  AttentionParams params;
  params.scale = 1.0f / std::sqrt(static_cast<float>(d));
  UP_CUDA_CHECK(cudaDeviceSynchronize());
  const Status st = RunSplitPrefix(ctx, cudnn, View(out, tq, hq, d, q_width),
                                   View(q_dev, tq, hq, d, q_width), View(k_dev, tk, hkv, d, kv_width),
                                   View(v_dev, tk, hkv, d, kv_width), s, params, scratch.data(),
                                   upload);
  ASSERT_TRUE(st.ok()) << st.message();
  UP_CUDA_CHECK(cudaStreamSynchronize(ctx.cuda().stream()));
  UP_CUDA_CHECK(cudaDeviceSynchronize());  // FromHost copies ran on the legacy stream

  std::vector<int32_t> k_pos(L), q_pos(c.queries);
  std::iota(k_pos.begin(), k_pos.end(), 0);
  std::iota(q_pos.begin(), q_pos.end(), c.prefix);
  std::vector<float> ref(c.queries * qd);
  const auto host = [](const std::vector<float>& x, int64_t n, int64_t h) {
    const int64_t cols = static_cast<int64_t>(x.size()) / n / h;
    return TensorView::Contiguous(const_cast<float*>(x.data()), DType::kF32, {n, h, cols});
  };
  ::uniprefill::ops::Attention(cpu, host(ref, c.queries, hq), host(q, c.queries, hq),
                               host(k, L, hkv), host(v, L, hkv), q_pos.data(), k_pos.data(),
                               params);
  const std::vector<uint16_t> raw = out.ToHost<uint16_t>(tq * q_width);
  std::vector<float> got;
  int touched = 0;
  for (int64_t t = 0; t < tq; ++t) {
    const bool chunk = t >= q_row && t < q_row + c.queries;
    for (int64_t e = 0; e < q_width; ++e) {
      if (chunk && e < qd) {
        got.push_back(Bf16BitsToF32(raw[t * q_width + e]));
      } else {
        touched += raw[t * q_width + e] != kNaN;
      }
    }
  }
  const double err = RelativeL2Error(got, ref);
  std::printf("split prefix D %d heads %d/%d prefix %d queries %d pieces %d%s: vs CPU %.2e\n",
              c.d, c.hq, c.hkv, c.prefix, c.queries, c.pieces, c.buckets ? " (buckets)" : "", err);
  EXPECT_LT(err, kTolerance);
  EXPECT_EQ(touched, 0) << "elements outside the chunk's rows and heads were written";
}

TEST(CudnnSplitPrefixTest, MatchesCpuForShapesPiecesAndBuckets) {
  UP_CUDA_TEST_CONTEXT(ctx);
  auto cudnn = CudnnAttention::Create(ctx);
  if (!cudnn.ok()) GTEST_SKIP() << "no cuDNN: " << cudnn.status().message();
  auto cpu = DeviceContext::Cpu(4);
  uint32_t seed = 4200;
  const SplitCase cases[] = {
      {128, 8, 2, 1000, 65, 8, false}, {128, 8, 2, 1000, 65, 8, true},
      {64, 4, 4, 301, 1, 3, false},    {64, 4, 4, 9, 17, 8, true},
      {256, 4, 2, 777, 130, 15, true}, {128, 32, 8, 2500, 200, 1, false},
      {128, 32, 8, 2500, 200, 8, true},
  };
  for (const SplitCase& c : cases) CheckSplit(ctx, *cpu, **cudnn, c, ++seed);
}

TEST(CudnnSplitPrefixTest, RefusesMorePiecesThanKeysOrTheMergeTakes) {
  UP_CUDA_TEST_CONTEXT(ctx);
  auto cudnn = CudnnAttention::Create(ctx);
  if (!cudnn.ok()) GTEST_SKIP() << "no cuDNN: " << cudnn.status().message();
  const DeviceBuffer buf(1 << 16);
  const TensorView x = View(buf, 8, 1, 64, 64);
  const UploadInts upload = [](const std::vector<int32_t>&) -> Result<const int32_t*> {
    return Internal("must not upload");
  };
  SplitPrefix s;
  s.q_len = 2;
  s.prefix = 3;
  s.pieces = 4;  // more pieces than keys
  EXPECT_EQ(RunSplitPrefix(ctx, **cudnn, x, x, x, x, s, {}, buf.data(), upload).code(),
            ErrorCode::kInvalidArgument);
  s.prefix = 100;
  s.pieces = kMaxAttentionPieces;  // the own-keys piece would be one too many
  EXPECT_EQ(RunSplitPrefix(ctx, **cudnn, x, x, x, x, s, {}, buf.data(), upload).code(),
            ErrorCode::kInvalidArgument);
}

// ---- Throughput (DISABLED_: run with --gtest_also_run_disabled_tests) ----

// The 8B shape (32/8 heads x 128): chunks of r queries over p cached keys, RunPrefix on the whole
// prefix against split-KV with 4, 8 and 15 pieces, graphs at fixed buckets (as a server's).
TEST(CudnnSplitPrefixThroughputTest, DISABLED_ChunksOverDeepPrefixes) {
  UP_CUDA_TEST_CONTEXT(ctx);
  auto made = CudnnAttention::Create(ctx);
  if (!made.ok()) GTEST_SKIP() << "no cuDNN: " << made.status().message();
  CudnnAttention& cudnn = **made;
  constexpr int64_t kHq = 32, kHkv = 8, kD = 128, kMaxKeys = 131072 + 2048, kMaxRows = 2048;
  std::mt19937 rng(4300);
  const DeviceBuffer q_dev =
      DeviceBuffer::FromHost(::uniprefill::testing::ToBf16(RandomBf16Values(rng, kMaxRows * kHq * kD)));
  const DeviceBuffer k_dev = DeviceBuffer::FromHost(
      ::uniprefill::testing::ToBf16(RandomBf16Values(rng, kMaxKeys * kHkv * kD)));
  const DeviceBuffer v_dev = DeviceBuffer::FromHost(
      ::uniprefill::testing::ToBf16(RandomBf16Values(rng, kMaxKeys * kHkv * kD)));
  DeviceBuffer out(kMaxRows * kHq * kD * 2);
  // Uploads once, then replays the same device arrays (a split's arrays repeat call after call),
  // so the timed runs hold no host allocation.
  std::vector<DeviceBuffer> uploads;
  size_t next_upload = 0;
  const UploadInts upload = [&](const std::vector<int32_t>& a) -> Result<const int32_t*> {
    if (next_upload == uploads.size()) uploads.push_back(DeviceBuffer::FromHost(a));
    return uploads[next_upload++].as<int32_t>();
  };
  AttentionParams params;
  params.scale = 1.0f / std::sqrt(static_cast<float>(kD));
  const TensorView o = View(out, kMaxRows, kHq, kD, kHq * kD);
  const TensorView q = View(q_dev, kMaxRows, kHq, kD, kHq * kD);
  const TensorView k = View(k_dev, kMaxKeys, kHkv, kD, kHkv * kD);
  const TensorView v = View(v_dev, kMaxKeys, kHkv, kD, kHkv * kD);
  UP_CUDA_CHECK(cudaDeviceSynchronize());
  for (const int p : {32768, 131072}) {
    for (const int r : {256, 384, 512, 1024, 2048}) {
      const double flops = 4.0 * kD * kHq * r * (p + (r + 1) / 2.0);
      // Unsplit: RunPrefix over all p + r keys.
      CudnnPrefixBatch pb;
      const DeviceBuffer q_len = DeviceBuffer::FromHost(std::vector<int32_t>{r});
      const DeviceBuffer kv_len = DeviceBuffer::FromHost(std::vector<int32_t>{p + r});
      const DeviceBuffer q_off = DeviceBuffer::FromHost(RaggedOffsets({0, r}, kHq * kD));
      const DeviceBuffer k_off = DeviceBuffer::FromHost(RaggedOffsets({0, p + r}, kHkv * kD));
      UP_CUDA_CHECK(cudaDeviceSynchronize());
      pb.batch = 1;
      pb.q_len = q_len.as<int32_t>();
      pb.kv_len = kv_len.as<int32_t>();
      pb.q_offsets = pb.o_offsets = q_off.as<int32_t>();
      pb.k_offsets = pb.v_offsets = k_off.as<int32_t>();
      pb.max_q_rows = r;
      pb.max_kv_rows = p + r;
      pb.q_rows_bucket = kMaxRows;
      pb.kv_rows_bucket = static_cast<int>(kMaxKeys);
      Status st;
      const double whole_ms = ::uniprefill::testing::MeanCudaMs(
          ctx, 5, [&] { st = cudnn.RunPrefix(ctx, o, q, k, v, pb, params); });
      ASSERT_TRUE(st.ok()) << st.message();
      std::printf("prefix %6d chunk %4d: whole %7.3f ms %5.1f TFLOP/s", p, r, whole_ms,
                  flops / whole_ms / 1e9);
      for (const int pieces : {4, 8, 15}) {
        SplitPrefix s;
        s.q_len = r;
        s.prefix = p;
        s.pieces = pieces;
        s.q_rows_bucket = kMaxRows;
        s.kv_rows_bucket = static_cast<int>(kMaxKeys);
        DeviceBuffer scratch(SplitPrefixScratchBytes(s, kHq, kD));
        uploads.clear();
        const double ms = ::uniprefill::testing::MeanCudaMs(ctx, 5, [&] {
          next_upload = 0;
          st = RunSplitPrefix(ctx, cudnn, o, q, k, v, s, params, scratch.data(), upload);
        });
        ASSERT_TRUE(st.ok()) << st.message();
        std::printf(" | %2d pieces %7.3f ms %5.1f TFLOP/s (%.2fx)", pieces, ms, flops / ms / 1e9,
                    whole_ms / ms);
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }
}

}  // namespace
}  // namespace uniprefill::ops::cuda
