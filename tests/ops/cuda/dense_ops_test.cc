// The CUDA dense ops (ops/cuda/cuda_dense_ops.h) vs their CPU twins in ops/ops.h (or a double
// loop, or exact bit patterns) on the same bf16-rounded inputs: odd sizes, strided rows, in-place
// and aliased outputs, the vectorised and the scalar kernel variants, and tensors past 2^31
// elements. Outputs are poisoned with 0xFF bytes first (bf16 0xFFFF is NaN), so an element a
// kernel forgets fails, and the padding of strided outputs must still be poison afterwards.
// Error bounds: the GPU output is bf16, so each element carries a rounding error up to 2^-9
// relative (RMS ~1.1e-3 of the values): normalised error < 5e-3 for elementwise ops, norms and
// rope, < 1e-2 for GEMM (plus f32 accumulation order); exact where the op is exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "ops/cuda/cuda_dense_ops.h"
#include "ops/ops.h"
#include "testing/cuda_test_util.h"

namespace uniprefill::ops {
namespace {

namespace ut = ::uniprefill::testing;

constexpr double kElementwiseBound = 5e-3;  // bf16 output rounding (RMS ~1.1e-3)
constexpr double kGemmBound = 1e-2;         // bf16 output rounding + f32 accumulation
constexpr uint16_t kPoison = 0xFFFF;        // bf16 NaN: the bytes DeviceBuffer::Fill(0xFF) writes

DeviceContext& Cpu() {
  static std::unique_ptr<DeviceContext> ctx = DeviceContext::Cpu(2);
  return *ctx;
}

TensorView View2(void* data, DType dtype, int64_t rows, int64_t cols, int64_t stride,
                 Device device) {
  TensorView v = TensorView::Contiguous(data, dtype, {rows, cols}, device);
  v.stride[0] = stride;
  return v;
}

// A bf16 [rows, cols] matrix with row stride `stride` on the device, and its values as f32 on
// the host (padding included, so host and device layouts match element for element).
struct Bf16Matrix {
  int64_t rows = 0, cols = 0, stride = 0;
  std::vector<float> host;  // f32 [rows, stride], bf16-representable
  DeviceBuffer dev;         // bf16 [rows, stride]

  TensorView DeviceView() const {
    return View2(dev.data(), DType::kBF16, rows, cols, stride, Device::kCuda);
  }
  TensorView HostView() {
    return View2(host.data(), DType::kF32, rows, cols, stride, Device::kCpu);
  }
  size_t size() const { return static_cast<size_t>(rows * stride); }
  // The device contents, all elements (padding too) as raw bits.
  std::vector<uint16_t> Bits() const { return dev.ToHost<uint16_t>(size()); }
  // The device contents as f32, valid elements only, row-major [rows, cols].
  std::vector<float> Values() const {
    const std::vector<uint16_t> bits = Bits();
    std::vector<float> v;
    v.reserve(rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) v.push_back(ut::Bf16BitsToF32(bits[r * stride + c]));
    }
    return v;
  }
  // The host values, valid elements only.
  std::vector<float> HostValues() const {
    std::vector<float> v;
    v.reserve(rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
      v.insert(v.end(), host.begin() + r * stride, host.begin() + r * stride + cols);
    }
    return v;
  }
  // Whether every padding element on the device is still poison.
  bool PaddingIsPoison() const {
    const std::vector<uint16_t> bits = Bits();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = cols; c < stride; ++c) {
        if (bits[r * stride + c] != kPoison) return false;
      }
    }
    return true;
  }
  // Whether every padding element on the device still holds the host value.
  bool PaddingUnchanged() const {
    const std::vector<uint16_t> bits = Bits();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = cols; c < stride; ++c) {
        if (bits[r * stride + c] != ut::F32ToBf16Bits(host[r * stride + c])) return false;
      }
    }
    return true;
  }
  void Upload() { dev.CopyFromHost(ut::ToBf16(host).data(), size() * 2); }
};

Bf16Matrix RandomMatrix(std::mt19937& rng, int64_t rows, int64_t cols, int64_t stride,
                        float lo = -1.0f, float hi = 1.0f) {
  Bf16Matrix m{rows, cols, stride, ut::RandomBf16Values(rng, rows * stride, lo, hi),
               DeviceBuffer(std::max<size_t>(1, rows * stride * 2))};
  m.Upload();
  return m;
}

Bf16Matrix PoisonedMatrix(int64_t rows, int64_t cols, int64_t stride) {
  Bf16Matrix m{rows, cols, stride, std::vector<float>(rows * stride, 0.0f),
               DeviceBuffer(std::max<size_t>(1, rows * stride * 2))};
  m.dev.Fill(0xFF);
  return m;
}

// f32 values rounded to bf16 and back.
std::vector<float> RoundBf16(const std::vector<float>& v) { return ut::FromBf16(ut::ToBf16(v)); }

// ---- Gemm ----

