// cuDNN's fused attention (ops/cuda/cudnn_attention.h) against our FlashAttention, the judge that
// is itself checked against the CPU op: packed varlen batches with strided (fused-QKV) rows, GQA,
// head dims 64 / 128 / 256, and a sequence ending in padding rows (the sync-free drop's capacity).
// Builds without cuDNN skip with one line; so does a machine without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
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

using ::uniprefill::testing::FromBf16;
using ::uniprefill::testing::RandomBf16Values;
using ::uniprefill::testing::ToBf16;

TensorView Rows(const DeviceBuffer& buf, int64_t offset, int64_t t, int64_t h, int64_t d,
                int64_t row_stride) {
  TensorView v =
      TensorView::Contiguous(buf.as<uint16_t>() + offset, DType::kBF16, {t, h, d}, Device::kCuda);
  v.stride[0] = row_stride;
  return v;
}

#define UP_CUDNN_OR_SKIP(name, ctx)                                            \
  auto _up_cudnn = CudnnAttention::Create(ctx);                                \
  if (!_up_cudnn.ok()) GTEST_SKIP() << "no cuDNN: " << _up_cudnn.status().message(); \
  CudnnAttention& name = **_up_cudnn

TEST(CudnnAttentionTest, EqualsFlashAttentionOnPackedStridedBatches) {
  UP_CUDA_TEST_CONTEXT(ctx);
  UP_CUDNN_OR_SKIP(cudnn, ctx);
  for (auto [d, hq, hkv] : {std::tuple{128, 8, 2}, {64, 4, 4}, {256, 4, 2}}) {
    // Three sequences: 37 rows, 300 rows, and 160 rows of which 129 are real (padding after).
    const std::vector<int32_t> begin = {0, 37, 337, 497}, real = {37, 300, 129};
    const int64_t T = begin.back(), width = int64_t{hq + 2 * hkv} * d + 16;  // fused q | k | v
    std::mt19937 rng(d * 100 + hq);
    const std::vector<float> qkv = RandomBf16Values(rng, T * width);
    const DeviceBuffer qkv_dev = DeviceBuffer::FromHost(ToBf16(qkv));
    DeviceBuffer out_ours(T * hq * d * 2), out_cudnn(T * hq * d * 2);
    out_ours.Fill(0);
    out_cudnn.Fill(0);
    const TensorView q = Rows(qkv_dev, 0, T, hq, d, width);
    const TensorView k = Rows(qkv_dev, int64_t{hq} * d, T, hkv, d, width);
    const TensorView v = Rows(qkv_dev, int64_t{hq + hkv} * d, T, hkv, d, width);
    AttentionParams params;
    params.scale = 1.0f / std::sqrt(static_cast<float>(d));

    // Ours: the padding rows get coordinates past every real one, so they are no real row's key.
    std::vector<int32_t> coord(T), cu_real{0};
    for (int b = 0; b < 3; ++b) {
      for (int i = begin[b]; i < begin[b + 1]; ++i) coord[i] = i - begin[b] < real[b] ? i - begin[b] : 1 << 29;
    }
    const DeviceBuffer coord_dev = DeviceBuffer::FromHost(coord);
    const DeviceBuffer cu_dev = DeviceBuffer::FromHost(begin);
    VarlenBatch vb{cu_dev.as<int32_t>(), cu_dev.as<int32_t>(), 3, 300, 300};
    FlashAttention(ctx, Rows(out_ours, 0, T, hq, d, int64_t{hq} * d), q, k, v,
                   coord_dev.as<int32_t>(), coord_dev.as<int32_t>(), vb, params);

    const DeviceBuffer seq_dev = DeviceBuffer::FromHost(real);
    const DeviceBuffer q_off = DeviceBuffer::FromHost(RaggedOffsets(begin, width));
    const DeviceBuffer o_off = DeviceBuffer::FromHost(RaggedOffsets(begin, int64_t{hq} * d));
    CudnnVarlen cb;
    cb.seq_len = seq_dev.as<int32_t>();
    cb.q_offsets = cb.k_offsets = cb.v_offsets = q_off.as<int32_t>();
    cb.o_offsets = o_off.as<int32_t>();
    cb.batch = 3;
    cb.max_rows = 300;
    const Status st =
        cudnn.Run(ctx, Rows(out_cudnn, 0, T, hq, d, int64_t{hq} * d), q, k, v, cb, params);
    ASSERT_TRUE(st.ok()) << "D " << d << ": " << st.message();
    UP_CUDA_CHECK(cudaStreamSynchronize(ctx.cuda().stream()));

    const std::vector<float> ours = FromBf16(out_ours.ToHost<uint16_t>(T * hq * d));
    const std::vector<float> theirs = FromBf16(out_cudnn.ToHost<uint16_t>(T * hq * d));
    std::vector<float> a, b;  // the real rows only
    for (int s = 0; s < 3; ++s) {
      const int64_t first = int64_t{begin[s]} * hq * d, n = int64_t{real[s]} * hq * d;
      a.insert(a.end(), ours.begin() + first, ours.begin() + first + n);
      b.insert(b.end(), theirs.begin() + first, theirs.begin() + first + n);
    }
    const double err = ::uniprefill::testing::RelativeL2Error(b, a);
    std::printf("cuDNN vs FlashAttention, D %d, heads %d/%d, 3 packed sequences: relative error "
                "%.2e\n", d, hq, hkv, err);
    EXPECT_LT(err, 1e-2) << "D " << d;  // two bf16 outputs of f32 softmax: ~4e-3 apart
  }
}

