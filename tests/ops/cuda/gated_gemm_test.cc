// The FFN's fused gate | up GEMM (ops::cuda::GatedGemm: CUTLASS's Hopper GEMM with our gated
// epilogue over interleaved weight rows) and its unfused twin (Gemm over the same interleaved rows,
// then GatedActivationPairs): against a double loop of the CPU op's formula on odd shapes, both
// activations, strided inputs and outputs (outputs poisoned first: a missed element or a write
// past a row fails); the pairs kernel bit for bit GatedActivation on the same GEMM's halves; rows
// independent of the batch. The fused kernel runs on sm_90a builds with CUTLASS only (skipped
// elsewhere); DISABLED_Throughput times it against cuBLASLt + either activation kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "ops/cuda/cuda_dense_ops.h"
#include "ops/ops.h"
#include "testing/cuda_test_util.h"

namespace uniprefill::ops {
namespace {

namespace ut = ::uniprefill::testing;

constexpr double kBound = 1e-2;       // bf16 output rounding + f32 accumulation order
constexpr uint16_t kPoison = 0xFFFF;  // bf16 NaN

// A bf16 [rows, cols] matrix with row stride `stride`: host f32 values (bf16-representable) and
// the device copy.
struct Matrix {
  int64_t rows = 0, cols = 0, stride = 0;
  std::vector<float> host;
  DeviceBuffer dev;
  TensorView View() const {
    TensorView v = TensorView::Contiguous(dev.data(), DType::kBF16, {rows, cols}, Device::kCuda);
    v.stride[0] = stride;
    return v;
  }
  std::vector<uint16_t> Bits() const { return dev.ToHost<uint16_t>(rows * stride); }
  std::vector<float> Values() const {  // valid elements, row-major [rows, cols]
    const std::vector<uint16_t> bits = Bits();
    std::vector<float> v;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) v.push_back(ut::Bf16BitsToF32(bits[r * stride + c]));
    }
    return v;
  }
  bool PaddingIsPoison() const {
    const std::vector<uint16_t> bits = Bits();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = cols; c < stride; ++c) {
        if (bits[r * stride + c] != kPoison) return false;
      }
    }
    return true;
  }
};

Matrix Random(std::mt19937& rng, int64_t rows, int64_t cols, int64_t stride, float scale = 1) {
  Matrix m{rows, cols, stride, ut::RandomBf16Values(rng, rows * stride, -scale, scale),
           DeviceBuffer(std::max<size_t>(1, rows * stride * 2))};
  m.dev.CopyFromHost(ut::ToBf16(m.host).data(), rows * stride * 2);
  return m;
}

Matrix Poisoned(int64_t rows, int64_t cols, int64_t stride) {
  Matrix m{rows, cols, stride, {}, DeviceBuffer(std::max<size_t>(1, rows * stride * 2))};
  m.dev.Fill(0xFF);
  return m;
}

// w [2F, K] of [gate; up] rows reordered by GatedWeightRowOrder (gate j at 2j, up j at 2j + 1).
Matrix Interleaved(const Matrix& halves) {
  const int64_t F = halves.rows / 2, K = halves.cols;
  const std::vector<int64_t> order = cuda::GatedWeightRowOrder(F);
  Matrix w{halves.rows, K, K, std::vector<float>(halves.rows * K),
           DeviceBuffer(halves.rows * K * 2)};
  for (int64_t r = 0; r < halves.rows; ++r) {
    std::copy_n(halves.host.begin() + order[r] * halves.stride, K, w.host.begin() + r * K);
  }
  w.dev.CopyFromHost(ut::ToBf16(w.host).data(), w.host.size() * 2);
  return w;
}

// The CPU op's formula (ops/reference.cc) over double dot products of [gate; up] rows.
std::vector<float> Reference(const Matrix& x, const Matrix& halves, Activation act) {
  const int64_t F = halves.rows / 2, K = x.cols;
  std::vector<float> out;
  for (int64_t t = 0; t < x.rows; ++t) {
    for (int64_t j = 0; j < F; ++j) {
      double g = 0, u = 0;
      for (int64_t k = 0; k < K; ++k) {
        g += double{x.host[t * x.stride + k]} * halves.host[j * halves.stride + k];
        u += double{x.host[t * x.stride + k]} * halves.host[(F + j) * halves.stride + k];
      }
      const double z =
          act == Activation::kSilu ? g : 2 * 0.7978845608028654 * (g + 0.044715 * g * g * g);
      out.push_back(static_cast<float>(g / (1 + std::exp(-z)) * u));
    }
  }
  return out;
}