// out [M, N] = x [M, K] @ w [N, K]^T in double precision, valid elements row-major.
std::vector<float> GemmReference(Bf16Matrix& x, Bf16Matrix& w, const std::vector<int64_t>& rows) {
  std::vector<float> out;
  out.reserve(rows.size() * w.rows);
  for (int64_t m : rows) {
    const float* xr = x.host.data() + m * x.stride;
    for (int64_t n = 0; n < w.rows; ++n) {
      const float* wr = w.host.data() + n * w.stride;
      double acc = 0;
      for (int64_t k = 0; k < x.cols; ++k) acc += static_cast<double>(xr[k]) * wr[k];
      out.push_back(static_cast<float>(acc));
    }
  }
  return out;
}

std::vector<int64_t> AllRows(int64_t n) {
  std::vector<int64_t> r(n);
  for (int64_t i = 0; i < n; ++i) r[i] = i;
  return r;
}

TEST(CudaDenseOpsTest, GemmMatchesDoubleLoopOverShapes) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(1);
  for (int64_t M : {1, 7, 64, 333}) {
    for (int64_t N : {8, 136, 1000}) {
      for (int64_t K : {64, 200, 1024}) {
        Bf16Matrix x = RandomMatrix(rng, M, K, K), w = RandomMatrix(rng, N, K, K);
        Bf16Matrix out = PoisonedMatrix(M, N, N);
        cuda::Gemm(ctx, out.DeviceView(), x.DeviceView(), w.DeviceView());
        ctx.cuda().Synchronize();
        EXPECT_LT(ut::RelativeL2Error(out.Values(), GemmReference(x, w, AllRows(M))), kGemmBound)
            << "M " << M << " N " << N << " K " << K;
      }
    }
  }
}

TEST(CudaDenseOpsTest, GemmStridedRowsOffsetPointersAndCachedPlans) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(2);
  const int64_t M = 45, N = 136, K = 200;
  // x and out rows strided (as column slices of fused buffers); x also starts one row into its
  // buffer, so its pointer is only 16-byte aligned (a different plan-cache key).
  Bf16Matrix x_all = RandomMatrix(rng, M + 1, K, K + 8), w = RandomMatrix(rng, N, K, K);
  Bf16Matrix x{M, K, K + 8, std::vector<float>(x_all.host.begin() + (K + 8), x_all.host.end()),
               DeviceBuffer()};
  TensorView x_view = x_all.DeviceView().Slice0(1, M);
  for (int round = 0; round < 2; ++round) {  // the second round reuses the cached plans
    for (bool offset_x : {false, true}) {
      Bf16Matrix out = PoisonedMatrix(M, N, N + 24);
      const TensorView xv = offset_x ? x_view : x_all.DeviceView().Slice0(0, M);
      cuda::Gemm(ctx, out.DeviceView(), xv, w.DeviceView());
      ctx.cuda().Synchronize();
      const std::vector<float> ref =
          offset_x ? GemmReference(x, w, AllRows(M)) : GemmReference(x_all, w, AllRows(M));
      EXPECT_LT(ut::RelativeL2Error(out.Values(), ref), kGemmBound)
          << "round " << round << " offset " << offset_x;
      EXPECT_TRUE(out.PaddingIsPoison()) << "round " << round << " offset " << offset_x;
    }
  }
}

TEST(CudaDenseOpsTest, GemmWithZeroRowsWritesNothing) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(3);
  Bf16Matrix w = RandomMatrix(rng, 64, 64, 64), x = RandomMatrix(rng, 1, 64, 64);
  Bf16Matrix out = PoisonedMatrix(1, 64, 64);
  cuda::Gemm(ctx, View2(out.dev.data(), DType::kBF16, 0, 64, 64, Device::kCuda),
             View2(x.dev.data(), DType::kBF16, 0, 64, 64, Device::kCuda), w.DeviceView());
  ctx.cuda().Synchronize();
  for (uint16_t b : out.Bits()) ASSERT_EQ(b, kPoison);
}

// M = 131072 rows (a 128K-token prefill chunk), and an output of more than 2^31 elements; rows
// spread over the whole range (first, last, around 2^31 / N) checked against the double loop.
TEST(CudaDenseOpsTest, GemmHandlesLongPrefillsAndHugeOutputs) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(4);
  struct Shape {
    int64_t M, N, K;
  };
  for (Shape s : {Shape{131072, 256, 128}, Shape{131072, 16392, 64}}) {
    Bf16Matrix x = RandomMatrix(rng, s.M, s.K, s.K), w = RandomMatrix(rng, s.N, s.K, s.K);
    DeviceBuffer out(static_cast<size_t>(s.M * s.N * 2));
    out.Fill(0xFF);
    cuda::Gemm(ctx, View2(out.data(), DType::kBF16, s.M, s.N, s.N, Device::kCuda), x.DeviceView(),
               w.DeviceView());
    ctx.cuda().Synchronize();
    const int64_t boundary = (int64_t{1} << 31) / s.N;
    std::vector<int64_t> rows = {0, 1, 4097, s.M / 2, s.M - 2, s.M - 1};
    for (int64_t r : {boundary - 1, boundary, boundary + 1}) {
      if (r < s.M) rows.push_back(r);
    }
    std::vector<float> got;
    for (int64_t r : rows) {
      std::vector<uint16_t> bits(s.N);
      out.CopyToHost(bits.data(), s.N * 2, static_cast<size_t>(r * s.N * 2));
      const std::vector<float> f = ut::FromBf16(bits);
      got.insert(got.end(), f.begin(), f.end());
    }
    EXPECT_LT(ut::RelativeL2Error(got, GemmReference(x, w, rows)), kGemmBound)
        << "M " << s.M << " N " << s.N << " K " << s.K;
  }
}