TEST(CudnnAttentionTest, DISABLED_Throughput32kCausal) {
  UP_CUDA_TEST_CONTEXT(ctx);
  UP_CUDNN_OR_SKIP(cudnn, ctx);
  constexpr int kN = 32768;
  for (auto [d, hq, hkv] : {std::tuple{128, 32, 8}, {64, 32, 8}, {256, 16, 8}}) {
    std::mt19937 rng(d);
    const int64_t width = int64_t{hq + 2 * hkv} * d;
    const DeviceBuffer qkv = DeviceBuffer::FromHost(ToBf16(RandomBf16Values(rng, kN * width)));
    DeviceBuffer out(int64_t{kN} * hq * d * 2);
    const std::vector<int32_t> begin = {0, kN}, len = {kN};
    const DeviceBuffer seq_dev = DeviceBuffer::FromHost(len);
    const DeviceBuffer q_off = DeviceBuffer::FromHost(RaggedOffsets(begin, width));
    const DeviceBuffer o_off = DeviceBuffer::FromHost(RaggedOffsets(begin, int64_t{hq} * d));
    CudnnVarlen cb;
    cb.seq_len = seq_dev.as<int32_t>();
    cb.q_offsets = cb.k_offsets = cb.v_offsets = q_off.as<int32_t>();
    cb.o_offsets = o_off.as<int32_t>();
    cb.batch = 1;
    cb.max_rows = kN;
    AttentionParams params;
    params.scale = 1.0f / std::sqrt(static_cast<float>(d));
    Status st;
    auto run = [&] {
      st = cudnn.Run(ctx, Rows(out, 0, kN, hq, d, int64_t{hq} * d), Rows(qkv, 0, kN, hq, d, width),
                     Rows(qkv, int64_t{hq} * d, kN, hkv, d, width),
                     Rows(qkv, int64_t{hq + hkv} * d, kN, hkv, d, width), cb, params);
    };
    const double seconds = ::uniprefill::testing::MeanCudaMs(ctx, 5, run) / 1e3;
    ASSERT_TRUE(st.ok()) << st.message();
    const double flops = 4.0 * kN * static_cast<double>(kN) / 2 * d * hq;
    std::printf("cuDNN attention causal N %d D %d Hq %d Hkv %d (fused-QKV rows): %.3f ms, %.1f "
                "TFLOP/s\n", kN, d, hq, hkv, seconds * 1e3, flops / seconds / 1e12);
  }
}

}  // namespace
}  // namespace uniprefill::ops::cuda