bool FusedRuns(DeviceContext& ctx) {
  std::mt19937 rng(0);
  Matrix x = Random(rng, 1, 64, 64), w = Random(rng, 16, 64, 64);
  return cuda::GatedGemmRuns(ctx, x.View(), w.View());
}

TEST(CudaGatedGemmTest, WeightRowOrderInterleavesGateAndUp) {
  EXPECT_EQ(cuda::GatedWeightRowOrder(3), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
  EXPECT_TRUE(cuda::GatedWeightRowOrder(0).empty());
}

TEST(CudaGatedGemmTest, FusedAndPairsMatchTheDoubleLoopOverShapes) {
  UP_CUDA_TEST_CONTEXT(ctx);
  const bool fused = FusedRuns(ctx);
  if (!fused) std::printf("the fused kernel is not in this build or device: pairs only\n");
  std::mt19937 rng(3);
  for (Activation act : {Activation::kSilu, Activation::kGeluTanh}) {
    // Rows past one 128-row tile and odd; F past a 256-column (128-output) tile and odd; K past
    // one 64-deep stage and not a multiple of it.
    for (int64_t T : {1, 7, 130, 333}) {
      for (int64_t F : {8, 100, 136, 300}) {
        for (int64_t K : {64, 200, 1032}) {
          const int64_t ldx = T % 2 ? K : K + 8, ldo = F % 2 ? F + 3 : F;
          Matrix x = Random(rng, T, K, ldx), halves = Random(rng, 2 * F, K, K);
          Matrix w = Interleaved(halves);
          const std::vector<float> ref = Reference(x, halves, act);
          const std::string at = "act " + std::to_string(static_cast<int>(act)) + " T " +
                                 std::to_string(T) + " F " + std::to_string(F) + " K " +
                                 std::to_string(K);
          if (fused) {
            ASSERT_TRUE(cuda::GatedGemmRuns(ctx, x.View(), w.View())) << at;
            Matrix out = Poisoned(T, F, ldo);
            cuda::GatedGemm(ctx, out.View(), x.View(), w.View(), act);
            ctx.cuda().Synchronize();
            EXPECT_LT(ut::RelativeL2Error(out.Values(), ref), kBound) << "fused " << at;
            EXPECT_TRUE(out.PaddingIsPoison()) << "fused " << at;
          }
          Matrix pairs = Poisoned(T, 2 * F, 2 * F), out = Poisoned(T, F, ldo);
          cuda::Gemm(ctx, pairs.View(), x.View(), w.View());
          cuda::GatedActivationPairs(ctx, out.View(), pairs.View(), act);
          ctx.cuda().Synchronize();
          EXPECT_LT(ut::RelativeL2Error(out.Values(), ref), kBound) << "pairs " << at;
          EXPECT_TRUE(out.PaddingIsPoison()) << "pairs " << at;
        }
      }
    }
  }
}

// Every kernel configuration (GatedGemmVariant) on shapes past its tiles, against the default's.
TEST(CudaGatedGemmTest, EveryVariantMatchesTheDoubleLoop) {
  UP_CUDA_TEST_CONTEXT(ctx);
  if (!FusedRuns(ctx)) GTEST_SKIP() << "the fused kernel needs sm_90a and CUTLASS";
  std::mt19937 rng(8);
  for (int v = 0; cuda::GatedGemmVariant(v) != nullptr; ++v) {
    for (auto [T, F, K] : {std::tuple<int64_t, int64_t, int64_t>{333, 300, 200}, {1, 8, 64},
                           {1000, 136, 1032}}) {
      Matrix x = Random(rng, T, K, K), halves = Random(rng, 2 * F, K, K);
      Matrix w = Interleaved(halves), out = Poisoned(T, F, F + 3);
      cuda::GatedGemm(ctx, out.View(), x.View(), w.View(), Activation::kSilu, v);
      ctx.cuda().Synchronize();
      EXPECT_LT(ut::RelativeL2Error(out.Values(), Reference(x, halves, Activation::kSilu)), kBound)
          << cuda::GatedGemmVariant(v) << " T " << T << " F " << F << " K " << K;
      EXPECT_TRUE(out.PaddingIsPoison()) << cuda::GatedGemmVariant(v);
    }
  }
}

// The unfused path over interleaved rows is the old path over [gate; up] bit for bit: the same
// GEMM shape (so cuBLASLt's plan and each element's sum), the same activation formula.
TEST(CudaGatedGemmTest, PairsEqualGatedActivationOnTheHalvesBitForBit) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(4);
  for (Activation act : {Activation::kSilu, Activation::kGeluTanh}) {
    for (int64_t T : {1, 5, 64}) {
      for (int64_t F : {8, 1003, 4096}) {
        const int64_t K = 256;
        Matrix x = Random(rng, T, K, K), halves = Random(rng, 2 * F, K, K, 0.5f);
        Matrix w = Interleaved(halves);
        Matrix gu = Poisoned(T, 2 * F, 2 * F), old_out = Poisoned(T, F, F);
        cuda::Gemm(ctx, gu.View(), x.View(), halves.View());
        TensorView gate = gu.View(), up = gu.View();
        gate.shape[1] = up.shape[1] = F;
        up.data = gu.dev.as<uint16_t>() + F;
        cuda::GatedActivation(ctx, old_out.View(), gate, up, act);
        Matrix pairs = Poisoned(T, 2 * F, 2 * F), out = Poisoned(T, F, F);
        cuda::Gemm(ctx, pairs.View(), x.View(), w.View());
        cuda::GatedActivationPairs(ctx, out.View(), pairs.View(), act);
        ctx.cuda().Synchronize();
        EXPECT_EQ(out.Bits(), old_out.Bits())
            << "act " << static_cast<int>(act) << " T " << T << " F " << F;
      }
    }
  }
}