// ---- RmsNorm and AddRmsNorm ----

struct NormCase {
  int64_t rows, d, stride;
};
// Vectorised lane groups (D <= 1024: 8 or 16 lanes per row, or a warp with 1, 2 or 4 vectors
// per lane; row counts that leave a block part-filled), vectorised block (D > 1024) and scalar
// (D % 8 != 0, odd stride) variants.
const NormCase kNormCases[] = {
    {1, 64, 64},     {33, 64, 72},     {301, 128, 136}, {7, 256, 256},   {130, 512, 520},
    {5, 640, 640},   {64, 1000, 1000}, {3, 1000, 1008}, {9, 2000, 2000}, {17, 4096, 4096},
    {4, 4096, 4104}, {3, 8192, 8192},  {11, 100, 100},  {6, 640, 641},   {5, 4100, 4100},
};

TEST(CudaDenseOpsTest, RmsNormMatchesCpuOutOfPlaceAndInPlace) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(5);
  const float eps = 1e-6f;
  for (const NormCase& c : kNormCases) {
    for (bool in_place : {false, true}) {
      Bf16Matrix x = RandomMatrix(rng, c.rows, c.d, c.stride, -3.0f, 3.0f);
      const std::vector<float> w = ut::RandomBf16Values(rng, c.d, 0.5f, 1.5f);
      DeviceBuffer w_dev = DeviceBuffer::FromHost(w);
      Bf16Matrix out = PoisonedMatrix(c.rows, c.d, c.stride);
      Bf16Matrix& dst = in_place ? x : out;
      cuda::RmsNorm(ctx, dst.DeviceView(), x.DeviceView(), w_dev.as<float>(), eps);
      ctx.cuda().Synchronize();
      std::vector<float> ref = x.host;
      ops::RmsNorm(Cpu(), View2(ref.data(), DType::kF32, c.rows, c.d, c.stride, Device::kCpu),
                   x.HostView(), w.data(), eps);
      Bf16Matrix ref_m{c.rows, c.d, c.stride, ref, DeviceBuffer()};
      EXPECT_LT(ut::RelativeL2Error(dst.Values(), ref_m.HostValues()), kElementwiseBound)
          << c.rows << "x" << c.d << " stride " << c.stride << " in place " << in_place;
      EXPECT_TRUE(in_place ? x.PaddingUnchanged() : out.PaddingIsPoison())
          << c.rows << "x" << c.d << " in place " << in_place;
    }
  }
}

// q/k-norm in place on the heads of a fused QKV row: a [T, H, D] view with token stride
// > H * D, which no [T * H, D] view describes.
TEST(CudaDenseOpsTest, RmsNormOnStridedHeadViewInPlace) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(6);
  for (int64_t D : {128, 256, 100}) {
    const int64_t T = 37, H = 4, row = 3 * H * D;  // q, k, v heads per token
    Bf16Matrix qkv = RandomMatrix(rng, T, row, row, -2.0f, 2.0f);
    const std::vector<float> w = ut::RandomBf16Values(rng, D, 0.5f, 1.5f);
    DeviceBuffer w_dev = DeviceBuffer::FromHost(w);
    // k heads: elements [H * D, 2 * H * D) of every row.
    TensorView k = TensorView::Contiguous(qkv.dev.as<uint16_t>() + H * D, DType::kBF16, {T, H, D},
                                          Device::kCuda);
    k.stride[0] = row;
    cuda::RmsNorm(ctx, k, k, w_dev.as<float>(), 1e-6f);
    ctx.cuda().Synchronize();
    std::vector<float> ref = qkv.host;
    // On the host the k heads of one token are contiguous: norm each token's [H, D] block.
    for (int64_t t = 0; t < T; ++t) {
      TensorView blk = View2(ref.data() + t * row + H * D, DType::kF32, H, D, D, Device::kCpu);
      ops::RmsNorm(Cpu(), blk, blk, w.data(), 1e-6f);
    }
    const std::vector<float> got = qkv.Values();
    EXPECT_LT(ut::RelativeL2Error(got, ref), kElementwiseBound) << "D " << D;
    // q and v heads untouched.
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < row; ++i) {
        if (i >= H * D && i < 2 * H * D) continue;
        ASSERT_EQ(got[t * row + i], qkv.host[t * row + i]) << "D " << D << " t " << t << " i " << i;
      }
    }
  }
}

