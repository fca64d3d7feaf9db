// SigmoidGateMul (backend/cuda/cuda_glue_kernels.h), Qwen3-Next's gated attention output
// x *= sigmoid(gate): the 16-byte path (aligned rows, D a multiple of 8) and the element path (a
// misaligned x) agree bit for bit, and both match a host reference within one bf16 rounding, with
// the gate read from strided rows as the model lays it out (q and gate interleaved per head).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cuda/cuda_glue_kernels.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "testing/cuda_test_util.h"

namespace uniprefill::cuda_backend {
namespace {

namespace ut = uniprefill::testing;

// x bf16 [T, H, D] at element offset `offset` of its buffer; gate bf16 rows of 2 * H * D with
// head h's gate at 2 * h * D + D (after its query).
std::vector<uint16_t> RunGate(DeviceContext& ctx, const std::vector<uint16_t>& x,
                              const std::vector<uint16_t>& gate, int64_t T, int64_t H, int64_t D,
                              int64_t offset) {
  DeviceBuffer dx((x.size() + offset) * 2), dg(gate.size() * 2);
  dx.CopyFromHost(x.data(), x.size() * 2, offset * 2);
  dg.CopyFromHost(gate.data(), gate.size() * 2);
  TensorView xv = TensorView::Contiguous(dx.as<uint16_t>() + offset, DType::kBF16, {T, H, D},
                                         Device::kCuda);
  TensorView gv = TensorView::Contiguous(dg.as<uint16_t>() + D, DType::kBF16, {T, H, D},
                                         Device::kCuda);
  gv.stride[0] = 2 * H * D;
  gv.stride[1] = 2 * D;
  SigmoidGateMul(ctx, xv, gv);
  UP_CUDA_CHECK(cudaStreamSynchronize(ctx.cuda().stream()));
  std::vector<uint16_t> all = dx.ToHost<uint16_t>(x.size() + offset);
  return std::vector<uint16_t>(all.begin() + offset, all.end());
}

TEST(SigmoidGateMulTest, VectorAndElementPathsAgreeAndMatchTheHost) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (const auto& [T, H, D] : std::vector<std::array<int64_t, 3>>{
           {1, 16, 256}, {37, 32, 128}, {300, 3, 64}, {5, 4, 40}}) {
    std::vector<uint16_t> x(T * H * D), gate(T * 2 * H * D);
    for (uint16_t& v : x) v = ut::F32ToBf16Bits(normal(rng));
    for (uint16_t& v : gate) v = ut::F32ToBf16Bits(normal(rng));
    const std::vector<uint16_t> vec = RunGate(ctx, x, gate, T, H, D, 0);
    const std::vector<uint16_t> element = RunGate(ctx, x, gate, T, H, D, 1);
    EXPECT_EQ(vec, element) << "T=" << T << " H=" << H << " D=" << D;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t d = 0; d < D; ++d) {
          const int64_t i = (t * H + h) * D + d;
          const float g = ut::Bf16BitsToF32(gate[t * 2 * H * D + 2 * h * D + D + d]);
          const float want = ut::Bf16BitsToF32(x[i]) / (1.0f + std::exp(-g));
          const float got = ut::Bf16BitsToF32(vec[i]);
          ASSERT_NEAR(got, want, std::fabs(want) * 1.0e-2f + 1e-30f)
              << "T=" << T << " row " << t << " head " << h << " column " << d;
        }
      }
    }
  }
}

}  // namespace
}  // namespace uniprefill::cuda_backend