// Each output element is one fixed-order sum: a row's result is the same alone or in any batch.
TEST(CudaGatedGemmTest, FusedRowsDoNotDependOnTheBatch) {
  UP_CUDA_TEST_CONTEXT(ctx);
  if (!FusedRuns(ctx)) GTEST_SKIP() << "the fused kernel needs sm_90a and CUTLASS";
  std::mt19937 rng(5);
  const int64_t T = 700, F = 520, K = 512;
  Matrix x = Random(rng, T, K, K), w = Random(rng, 2 * F, K, K);
  Matrix all = Poisoned(T, F, F);
  cuda::GatedGemm(ctx, all.View(), x.View(), w.View(), Activation::kSilu);
  ctx.cuda().Synchronize();
  const std::vector<uint16_t> all_bits = all.Bits();
  for (auto [first, n] : {std::pair<int64_t, int64_t>{517, 1}, {100, 300}, {0, 129}}) {
    TensorView xs = x.View();
    xs.data = x.dev.as<uint16_t>() + first * K;
    xs.shape[0] = n;
    Matrix part = Poisoned(n, F, F);
    cuda::GatedGemm(ctx, part.View(), xs, w.View(), Activation::kSilu);
    ctx.cuda().Synchronize();
    const std::vector<uint16_t> bits = part.Bits();
    EXPECT_TRUE(std::equal(bits.begin(), bits.end(), all_bits.begin() + first * F))
        << "rows " << first << " .. " << first + n - 1;
  }
}