TEST(CudaDenseOpsTest, AddRmsNormUpdatesResidualExactlyAndNormalisesIt) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(7);
  const float eps = 1e-6f;
  for (const NormCase& c : kNormCases) {
    for (bool out_is_x : {false, true}) {
      Bf16Matrix residual = RandomMatrix(rng, c.rows, c.d, c.stride, -3.0f, 3.0f);
      Bf16Matrix x = RandomMatrix(rng, c.rows, c.d, c.d, -3.0f, 3.0f);
      const std::vector<float> w = ut::RandomBf16Values(rng, c.d, 0.5f, 1.5f);
      DeviceBuffer w_dev = DeviceBuffer::FromHost(w);
      Bf16Matrix out = PoisonedMatrix(c.rows, c.d, c.stride);
      Bf16Matrix& dst = out_is_x ? x : out;
      cuda::AddRmsNorm(ctx, dst.DeviceView(), residual.DeviceView(), x.DeviceView(),
                       w_dev.as<float>(), eps);
      ctx.cuda().Synchronize();
      // residual' = bf16(residual + x), exactly.
      Bf16Matrix sum{c.rows, c.d, c.d, std::vector<float>(c.rows * c.d), DeviceBuffer()};
      for (int64_t r = 0; r < c.rows; ++r) {
        for (int64_t i = 0; i < c.d; ++i) {
          sum.host[r * c.d + i] = residual.host[r * c.stride + i] + x.host[r * c.d + i];
        }
      }
      sum.host = RoundBf16(sum.host);
      const std::vector<float> new_residual = residual.Values();
      ASSERT_EQ(new_residual, sum.host) << c.rows << "x" << c.d << " stride " << c.stride;
      std::vector<float> ref(c.rows * c.d);
      ops::RmsNorm(Cpu(), View2(ref.data(), DType::kF32, c.rows, c.d, c.d, Device::kCpu),
                   sum.HostView(), w.data(), eps);
      EXPECT_LT(ut::RelativeL2Error(dst.Values(), ref), kElementwiseBound)
          << c.rows << "x" << c.d << " stride " << c.stride << " out is x " << out_is_x;
      EXPECT_TRUE(residual.PaddingUnchanged()) << c.rows << "x" << c.d;
      if (!out_is_x) {
        EXPECT_TRUE(out.PaddingIsPoison()) << c.rows << "x" << c.d;
      }
    }
  }
}

// ---- Rope ----

TEST(CudaDenseOpsTest, RopeMatchesCpuForBothStylesAndPartialRotation) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(8);
  struct Case {
    int64_t T, H, D;
    int rot;
    int64_t pad;  // extra elements per token row
  };
  // rot % 4 == 0 with even strides: the bf16x2 variant; rot = 6 or an odd stride: scalar.
  const Case cases[] = {{1, 1, 64, 64, 0},    {5, 4, 128, 128, 16}, {33, 8, 128, 64, 0},
                        {17, 2, 256, 256, 8}, {9, 3, 256, 64, 0},   {12, 3, 16, 6, 0},
                        {7, 2, 64, 64, 1}};
  std::uniform_int_distribution<int32_t> pos_dist(0, 131071);
  for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kAdjacent}) {
    for (const Case& c : cases) {
      const int64_t stride = c.H * c.D + c.pad;
      Bf16Matrix x = RandomMatrix(rng, c.T, c.H * c.D, stride, -2.0f, 2.0f);
      std::vector<int32_t> pos(c.T);
      for (int32_t& p : pos) p = pos_dist(rng);
      pos[0] = 131071;
      if (c.T > 1) pos[1] = 0;
      const std::vector<float> inv_freq = RopeInvFreq(c.T % 2 ? 1e6 : 1e4, c.rot);
      DeviceBuffer pos_dev = DeviceBuffer::FromHost(pos),
                   inv_dev = DeviceBuffer::FromHost(inv_freq);
      TensorView xv =
          TensorView::Contiguous(x.dev.data(), DType::kBF16, {c.T, c.H, c.D}, Device::kCuda);
      xv.stride[0] = stride;
      cuda::Rope(ctx, xv, pos_dev.as<int32_t>(), inv_dev.as<float>(), c.rot, style);
      ctx.cuda().Synchronize();

      std::vector<float> ref = x.host;
      TensorView rv = TensorView::Contiguous(ref.data(), DType::kF32, {c.T, c.H, c.D});
      rv.stride[0] = stride;
      ops::Rope(Cpu(), rv, pos.data(), inv_freq.data(), c.rot, style);
      // Rotated dims vs the CPU; the rest (dims >= rot and the padding) bit-identical to before.
      const std::vector<uint16_t> bits = x.Bits();
      std::vector<float> got_rot, ref_rot;
      for (int64_t t = 0; t < c.T; ++t) {
        for (int64_t i = 0; i < stride; ++i) {
          const int64_t e = t * stride + i;
          const bool rotated = i < c.H * c.D && i % c.D < c.rot;
          if (rotated) {
            got_rot.push_back(ut::Bf16BitsToF32(bits[e]));
            ref_rot.push_back(ref[e]);
          } else {
            ASSERT_EQ(bits[e], ut::F32ToBf16Bits(x.host[e]))
                << "untouched element " << i << " of token " << t << " changed";
          }
        }
      }
      EXPECT_LT(ut::RelativeL2Error(got_rot, ref_rot), kElementwiseBound)
          << "style " << static_cast<int>(style) << " T " << c.T << " H " << c.H << " D " << c.D
          << " rot " << c.rot << " pad " << c.pad;
    }
  }
}

// ---- GatedActivation ----

TEST(CudaDenseOpsTest, GatedActivationMatchesCpuOnFusedHalvesAndInPlace) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(9);
  for (Activation act : {Activation::kSilu, Activation::kGeluTanh}) {
    // Few rows of a wide F (a decode step's 14336) split each row over several blocks; 14341
    // takes the element-wise kernel.
    for (int64_t T : {1, 3, 37}) {
      for (int64_t F : {8, 1000, 1003, 4096, 14336, 14341}) {
        for (bool in_place : {false, true}) {
          // gate | up: halves of one fused [T, 2F] GEMM output.
          Bf16Matrix gu = RandomMatrix(rng, T, 2 * F, 2 * F, -6.0f, 6.0f);
          TensorView gate = View2(gu.dev.data(), DType::kBF16, T, F, 2 * F, Device::kCuda);
          TensorView up =
              View2(gu.dev.as<uint16_t>() + F, DType::kBF16, T, F, 2 * F, Device::kCuda);
          Bf16Matrix out = PoisonedMatrix(T, F, F);
          const TensorView dst = in_place ? gate : out.DeviceView();
          cuda::GatedActivation(ctx, dst, gate, up, act);
          ctx.cuda().Synchronize();

          std::vector<float> ref(T * F);
          ops::GatedActivation(Cpu(), View2(ref.data(), DType::kF32, T, F, F, Device::kCpu),
                               View2(gu.host.data(), DType::kF32, T, F, 2 * F, Device::kCpu),
                               View2(gu.host.data() + F, DType::kF32, T, F, 2 * F, Device::kCpu),
                               act);
          std::vector<float> got;
          if (in_place) {
            const std::vector<float> all = gu.Values();
            for (int64_t t = 0; t < T; ++t) {
              got.insert(got.end(), all.begin() + t * 2 * F, all.begin() + t * 2 * F + F);
              for (int64_t i = F; i < 2 * F; ++i) {  // up untouched
                ASSERT_EQ(all[t * 2 * F + i], gu.host[t * 2 * F + i]) << "t " << t << " i " << i;
              }
            }
          } else {
            got = out.Values();
          }
          EXPECT_LT(ut::RelativeL2Error(got, ref), kElementwiseBound)
              << "act " << static_cast<int>(act) << " T " << T << " F " << F << " in place "
              << in_place;
        }
      }
    }
  }
}

// ---- Embedding, Add ----

TEST(CudaDenseOpsTest, EmbeddingMatchesCpuWithRepeatedIds) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(10);
  for (int64_t D : {64, 1000, 6}) {
    const int64_t V = 50, T = 23;
    Bf16Matrix table = RandomMatrix(rng, V, D, D);
    std::vector<int32_t> ids(T);
    std::uniform_int_distribution<int32_t> id_dist(0, V - 1);
    for (int32_t& id : ids) id = id_dist(rng);
    ids[3] = ids[7] = ids[11];  // repeats
    ids[0] = V - 1;
    DeviceBuffer ids_dev = DeviceBuffer::FromHost(ids);
    Bf16Matrix out = PoisonedMatrix(T, D, D + 8);
    const float scale = std::sqrt(640.0f);
    cuda::Embedding(ctx, out.DeviceView(), table.DeviceView(), ids_dev.as<int32_t>(), scale);
    ctx.cuda().Synchronize();
    const std::vector<uint16_t> table_bits = ut::ToBf16(table.host);
    std::vector<float> ref(T * D);
    ops::Embedding(
        Cpu(), View2(ref.data(), DType::kF32, T, D, D, Device::kCpu),
        View2(const_cast<uint16_t*>(table_bits.data()), DType::kBF16, V, D, D, Device::kCpu),
        ids.data(), scale);
    EXPECT_LT(ut::RelativeL2Error(out.Values(), ref), kElementwiseBound) << "D " << D;
    EXPECT_EQ(out.Values(), RoundBf16(ref)) << "D " << D;  // one f32 product, rounded once
    EXPECT_TRUE(out.PaddingIsPoison()) << "D " << D;
  }
}