// The 8B shape's FFN (K 4096, F 14336) at a prefill's row count: fused against the double loop on
// a sample of rows (the whole loop is 10^12 multiplies), and against the unfused path.
TEST(CudaGatedGemmTest, TheLlama8bShapeMatchesTheUnfusedPath) {
  UP_CUDA_TEST_CONTEXT(ctx);
  if (!FusedRuns(ctx)) GTEST_SKIP() << "the fused kernel needs sm_90a and CUTLASS";
  std::mt19937 rng(6);
  const int64_t T = 2100, F = 14336, K = 4096;
  Matrix x = Random(rng, T, K, K), w = Random(rng, 2 * F, K, K, 0.05f);
  Matrix fused = Poisoned(T, F, F), pairs = Poisoned(T, 2 * F, 2 * F), out = Poisoned(T, F, F);
  cuda::GatedGemm(ctx, fused.View(), x.View(), w.View(), Activation::kSilu);
  cuda::Gemm(ctx, pairs.View(), x.View(), w.View());
  cuda::GatedActivationPairs(ctx, out.View(), pairs.View(), Activation::kSilu);
  ctx.cuda().Synchronize();
  const std::vector<float> f = fused.Values(), u = out.Values();
  EXPECT_LT(ut::RelativeL2Error(f, u), kBound);
  for (float v : f) ASSERT_TRUE(std::isfinite(v));
}

float MedianMs(DeviceContext& ctx, const std::function<void()>& run) {
  cudaStream_t s = ctx.cuda().stream();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  run();  // warm-up (plans, attributes)
  std::vector<float> ms;
  for (int i = 0; i < 7; ++i) {
    cudaEventRecord(a, s);
    run();
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Times (median of 7) the 8B shape's gate | up + activation three ways at row counts from a
// decode step to a 32K prefill; one JSON line per row count (bench/results/gpu/).
TEST(CudaGatedGemmTest, DISABLED_Throughput) {
  UP_CUDA_TEST_CONTEXT(ctx);
  if (!FusedRuns(ctx)) GTEST_SKIP() << "the fused kernel needs sm_90a and CUTLASS";
  std::mt19937 rng(7);
  const int64_t F = 14336, K = 4096, max_rows = 32768;
  Matrix x = Random(rng, max_rows, K, K, 1.0f), w = Random(rng, 2 * F, K, K, 0.02f);
  DeviceBuffer big(max_rows * 2 * F * 2), hidden(max_rows * F * 2);
  for (int64_t T : {16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 32768}) {
    TensorView xs = x.View();
    xs.shape[0] = T;
    const TensorView h = TensorView::Contiguous(hidden.data(), DType::kBF16, {T, F}, Device::kCuda);
    const TensorView gu =
        TensorView::Contiguous(big.data(), DType::kBF16, {T, 2 * F}, Device::kCuda);
    TensorView gate = gu, up = gu;
    gate.shape[1] = up.shape[1] = F;
    up.data = static_cast<uint16_t*>(big.data()) + F;
    std::string variants;
    float fused = 1e30f;
    for (int v = 0; cuda::GatedGemmVariant(v) != nullptr; ++v) {
      const float ms =
          MedianMs(ctx, [&] { cuda::GatedGemm(ctx, h, xs, w.View(), Activation::kSilu, v); });
      if (v == 0) fused = ms;
      variants += std::string(v ? ", " : "") + "\"" + cuda::GatedGemmVariant(v) + "\": " +
                  std::to_string(ms);
    }
    const float pairs = MedianMs(ctx, [&] {
      cuda::Gemm(ctx, gu, xs, w.View());
      cuda::GatedActivationPairs(ctx, h, gu, Activation::kSilu);
    });
    const float halves = MedianMs(ctx, [&] {
      cuda::Gemm(ctx, gu, xs, w.View());
      cuda::GatedActivation(ctx, h, gate, up, Activation::kSilu);
    });
    const float gemm = MedianMs(ctx, [&] { cuda::Gemm(ctx, gu, xs, w.View()); });
    const double tflop = 2.0 * T * 2 * F * K / 1e12;
    std::printf(
        "{\"rows\": %lld, \"fused_ms\": %.4f, \"cublas_pairs_ms\": %.4f, \"cublas_halves_ms\": "
        "%.4f, \"cublas_gemm_ms\": %.4f, \"fused_tflops\": %.1f, \"cublas_gemm_tflops\": %.1f, "
        "\"variants_ms\": {%s}}\n",
        static_cast<long long>(T), fused, pairs, halves, gemm, tflop / fused * 1e3,
        tflop / gemm * 1e3, variants.c_str());
  }
}

}  // namespace
}  // namespace uniprefill::ops