// A vocabulary shard (tensor parallel): the table holds ids first .. first + V - 1; the rows of
// ids it holds are the whole table's, every other row is zeros, so the ranks' rows sum to the
// whole table's lookup.
TEST(CudaDenseOpsTest, EmbeddingOfAVocabularyShardZeroesOtherIds) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(12);
  const int64_t V = 60, D = 72, T = 31, shards = 3, per = V / shards;
  Bf16Matrix table = RandomMatrix(rng, V, D, D);
  std::vector<int32_t> ids(T);
  std::uniform_int_distribution<int32_t> id_dist(0, V - 1);
  for (int32_t& id : ids) id = id_dist(rng);
  ids[0] = 0;
  ids[1] = V - 1;
  ids[2] = per;  // a shard's first and last rows
  ids[3] = per - 1;
  DeviceBuffer ids_dev = DeviceBuffer::FromHost(ids);
  const float scale = 2.0f;
  Bf16Matrix whole = PoisonedMatrix(T, D, D);
  cuda::Embedding(ctx, whole.DeviceView(), table.DeviceView(), ids_dev.as<int32_t>(), scale);
  std::vector<float> sum(T * D, 0.0f);
  for (int64_t s = 0; s < shards; ++s) {
    Bf16Matrix part = PoisonedMatrix(T, D, D + 4);
    const TensorView rows = table.DeviceView().Slice0(s * per, per);
    cuda::Embedding(ctx, part.DeviceView(), rows, ids_dev.as<int32_t>(), scale,
                    static_cast<int32_t>(s * per));
    ctx.cuda().Synchronize();
    const std::vector<float> got = part.Values();
    for (int64_t t = 0; t < T; ++t) {
      const bool held = ids[t] >= s * per && ids[t] < (s + 1) * per;
      for (int64_t d = 0; d < D; ++d) {
        if (!held) EXPECT_EQ(got[t * D + d], 0.0f) << "shard " << s << " row " << t;
        sum[t * D + d] += got[t * D + d];
      }
    }
    EXPECT_TRUE(part.PaddingIsPoison()) << "shard " << s;
  }
  EXPECT_EQ(sum, whole.Values());
}

TEST(CudaDenseOpsTest, AddIsTheRoundedF32SumInPlaceAndStrided) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(11);
  for (int64_t R : {1, 5, 300}) {
    for (int64_t D : {8, 640, 1001}) {
      for (bool in_place : {false, true}) {
        Bf16Matrix a = RandomMatrix(rng, R, D, D + 8, -4.0f, 4.0f);
        Bf16Matrix b = RandomMatrix(rng, R, D, D);
        Bf16Matrix out = PoisonedMatrix(R, D, D);
        Bf16Matrix& dst = in_place ? a : out;
        cuda::Add(ctx, dst.DeviceView(), a.DeviceView(), b.DeviceView());
        ctx.cuda().Synchronize();
        std::vector<float> ref(R * D);
        ops::Add(Cpu(), View2(ref.data(), DType::kF32, R, D, D, Device::kCpu), a.HostView(),
                 b.HostView());
        // f32 sums of bf16 values, rounded once: bit-exact.
        EXPECT_EQ(dst.Values(), RoundBf16(ref)) << R << "x" << D << " in place " << in_place;
      }
    }
  }
}

// ---- GatherRows ----

// Gathers rows [5, 0, 5, 2, last, 1, 5] of a strided x for each dtype; D picks 16-, 4- and
// 2-byte copy units.
TEST(CudaDenseOpsTest, GatherRowsCopiesRepeatedAndOutOfOrderRowsExactly) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(12);
  struct Case {
    DType dtype;
    int64_t D, x_stride;
  };
  const Case cases[] = {{DType::kBF16, 64, 72}, {DType::kBF16, 64, 64}, {DType::kBF16, 3, 5},
                        {DType::kBF16, 6, 6},   {DType::kF32, 5, 7},    {DType::kF32, 64, 68},
                        {DType::kI32, 64, 64},  {DType::kI32, 1, 1}};
  const int64_t X_rows = 9;
  const std::vector<int32_t> rows = {5, 0, 5, 2, static_cast<int32_t>(X_rows - 1), 1, 5};
  const int64_t R = static_cast<int64_t>(rows.size());
  DeviceBuffer rows_dev = DeviceBuffer::FromHost(rows);
  for (const Case& c : cases) {
    const int64_t elem = c.dtype == DType::kBF16 ? 2 : 4;
    std::vector<uint8_t> x(X_rows * c.x_stride * elem);
    std::uniform_int_distribution<int> byte(0, 255);
    for (uint8_t& v : x) v = static_cast<uint8_t>(byte(rng));
    DeviceBuffer x_dev = DeviceBuffer::FromHost(x);
    const int64_t out_stride = c.D + 8;
    DeviceBuffer out_dev(R * out_stride * elem);
    out_dev.Fill(0xFF);
    cuda::GatherRows(ctx, View2(out_dev.data(), c.dtype, R, c.D, out_stride, Device::kCuda),
                     View2(x_dev.data(), c.dtype, X_rows, c.D, c.x_stride, Device::kCuda),
                     rows_dev.as<int32_t>());
    ctx.cuda().Synchronize();
    const std::vector<uint8_t> got = out_dev.ToHost<uint8_t>(R * out_stride * elem);
    for (int64_t r = 0; r < R; ++r) {
      EXPECT_EQ(0, std::memcmp(got.data() + r * out_stride * elem,
                               x.data() + rows[r] * c.x_stride * elem, c.D * elem))
          << DTypeName(c.dtype) << " D " << c.D << " row " << r;
      for (int64_t i = c.D * elem; i < out_stride * elem; ++i) {
        ASSERT_EQ(got[r * out_stride * elem + i], 0xFF) << "padding written, row " << r;
      }
    }
    if (c.dtype == DType::kF32) {  // and the same as the CPU op
      std::vector<float> x_f(x.size() / 4), ref(R * c.D);
      std::memcpy(x_f.data(), x.data(), x.size());
      ops::GatherRows(Cpu(), View2(ref.data(), DType::kF32, R, c.D, c.D, Device::kCpu),
                      View2(x_f.data(), DType::kF32, X_rows, c.D, c.x_stride, Device::kCpu),
                      rows.data());
      for (int64_t r = 0; r < R; ++r) {
        EXPECT_EQ(0, std::memcmp(got.data() + r * out_stride * 4, ref.data() + r * c.D, c.D * 4));
      }
    }
  }
}

// ---- Conversions ----

bool IsBf16NaN(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x007f) != 0; }

TEST(CudaDenseOpsTest, F32ToBf16RoundsToNearestEvenIncludingSpecials) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(13);
  const uint32_t specials[] = {
      0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u,
      0x7f800001u,                            // NaNs (quiet, signalling)
      0x00000001u, 0x807fffffu, 0x00408000u,  // denormals
      0x3f808000u, 0x3f818000u, 0x3f80c000u,  // ties to even (down, up), above half
      0x3f807fffu, 0x7f7fffffu, 0xff7fffffu,  // just below a tie, max (rounds to inf)
      0x7f7f7fffu, 0x3f800000u, 0xbf800001u};
  for (int64_t n : {int64_t{1}, int64_t{19}, int64_t{8 * 1000 + 5}}) {
    for (int64_t offset : {0, 1}) {  // offset 1: unaligned pointers, the scalar variant
      std::vector<float> x(n + offset);
      std::uniform_real_distribution<float> dist(-1e4f, 1e4f);
      for (float& v : x) v = dist(rng);
      for (int64_t i = 0; i < std::min<int64_t>(n, std::size(specials)); ++i) {
        std::memcpy(&x[offset + i], &specials[i], 4);
      }
      DeviceBuffer x_dev = DeviceBuffer::FromHost(x);
      DeviceBuffer out_dev((n + offset) * 2);
      out_dev.Fill(0xFF);
      cuda::F32ToBf16(ctx, out_dev.as<uint16_t>() + offset, x_dev.as<float>() + offset, n);
      ctx.cuda().Synchronize();
      const std::vector<uint16_t> got = out_dev.ToHost<uint16_t>(n + offset);
      for (int64_t i = 0; i < n; ++i) {
        const float v = x[offset + i];
        const uint16_t want = ut::F32ToBf16Bits(v);
        if (std::isnan(v)) {
          ASSERT_TRUE(IsBf16NaN(got[offset + i])) << "element " << i;
        } else {
          uint32_t u;
          std::memcpy(&u, &v, 4);
          ASSERT_EQ(got[offset + i], want) << "element " << i << " bits 0x" << std::hex << u;
        }
      }
    }
  }
}

TEST(CudaDenseOpsTest, Bf16ToF32IsExactForEveryBitPattern) {
  UP_CUDA_TEST_CONTEXT(ctx);
  for (int64_t offset : {0, 1}) {
    const int64_t n = 65536;
    std::vector<uint16_t> x(n + offset);
    for (int64_t i = 0; i < n; ++i) x[offset + i] = static_cast<uint16_t>(i);
    DeviceBuffer x_dev = DeviceBuffer::FromHost(x);
    DeviceBuffer out_dev((n + offset) * 4);
    out_dev.Fill(0xFF);
    cuda::Bf16ToF32(ctx, out_dev.as<float>() + offset, x_dev.as<uint16_t>() + offset, n);
    ctx.cuda().Synchronize();
    const std::vector<uint32_t> got = out_dev.ToHost<uint32_t>(n + offset);
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t want = static_cast<uint32_t>(i) << 16;
      if (IsBf16NaN(static_cast<uint16_t>(i))) {
        float f;
        std::memcpy(&f, &got[offset + i], 4);
        ASSERT_TRUE(std::isnan(f)) << "bf16 0x" << std::hex << i;
      } else {
        ASSERT_EQ(got[offset + i], want) << "bf16 0x" << std::hex << i;
      }
    }
  }
}

// ---- FillRandomBf16 ----

std::vector<float> FillAndRead(DeviceContext& ctx, int64_t n, int64_t offset, uint64_t seed,
                               float scale) {
  DeviceBuffer b((n + offset) * 2);
  b.Fill(0xFF);
  cuda::FillRandomBf16(ctx, b.as<uint16_t>() + offset, n, seed, scale);
  ctx.cuda().Synchronize();
  std::vector<uint16_t> bits = b.ToHost<uint16_t>(n + offset);
  for (int64_t i = 0; i < offset; ++i) EXPECT_EQ(bits[i], kPoison);
  bits.erase(bits.begin(), bits.begin() + offset);
  return ut::FromBf16(bits);
}

TEST(CudaDenseOpsTest, FillRandomBf16IsAFunctionOfSeedAndIndexUniformInRange) {
  UP_CUDA_TEST_CONTEXT(ctx);
  const int64_t n = 1 << 20;
  const float scale = 0.02f;
  const std::vector<float> a = FillAndRead(ctx, n, 0, 7, scale);
  // Deterministic, and element i depends only on (seed, i): a shorter fill, or one from an
  // unaligned pointer (the scalar variant), gives the same values.
  EXPECT_TRUE(FillAndRead(ctx, n, 0, 7, scale) == a);
  const std::vector<float> prefix = FillAndRead(ctx, 1001, 1, 7, scale);
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), a.begin()));
  const std::vector<float> other = FillAndRead(ctx, n, 0, 8, scale);
  int64_t same = 0;
  double sum = 0, sum_sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(a[i] >= -scale && a[i] < scale) << "element " << i << " = " << a[i];
    same += a[i] == other[i];
    sum += a[i];
    sum_sq += static_cast<double>(a[i]) * a[i];
  }
  EXPECT_LT(same, n / 100) << "seeds 7 and 8 give nearly the same values";
  // Uniform on [-s, s): mean 0 (std error s / sqrt(3n) ~ 1.1e-5), variance s^2 / 3.
  EXPECT_LT(std::fabs(sum / n), 1e-4);
  EXPECT_NEAR(sum_sq / n, scale * scale / 3, 0.01 * scale * scale / 3);
}

// ---- Indexing past 2^31 elements ----

// Row-wise and flat kernels on tensors of more than 2^31 elements (64-bit offsets everywhere):
// FillRandomBf16 makes the inputs on the device, Add and RmsNorm run over all of them, and the
// last rows are checked on the host.
TEST(CudaDenseOpsTest, ElementwiseOpsIndexPast2To31Elements) {
  UP_CUDA_TEST_CONTEXT(ctx);
  std::mt19937 rng(14);
  const int64_t D = 4096, R = (int64_t{1} << 31) / D + 3;  // 2^31 + 3 * 4096 elements
  const size_t bytes = static_cast<size_t>(R * D * 2);
  DeviceBuffer a(bytes), b(bytes), out(bytes);
  for (DeviceBuffer* buf : {&a, &b, &out}) buf->Fill(0xFF);
  cuda::FillRandomBf16(ctx, a.data(), R * D, 1, 1.0f);
  cuda::FillRandomBf16(ctx, b.data(), R * D, 2, 1.0f);
  const TensorView av = a.View(DType::kBF16, {R, D}), bv = b.View(DType::kBF16, {R, D}),
                   ov = out.View(DType::kBF16, {R, D});
  cuda::Add(ctx, ov, av, bv);
  ctx.cuda().Synchronize();
  const int64_t check_rows = 4;
  const size_t tail_n = static_cast<size_t>(check_rows * D);
  auto read_tail = [&](const DeviceBuffer& buf) {
    std::vector<uint16_t> bits(tail_n);
    buf.CopyToHost(bits.data(), tail_n * 2, bytes - tail_n * 2);
    return ut::FromBf16(bits);
  };
  const std::vector<float> a_tail = read_tail(a), b_tail = read_tail(b);
  double a_sum = 0;
  for (size_t i = 0; i < tail_n; ++i) {
    ASSERT_TRUE(a_tail[i] >= -1.0f && a_tail[i] < 1.0f) << "fill element " << i;
    ASSERT_TRUE(b_tail[i] >= -1.0f && b_tail[i] < 1.0f) << "fill element " << i;
    a_sum += a_tail[i];
  }
  EXPECT_LT(std::fabs(a_sum / tail_n), 0.05);
  std::vector<float> sum(tail_n);
  for (size_t i = 0; i < tail_n; ++i) sum[i] = a_tail[i] + b_tail[i];
  EXPECT_EQ(read_tail(out), RoundBf16(sum));

  const std::vector<float> w = ut::RandomBf16Values(rng, D, 0.5f, 1.5f);
  DeviceBuffer w_dev = DeviceBuffer::FromHost(w);
  cuda::RmsNorm(ctx, ov, av, w_dev.as<float>(), 1e-6f);
  ctx.cuda().Synchronize();
  std::vector<float> ref(tail_n);
  ops::RmsNorm(
      Cpu(), View2(ref.data(), DType::kF32, check_rows, D, D, Device::kCpu),
      View2(const_cast<float*>(a_tail.data()), DType::kF32, check_rows, D, D, Device::kCpu),
      w.data(), 1e-6f);
  EXPECT_LT(ut::RelativeL2Error(read_tail(out), ref), kElementwiseBound);
}

}  // namespace
}  // namespace uniprefill::ops
