// The CUDA Gated DeltaNet ops (ops/cuda/cuda_linear_attention.h) vs their CPU twins in
// ops/linear_attention_ops.h on the same inputs (rounded to bf16 where the GPU reads bf16): odd
// lengths around the 64-token chunk, Hv / Hk of 1 and 2, Dk = Dv = 128 (Qwen3-Next) and 32, all
// three delta-rule kernels (f32 chunked, recurrent, tensor-core chunked), packed batches with
// permuted state slots, and a prefill continued by 1-row decodes against one CPU call on the whole
// sequence. q, k, v are column ranges of one fused
// [T, 2 Hk Dk + Hv Dv] buffer, as in the mixer. Outputs are poisoned with 0xFF bytes first (NaN in
// bf16 and f32), so an element a kernel forgets fails (RelativeL2Error is inf on NaN).
// Error bounds (normalised, ||gpu - cpu|| / ||cpu||):
//   f32 activations: < 1e-4 (f32 rounding, different summation orders; the chunked form
//                    reassociates the recurrence, measured ~2e-7 against a double loop);
//   bf16 activations: outputs < 1e-2 (output rounding, RMS ~1.1e-3, on top of the f32 math);
//   the f32 states: < 1e-4 for either dtype (the same inputs and f32 math); the conv state is a
//                   copy of inputs and must match exactly.
//   the tensor-core delta rule (kChunkedTensorCore, and kAuto on bf16 calls of > 64 rows):
//                   outputs < 8e-3, states < 6e-3. Its products round four f32 operands to bf16 per chunk (the
//                   state S0, the triangular inverse, the right-hand side, the deltas; f32
//                   activations too), each a relative 2^-9 (RMS ~1.1e-3) that partly averages out
//                   in the dot products; the states carry these errors from chunk to chunk
//                   (decayed), the outputs add their own bf16 rounding. Measured on an H200 over
//                   every case below: outputs <= 3.8e-3, states <= 3.1e-3 (2.3e-3 at 128K
//                   tokens); the bounds leave 2x. A wrong gate, mask or row gives O(1) errors.
//                   The measured errors are printed ("[tc] ...").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "ops/cuda/cuda_linear_attention.h"
#include "ops/linear_attention_ops.h"
#include "testing/cuda_test_util.h"

namespace uniprefill::ops {
namespace {

namespace ut = ::uniprefill::testing;
using cuda::DeltaRuleKernel;
using cuda::LinearAttentionBatch;

constexpr double kF32Bound = 1e-4;
constexpr double kBf16Bound = 1e-2;
constexpr double kStateBound = 1e-4;
constexpr double kTcOutBound = 8e-3;
constexpr double kTcStateBound = 6e-3;
constexpr float kL2Eps = 1e-6f;

DeviceContext& Cpu() {
  static std::unique_ptr<DeviceContext> ctx = DeviceContext::Cpu(2);
  return *ctx;
}

const char* Name(DType t) { return t == DType::kBF16 ? "bf16" : "f32"; }
double OutBound(DType t) { return t == DType::kBF16 ? kBf16Bound : kF32Bound; }
size_t ElemBytes(DType t) { return t == DType::kBF16 ? 2 : 4; }

// The values as a GPU kernel of this dtype reads them.
std::vector<float> AsRead(std::vector<float> v, DType dtype) {
  if (dtype == DType::kBF16) v = ut::FromBf16(ut::ToBf16(v));
  return v;
}
DeviceBuffer Upload(const std::vector<float>& v, DType dtype) {
  if (dtype == DType::kF32) return DeviceBuffer::FromHost(v);
  return DeviceBuffer::FromHost(ut::ToBf16(v));
}
std::vector<float> Download(const DeviceBuffer& b, size_t n, DType dtype) {
  if (dtype == DType::kF32) return b.ToHost<float>(n);
  return ut::FromBf16(b.ToHost<uint16_t>(n));
}
DeviceBuffer Poisoned(size_t elems, DType dtype) {
  DeviceBuffer b(std::max<size_t>(1, elems * ElemBytes(dtype)));
  b.Fill(0xFF);
  return b;
}
DeviceBuffer UploadInts(const std::vector<int32_t>& v) { return DeviceBuffer::FromHost(v); }

// A view of `shape` starting `offset` elements into base, with row stride `row_stride`.
TensorView View(const void* base, DType dtype, Device device, int64_t offset,
                std::initializer_list<int64_t> shape, int64_t row_stride) {
  TensorView v = TensorView::Contiguous(
      static_cast<char*>(const_cast<void*>(base)) + offset * ElemBytes(dtype), dtype, shape,
      device);
  v.stride[0] = row_stride;
  return v;
}

std::vector<int32_t> CuSeqlens(const std::vector<int>& lens) {
  std::vector<int32_t> cu(lens.size() + 1, 0);
  for (size_t b = 0; b < lens.size(); ++b) cu[b + 1] = cu[b] + lens[b];
  return cu;
}

// Valid elements [rows, cols] of a host matrix with row stride `stride`, row-major.
std::vector<float> Valid(const std::vector<float>& m, int64_t rows, int64_t cols, int64_t stride) {
  std::vector<float> v;
  v.reserve(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    v.insert(v.end(), m.begin() + r * stride, m.begin() + r * stride + cols);
  }
  return v;
}

// ---- Causal conv ----------------------------------------------------------------------------

constexpr int64_t kConvChannels = 300;  // not a multiple of the 128-thread block
constexpr int64_t kConvXStride = kConvChannels + 5;
constexpr int64_t kConvOutStride = kConvChannels + 3;

// GPU conv of one packed batch. x f32 [T, kConvXStride] (read as dtype); returns out f32
// [T, kConvOutStride] (padding included: it must still be poison).
std::vector<float> GpuConv(DeviceContext& ctx, DType dtype, const std::vector<float>& x, int64_t T,
                           const DeviceBuffer& weight, int64_t K, DeviceBuffer& state,
                           const std::vector<int32_t>& cu, const std::vector<int32_t>& slots,
                           int batch, int max_seqlen, const std::vector<int32_t>& seq_lens = {}) {
  const DeviceBuffer dx = Upload(x, dtype);
  DeviceBuffer out = Poisoned(T * kConvOutStride, dtype);
  const DeviceBuffer dcu = UploadInts(cu), dslots = UploadInts(slots), dlens = UploadInts(seq_lens);
  LinearAttentionBatch seqs;
  seqs.cu_seqlens = cu.empty() ? nullptr : dcu.as<int32_t>();
  seqs.state_slots = slots.empty() ? nullptr : dslots.as<int32_t>();
  seqs.seq_lens = seq_lens.empty() ? nullptr : dlens.as<int32_t>();
  seqs.batch = batch;
  seqs.max_seqlen = max_seqlen;
  cuda::CausalConv1dSilu(
      ctx, View(out.data(), dtype, Device::kCuda, 0, {T, kConvChannels}, kConvOutStride),
      View(dx.data(), dtype, Device::kCuda, 0, {T, kConvChannels}, kConvXStride),
      weight.View(DType::kF32, {kConvChannels, K}), state.as<float>(), seqs);
  ctx.cuda().Synchronize();
  return Download(out, T * kConvOutStride, dtype);
}

// CPU conv of rows [begin, begin + n) of x into ref (f32 [*, kConvOutStride]).
void CpuConv(const std::vector<float>& x, int64_t begin, int64_t n, std::vector<float>& weight,
             int64_t K, float* state, std::vector<float>& ref) {
  ops::CausalConv1dSilu(Cpu(),
                        View(ref.data(), DType::kF32, Device::kCpu, begin * kConvOutStride,
                             {n, kConvChannels}, kConvOutStride),
                        View(x.data(), DType::kF32, Device::kCpu, begin * kConvXStride,
                             {n, kConvChannels}, kConvXStride),
                        TensorView::Contiguous(weight.data(), DType::kF32, {kConvChannels, K}),
                        state);
}

bool PaddingIsNan(const std::vector<float>& out, int64_t rows, int64_t cols, int64_t stride) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = cols; c < stride; ++c) {
      if (!std::isnan(out[r * stride + c])) return false;
    }
  }
  return true;
}

TEST(CudaCausalConvTest, PrefillThenDecodesMatchCpuOverLengths) {
  UP_CUDA_TEST_CONTEXT(ctx);
  constexpr int64_t K = 4, kDecodes = 3;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t T : {1, 5, 63, 64, 65, 200, 1000}) {
      SCOPED_TRACE(std::string(Name(dtype)) + " T=" + std::to_string(T));
      std::mt19937 rng(static_cast<uint32_t>(T) * 7 + (dtype == DType::kBF16));
      const int64_t rows = T + kDecodes;
      const std::vector<float> x =
          AsRead(ut::RandomBf16Values(rng, rows * kConvXStride, -2.0f, 2.0f), dtype);
      std::vector<float> weight = ut::RandomBf16Values(rng, kConvChannels * K, -1.0f, 1.0f);
      // A non-zero starting state: the call continues an earlier one.
      std::vector<float> ref_state = ut::RandomBf16Values(rng, (K - 1) * kConvChannels, -2, 2);
      const DeviceBuffer dweight = DeviceBuffer::FromHost(weight);
      DeviceBuffer state = DeviceBuffer::FromHost(ref_state);

      std::vector<float> ref(rows * kConvOutStride, 0.0f);
      CpuConv(x, 0, rows, weight, K, ref_state.data(), ref);

      // Prefill T rows, then kDecodes single rows, each a separate call.
      std::vector<float> got =
          GpuConv(ctx, dtype, std::vector<float>(x.begin(), x.begin() + T * kConvXStride), T,
                  dweight, K, state, {}, {}, 1, static_cast<int>(T));
      ASSERT_TRUE(PaddingIsNan(got, T, kConvChannels, kConvOutStride));
      for (int64_t i = 0; i < kDecodes; ++i) {
        const std::vector<float> row((x.begin() + (T + i) * kConvXStride),
                                     x.begin() + (T + i + 1) * kConvXStride);
        const std::vector<float> o = GpuConv(ctx, dtype, row, 1, dweight, K, state, {}, {}, 1, 1);
        got.insert(got.end(), o.begin(), o.end());
      }
      EXPECT_LT(ut::RelativeL2Error(Valid(got, rows, kConvChannels, kConvOutStride),
                                    Valid(ref, rows, kConvChannels, kConvOutStride)),
                OutBound(dtype));
      EXPECT_EQ(state.ToHost<float>(ref_state.size()), ref_state);
    }
  }
}

TEST(CudaCausalConvTest, PackedBatchWithSlotsMatchesCpuPerSequence) {
  UP_CUDA_TEST_CONTEXT(ctx);
  // Lengths inside one row tile, across tiles, empty, and shorter than the kernel; slots permuted
  // with a spare slot that must stay untouched.
  const std::vector<int> lens = {1, 0, 17, 64, 3, 2, 100};
  const std::vector<int32_t> slots = {6, 0, 3, 7, 1, 5, 2};  // slot 4 unused
  const int batch = static_cast<int>(lens.size()), n_slots = 8;
  for (int64_t K : {2, 4}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(std::string(Name(dtype)) + " K=" + std::to_string(K));
      std::mt19937 rng(static_cast<uint32_t>(K) + (dtype == DType::kBF16 ? 100 : 0));
      const std::vector<int32_t> cu = CuSeqlens(lens);
      const int64_t T = cu.back();
      const std::vector<float> x =
          AsRead(ut::RandomBf16Values(rng, T * kConvXStride, -2.0f, 2.0f), dtype);
      std::vector<float> weight = ut::RandomBf16Values(rng, kConvChannels * K, -1.0f, 1.0f);
      const int64_t slot_size = (K - 1) * kConvChannels;
      std::vector<float> ref_state = ut::RandomBf16Values(rng, n_slots * slot_size, -2, 2);
      const DeviceBuffer dweight = DeviceBuffer::FromHost(weight);
      DeviceBuffer state = DeviceBuffer::FromHost(ref_state);

      std::vector<float> ref(T * kConvOutStride, 0.0f);
      for (int b = 0; b < batch; ++b) {
        CpuConv(x, cu[b], lens[b], weight, K, ref_state.data() + slots[b] * slot_size, ref);
      }
      const int max_len = *std::max_element(lens.begin(), lens.end());
      const std::vector<float> got =
          GpuConv(ctx, dtype, x, T, dweight, K, state, cu, slots, batch, max_len);
      EXPECT_TRUE(PaddingIsNan(got, T, kConvChannels, kConvOutStride));
      EXPECT_LT(ut::RelativeL2Error(Valid(got, T, kConvChannels, kConvOutStride),
                                    Valid(ref, T, kConvChannels, kConvOutStride)),
                OutBound(dtype));
      EXPECT_EQ(state.ToHost<float>(ref_state.size()), ref_state);
    }
  }
}

// Bounded segments (a sync-free UniPrefill drop): sequence b owns cu rows but only its first
// seq_lens[b] are real. The real rows and the states equal the CPU's on the real rows alone; the
// padding rows are never written (still poison).
TEST(CudaCausalConvTest, BoundedSegmentsLeavePaddingRowsAlone) {
  UP_CUDA_TEST_CONTEXT(ctx);
  const std::vector<int> caps = {40, 9, 130, 3};
  const std::vector<int32_t> real = {17, 9, 100, 0}, slots = {2, 0, 3, 1};
  const int batch = static_cast<int>(caps.size()), K = 4;
  std::mt19937 rng(3);
  const std::vector<int32_t> cu = CuSeqlens(caps);
  const int64_t T = cu.back();
  const std::vector<float> x = ut::RandomBf16Values(rng, T * kConvXStride, -2.0f, 2.0f);
  std::vector<float> weight = ut::RandomBf16Values(rng, kConvChannels * K, -1.0f, 1.0f);
  const int64_t slot_size = (K - 1) * kConvChannels;
  std::vector<float> ref_state = ut::RandomBf16Values(rng, batch * slot_size, -2, 2);
  const DeviceBuffer dweight = DeviceBuffer::FromHost(weight);
  DeviceBuffer state = DeviceBuffer::FromHost(ref_state);
  std::vector<float> ref(T * kConvOutStride, 0.0f);
  for (int b = 0; b < batch; ++b) {
    CpuConv(x, cu[b], real[b], weight, K, ref_state.data() + slots[b] * slot_size, ref);
  }
  const std::vector<float> got =
      GpuConv(ctx, DType::kF32, x, T, dweight, K, state, cu, slots, batch, 130, real);
  std::vector<float> got_real, ref_real;
  for (int b = 0; b < batch; ++b) {
    for (int64_t r = cu[b]; r < cu[b + 1]; ++r) {
      for (int64_t c = 0; c < kConvChannels; ++c) {
        const float v = got[r * kConvOutStride + c];
        if (r - cu[b] < real[b]) {
          got_real.push_back(v);
          ref_real.push_back(ref[r * kConvOutStride + c]);
        } else {
          ASSERT_TRUE(std::isnan(v)) << "padding row " << r << " was written";
        }
      }
    }
  }
  EXPECT_LT(ut::RelativeL2Error(got_real, ref_real), kF32Bound);
  EXPECT_EQ(state.ToHost<float>(ref_state.size()), ref_state);
}

// ---- L2 norm --------------------------------------------------------------------------------

TEST(CudaL2NormTest, MatchesCpuInPlaceOnStridedHeadViews) {
  UP_CUDA_TEST_CONTEXT(ctx);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t D : {128, 32, 100}) {
      SCOPED_TRACE(std::string(Name(dtype)) + " D=" + std::to_string(D));
      constexpr int64_t T = 37, H = 3, kLead = 5;
      const int64_t stride = H * D + kLead + 7;  // heads at column kLead of a wider row
      std::mt19937 rng(static_cast<uint32_t>(D));
      std::vector<float> x = AsRead(ut::RandomBf16Values(rng, T * stride, -1.0f, 1.0f), dtype);
      const float scale = 1.0f / std::sqrt(static_cast<float>(D));
      std::vector<float> ref = x;
      ops::L2NormalizeHeads(Cpu(),
                            View(ref.data(), DType::kF32, Device::kCpu, kLead, {T, H, D}, stride),
                            kL2Eps, scale);
      const DeviceBuffer dx = Upload(x, dtype);
      cuda::L2NormalizeHeads(ctx, View(dx.data(), dtype, Device::kCuda, kLead, {T, H, D}, stride),
                             kL2Eps, scale);
      ctx.cuda().Synchronize();
      const std::vector<float> got = Download(dx, T * stride, dtype);
      std::vector<float> got_heads, ref_heads;
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t c = 0; c < stride; ++c) {
          const bool in_heads = c >= kLead && c < kLead + H * D;
          if (in_heads) {
            got_heads.push_back(got[t * stride + c]);
            ref_heads.push_back(ref[t * stride + c]);
          } else {
            ASSERT_EQ(got[t * stride + c], x[t * stride + c]) << "outside the view at " << t;
          }
        }
      }
      EXPECT_LT(ut::RelativeL2Error(got_heads, ref_heads), dtype == DType::kBF16 ? 5e-3 : 1e-5);
    }
  }
}

// ---- Gated delta rule -----------------------------------------------------------------------

struct DeltaShape {
  int64_t hk = 1, hv = 1, dk = 128, dv = 128;
  int64_t width() const { return 2 * hk * dk + hv * dv; }  // [q | k | v] columns
  int64_t state_size() const { return hv * dk * dv; }
  std::string ToString() const {
    return "hk=" + std::to_string(hk) + " hv=" + std::to_string(hv) + " dk=" + std::to_string(dk) +
           " dv=" + std::to_string(dv);
  }
};

// Token rows as the mixer hands them to the delta rule: fused f32 [rows, width] = [q | k | v]
// with q and k l2-normalised per head and q scaled by 1/sqrt(dk); g = -softplus(z) in about
// [-2, 0) and beta = sigmoid(z) in (0, 1), f32 [rows, hv]. Rounded to bf16 where read as bf16.
struct DeltaTokens {
  int64_t rows = 0;
  std::vector<float> fused, g, beta;

  // Rows [begin, begin + n).
  DeltaTokens Slice(const DeltaShape& s, int64_t begin, int64_t n) const {
    DeltaTokens r;
    r.rows = n;
    r.fused.assign(fused.begin() + begin * s.width(), fused.begin() + (begin + n) * s.width());
    r.g.assign(g.begin() + begin * s.hv, g.begin() + (begin + n) * s.hv);
    r.beta.assign(beta.begin() + begin * s.hv, beta.begin() + (begin + n) * s.hv);
    return r;
  }
  void Append(const DeltaTokens& o) {
    rows += o.rows;
    fused.insert(fused.end(), o.fused.begin(), o.fused.end());
    g.insert(g.end(), o.g.begin(), o.g.end());
    beta.insert(beta.end(), o.beta.begin(), o.beta.end());
  }
};

DeltaTokens RandomTokens(std::mt19937& rng, const DeltaShape& s, int64_t rows, DType dtype) {
  DeltaTokens x;
  x.rows = rows;
  x.fused = ut::RandomBf16Values(rng, rows * s.width(), -1.0f, 1.0f);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t part = 0; part < 2; ++part) {  // q, then k
      for (int64_t h = 0; h < s.hk; ++h) {
        float* p = x.fused.data() + t * s.width() + part * s.hk * s.dk + h * s.dk;
        double ss = 0;
        for (int64_t d = 0; d < s.dk; ++d) ss += static_cast<double>(p[d]) * p[d];
        const double scale = part == 0 ? 1.0 / std::sqrt(static_cast<double>(s.dk)) : 1.0;
        const double f = scale / std::sqrt(ss + kL2Eps);
        for (int64_t d = 0; d < s.dk; ++d) p[d] = static_cast<float>(p[d] * f);
      }
    }
  }
  x.fused = AsRead(std::move(x.fused), dtype);
  std::uniform_real_distribution<float> za(-4.0f, 1.8f), zb(-3.0f, 3.0f);
  x.g.resize(rows * s.hv);
  x.beta.resize(rows * s.hv);
  for (float& g : x.g) g = -std::log1p(std::exp(za(rng)));
  for (float& b : x.beta) b = 1.0f / (1.0f + std::exp(-zb(rng)));
  return x;
}

// The CPU op on one sequence's rows; returns out f32 [rows, hv * dv].
std::vector<float> CpuDeltaRule(const DeltaShape& s, const DeltaTokens& x, float* state) {
  std::vector<float> out(x.rows * s.hv * s.dv, 0.0f);
  const int64_t T = x.rows, W = s.width();
  ops::GatedDeltaRule(
      Cpu(), View(out.data(), DType::kF32, Device::kCpu, 0, {T, s.hv, s.dv}, s.hv * s.dv),
      View(x.fused.data(), DType::kF32, Device::kCpu, 0, {T, s.hk, s.dk}, W),
      View(x.fused.data(), DType::kF32, Device::kCpu, s.hk * s.dk, {T, s.hk, s.dk}, W),
      View(x.fused.data(), DType::kF32, Device::kCpu, 2 * s.hk * s.dk, {T, s.hv, s.dv}, W),
      View(x.g.data(), DType::kF32, Device::kCpu, 0, {T, s.hv}, s.hv),
      View(x.beta.data(), DType::kF32, Device::kCpu, 0, {T, s.hv}, s.hv), state);
  return out;
}

// The GPU op on a packed batch (cu / slots empty: null); returns out f32 [rows, hv * dv].
std::vector<float> GpuDeltaRule(DeviceContext& ctx, DType dtype, const DeltaShape& s,
                                const DeltaTokens& x, DeviceBuffer& state,
                                const std::vector<int32_t>& cu, const std::vector<int32_t>& slots,
                                int batch, int max_seqlen, DeltaRuleKernel kernel,
                                const std::vector<int32_t>& seq_lens = {}) {
  const int64_t T = x.rows, W = s.width();
  const DeviceBuffer fused = Upload(x.fused, dtype);
  const DeviceBuffer g = DeviceBuffer::FromHost(x.g), beta = DeviceBuffer::FromHost(x.beta);
  DeviceBuffer out = Poisoned(T * s.hv * s.dv, dtype);
  const DeviceBuffer dcu = UploadInts(cu), dslots = UploadInts(slots), dlens = UploadInts(seq_lens);
  LinearAttentionBatch seqs;
  seqs.cu_seqlens = cu.empty() ? nullptr : dcu.as<int32_t>();
  seqs.state_slots = slots.empty() ? nullptr : dslots.as<int32_t>();
  seqs.seq_lens = seq_lens.empty() ? nullptr : dlens.as<int32_t>();
  seqs.batch = batch;
  seqs.max_seqlen = max_seqlen;
  // Scratch as the backend gives it (the split tensor-core kernel runs where kAuto picks it).
  DeviceBuffer scratch(std::max<size_t>(256, cuda::GatedDeltaRuleScratchBytes(T, s.hv, s.dv)));
  cuda::GatedDeltaRule(
      ctx, View(out.data(), dtype, Device::kCuda, 0, {T, s.hv, s.dv}, s.hv * s.dv),
      View(fused.data(), dtype, Device::kCuda, 0, {T, s.hk, s.dk}, W),
      View(fused.data(), dtype, Device::kCuda, s.hk * s.dk, {T, s.hk, s.dk}, W),
      View(fused.data(), dtype, Device::kCuda, 2 * s.hk * s.dk, {T, s.hv, s.dv}, W),
      View(g.data(), DType::kF32, Device::kCuda, 0, {T, s.hv}, s.hv),
      View(beta.data(), DType::kF32, Device::kCuda, 0, {T, s.hv}, s.hv), state.as<float>(), seqs,
      kernel, scratch.data(), scratch.size());
  ctx.cuda().Synchronize();
  return Download(out, T * s.hv * s.dv, dtype);
}

const char* KernelName(DeltaRuleKernel k) {
  return k == DeltaRuleKernel::kChunked                  ? "chunked"
         : k == DeltaRuleKernel::kRecurrent              ? "recurrent"
         : k == DeltaRuleKernel::kChunkedTensorCore      ? "tensor-core"
         : k == DeltaRuleKernel::kChunkedTensorCoreSplit ? "tc-split"
                                                         : "auto";
}

// Whether a call may run the tensor-core kernel (kAuto does for bf16 calls of > 64 rows).
bool MayUseTensorCores(DeltaRuleKernel k, DType dtype, int max_seqlen) {
  return k == DeltaRuleKernel::kChunkedTensorCore ||
         k == DeltaRuleKernel::kChunkedTensorCoreSplit ||
         (k == DeltaRuleKernel::kAuto && dtype == DType::kBF16 &&
          max_seqlen > cuda::kDeltaRuleF32MaxSeqlen);
}

// Checks a delta-rule run's outputs and states against the reference, with the bounds of the
// kernel that ran (the file header says why), printing the tensor-core kernel's errors.
void ExpectDeltaClose(const std::vector<float>& out, const std::vector<float>& ref_out,
                      const std::vector<float>& state, const std::vector<float>& ref_state,
                      DType dtype, bool tensor_cores, const std::string& what) {
  const double out_err = ut::RelativeL2Error(out, ref_out);
  const double state_err = ut::RelativeL2Error(state, ref_state);
  EXPECT_LT(out_err, tensor_cores ? kTcOutBound : OutBound(dtype)) << what;
  EXPECT_LT(state_err, tensor_cores ? kTcStateBound : kStateBound) << what;
  if (tensor_cores) {
    std::printf("[tc] %-60s out %.2e state %.2e\n", what.c_str(), out_err, state_err);
  }
}

// One sequence of T rows from a random state, on the given kernel, for every dtype and shape.
void ExpectOneSequenceMatchesCpu(DeviceContext& ctx, DeltaRuleKernel kernel,
                                 std::initializer_list<int64_t> lengths) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t d : {128, 32}) {
      for (int64_t ratio : {1, 2}) {
        for (int64_t T : lengths) {
          const DeltaShape s{2, 2 * ratio, d, d};
          const std::string what = std::string(Name(dtype)) + " " + KernelName(kernel) + " " +
                                   s.ToString() + " T=" + std::to_string(T);
          SCOPED_TRACE(what);
          std::mt19937 rng(static_cast<uint32_t>(T * 131 + d * 7 + ratio));
          const DeltaTokens x = RandomTokens(rng, s, T, dtype);
          std::vector<float> ref_state = ut::RandomBf16Values(rng, s.state_size(), -0.5f, 0.5f);
          DeviceBuffer state = DeviceBuffer::FromHost(ref_state);
          const std::vector<float> ref = CpuDeltaRule(s, x, ref_state.data());
          const std::vector<float> got =
              GpuDeltaRule(ctx, dtype, s, x, state, {}, {}, 1, static_cast<int>(T), kernel);
          ExpectDeltaClose(got, ref, state.ToHost<float>(ref_state.size()), ref_state, dtype,
                           MayUseTensorCores(kernel, dtype, static_cast<int>(T)), what);
        }
      }
    }
  }
}

TEST(CudaGatedDeltaNetTest, ChunkedKernelMatchesCpuOverLengths) {
  UP_CUDA_TEST_CONTEXT(ctx);
  ExpectOneSequenceMatchesCpu(ctx, DeltaRuleKernel::kChunked, {1, 5, 63, 64, 65, 200, 1000});
}

TEST(CudaGatedDeltaNetTest, RecurrentKernelMatchesCpuOverLengths) {
  UP_CUDA_TEST_CONTEXT(ctx);
  ExpectOneSequenceMatchesCpu(ctx, DeltaRuleKernel::kRecurrent, {1, 5, 63, 64, 65, 200, 1000});
}

// Lengths inside the first 16-row tile, around the chunk and far past it (the states carry over
// many chunks); Dk = 32 is zero-padded to the kernel's 128.
TEST(CudaGatedDeltaNetTest, TensorCoreKernelMatchesCpuOverLengths) {
  UP_CUDA_TEST_CONTEXT(ctx);
  ExpectOneSequenceMatchesCpu(ctx, DeltaRuleKernel::kChunkedTensorCore,
                              {1, 5, 17, 63, 64, 65, 200, 701, 1000});
}

// The two-kernel form (per-chunk dots and solve in parallel, then the scan) over the same lengths
// (f32 activations fall back to the fused kernel).
TEST(CudaGatedDeltaNetTest, SplitTensorCoreKernelMatchesCpuOverLengths) {
  UP_CUDA_TEST_CONTEXT(ctx);
  ExpectOneSequenceMatchesCpu(ctx, DeltaRuleKernel::kChunkedTensorCoreSplit,
                              {1, 5, 17, 63, 64, 65, 200, 701, 1000});
}

// Dk and Dv that are not tile multiples: K, Q and S are zero-padded, columns past Dv masked. In
// bf16 the first shape's fused rows (300 elements) are not 16-byte multiples, which takes the
// tensor-core kernel's element-load path; the second (528) takes its cp.async path with partial
// Dk (48) and Dv (80) tiles.
TEST(CudaGatedDeltaNetTest, UnalignedHeadDimsMatchCpu) {
  UP_CUDA_TEST_CONTEXT(ctx);
  for (DeltaRuleKernel kernel :
       {DeltaRuleKernel::kChunked, DeltaRuleKernel::kRecurrent, DeltaRuleKernel::kChunkedTensorCore,
        DeltaRuleKernel::kChunkedTensorCoreSplit}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (const DeltaShape& s : {DeltaShape{1, 2, 100, 50}, DeltaShape{3, 3, 48, 80}}) {
        const std::string what =
            std::string(Name(dtype)) + " " + KernelName(kernel) + " " + s.ToString();
        SCOPED_TRACE(what);
        std::mt19937 rng(7);
        const DeltaTokens x = RandomTokens(rng, s, 130, dtype);
        std::vector<float> ref_state = ut::RandomBf16Values(rng, s.state_size(), -0.5f, 0.5f);
        DeviceBuffer state = DeviceBuffer::FromHost(ref_state);
        const std::vector<float> ref = CpuDeltaRule(s, x, ref_state.data());
        const std::vector<float> got =
            GpuDeltaRule(ctx, dtype, s, x, state, {}, {}, 1, 130, kernel);
        ExpectDeltaClose(got, ref, state.ToHost<float>(ref_state.size()), ref_state, dtype,
                         MayUseTensorCores(kernel, dtype, 130), what);
      }
    }
  }
}

// Several sequences in one launch: empty and 1-row sequences, lengths around the chunk, permuted
// slots with a spare one that must stay untouched (bitwise).
TEST(CudaGatedDeltaNetTest, PackedBatchWithSlotsMatchesCpuPerSequence) {
  UP_CUDA_TEST_CONTEXT(ctx);
  const std::vector<int> lens = {1, 0, 130, 64, 7, 65};
  const std::vector<int32_t> slots = {4, 6, 0, 2, 5, 1};  // slot 3 unused
  const int batch = static_cast<int>(lens.size()), n_slots = 7;
  const std::vector<int32_t> cu = CuSeqlens(lens);
  const int max_len = *std::max_element(lens.begin(), lens.end());
  const DeltaShape s{2, 4, 128, 128};
  for (DeltaRuleKernel kernel :
       {DeltaRuleKernel::kChunked, DeltaRuleKernel::kRecurrent, DeltaRuleKernel::kChunkedTensorCore,
        DeltaRuleKernel::kChunkedTensorCoreSplit}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const std::string what = std::string(Name(dtype)) + " " + KernelName(kernel) + " packed";
      SCOPED_TRACE(what);
      std::mt19937 rng(dtype == DType::kBF16 ? 11 : 12);
      const DeltaTokens x = RandomTokens(rng, s, cu.back(), dtype);
      std::vector<float> ref_state =
          ut::RandomBf16Values(rng, n_slots * s.state_size(), -0.5f, 0.5f);
      DeviceBuffer state = DeviceBuffer::FromHost(ref_state);
      std::vector<float> ref;
      for (int b = 0; b < batch; ++b) {
        const std::vector<float> o = CpuDeltaRule(s, x.Slice(s, cu[b], lens[b]),
                                                  ref_state.data() + slots[b] * s.state_size());
        ref.insert(ref.end(), o.begin(), o.end());
      }
      const std::vector<float> got =
          GpuDeltaRule(ctx, dtype, s, x, state, cu, slots, batch, max_len, kernel);
      const std::vector<float> got_state = state.ToHost<float>(ref_state.size());
      ExpectDeltaClose(got, ref, got_state, ref_state, dtype,
                       MayUseTensorCores(kernel, dtype, max_len), what);
      const int64_t spare = 3 * s.state_size();
      EXPECT_TRUE(std::equal(got_state.begin() + spare, got_state.begin() + spare + s.state_size(),
                             ref_state.begin() + spare));
    }
  }
}

// Bounded segments, as for the conv: real rows and final states equal the CPU's on the real rows
// alone, padding rows stay poison, for every kernel (bf16: the tensor-core kernel's cp.async path,
// whose zero fill must stop at the real rows too).
TEST(CudaGatedDeltaNetTest, BoundedSegmentsLeavePaddingRowsAlone) {
  UP_CUDA_TEST_CONTEXT(ctx);
  const std::vector<int> caps = {80, 9, 200, 5};
  const std::vector<int32_t> real = {65, 9, 130, 0}, slots = {1, 3, 0, 2};
  const int batch = static_cast<int>(caps.size());
  const std::vector<int32_t> cu = CuSeqlens(caps);
  const DeltaShape s{2, 4, 128, 128};
  for (DeltaRuleKernel kernel :
       {DeltaRuleKernel::kChunked, DeltaRuleKernel::kRecurrent, DeltaRuleKernel::kChunkedTensorCore,
        DeltaRuleKernel::kChunkedTensorCoreSplit}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const std::string what = std::string(Name(dtype)) + " " + KernelName(kernel) + " bounded";
      SCOPED_TRACE(what);
      std::mt19937 rng(21);
      const DeltaTokens x = RandomTokens(rng, s, cu.back(), dtype);
      std::vector<float> ref_state =
          ut::RandomBf16Values(rng, batch * s.state_size(), -0.5f, 0.5f);
      DeviceBuffer state = DeviceBuffer::FromHost(ref_state);
      const std::vector<float> got =
          GpuDeltaRule(ctx, dtype, s, x, state, cu, slots, batch, 200, kernel, real);
      const int64_t row = s.hv * s.dv;
      std::vector<float> got_real, ref_real;
      for (int b = 0; b < batch; ++b) {
        const std::vector<float> o = CpuDeltaRule(s, x.Slice(s, cu[b], real[b]),
                                                  ref_state.data() + slots[b] * s.state_size());
        ref_real.insert(ref_real.end(), o.begin(), o.end());
        got_real.insert(got_real.end(), got.begin() + cu[b] * row,
                        got.begin() + (cu[b] + real[b]) * row);
        for (int64_t i = (cu[b] + real[b]) * row; i < cu[b + 1] * row; ++i) {
          ASSERT_TRUE(std::isnan(got[i])) << "padding of sequence " << b << " was written";
        }
      }
      ExpectDeltaClose(got_real, ref_real, state.ToHost<float>(ref_state.size()), ref_state,
                       dtype, MayUseTensorCores(kernel, dtype, 200), what);
    }
  }
}

// The tensor-core kernel against the f32 chunked kernel (the other judge) on one packed bf16
// batch of odd lengths up to 700 with GQA 3, Dv = 96 (a partial 64-column tile) and permuted
// slots, from random states; a spare slot stays bitwise untouched.
TEST(CudaGatedDeltaNetTest, TensorCoreKernelMatchesChunkedKernelOnOddPackedBatch) {
  UP_CUDA_TEST_CONTEXT(ctx);
  const std::vector<int> lens = {700, 1, 129, 333, 64, 0, 517, 17, 250};
  const std::vector<int32_t> slots = {3, 8, 1, 0, 9, 5, 2, 7, 6};  // slot 4 unused
  const int batch = static_cast<int>(lens.size()), n_slots = 10;
  const std::vector<int32_t> cu = CuSeqlens(lens);
  const int max_len = *std::max_element(lens.begin(), lens.end());
  const DeltaShape s{2, 6, 128, 96};
  std::mt19937 rng(31);
  const DeltaTokens x = RandomTokens(rng, s, cu.back(), DType::kBF16);
  const std::vector<float> init = ut::RandomBf16Values(rng, n_slots * s.state_size(), -0.5f, 0.5f);
  DeviceBuffer ref_state = DeviceBuffer::FromHost(init);
  const std::vector<float> ref = GpuDeltaRule(ctx, DType::kBF16, s, x, ref_state, cu, slots,
                                              batch, max_len, DeltaRuleKernel::kChunked);
  for (DeltaRuleKernel kernel :
       {DeltaRuleKernel::kChunkedTensorCore, DeltaRuleKernel::kChunkedTensorCoreSplit}) {
    DeviceBuffer state = DeviceBuffer::FromHost(init);
    const std::vector<float> got =
        GpuDeltaRule(ctx, DType::kBF16, s, x, state, cu, slots, batch, max_len, kernel);
    const std::vector<float> got_state = state.ToHost<float>(init.size());
    ExpectDeltaClose(got, ref, got_state, ref_state.ToHost<float>(init.size()), DType::kBF16,
                     true, std::string("bf16 ") + KernelName(kernel) + " vs chunked, packed " +
                               s.ToString());
    const int64_t spare = 4 * s.state_size();
    EXPECT_TRUE(std::equal(got_state.begin() + spare, got_state.begin() + spare + s.state_size(),
                           init.begin() + spare));
  }
}

// The serving pattern with Qwen3-Next head counts: one packed prefill (auto: the tensor-core kernel
// for bf16, chunked for f32; and the tensor-core kernel asked for explicitly), then decode steps
// of one row per sequence (auto: recurrent, no cu_seqlens) continuing the states, against one CPU
// call per whole sequence.
TEST(CudaGatedDeltaNetTest, PrefillThenDecodesMatchCpuOnWholeSequences) {
  UP_CUDA_TEST_CONTEXT(ctx);
  const DeltaShape s{16, 32, 128, 128};
  const std::vector<int> prefill = {200, 65, 1};
  const std::vector<int32_t> slots = {2, 0, 1};
  constexpr int kDecodes = 4;
  const int batch = static_cast<int>(prefill.size());
  const int max_prefill = *std::max_element(prefill.begin(), prefill.end());
  for (DeltaRuleKernel kernel : {DeltaRuleKernel::kAuto, DeltaRuleKernel::kChunkedTensorCore,
                                 DeltaRuleKernel::kChunkedTensorCoreSplit}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const std::string prefix = std::string(Name(dtype)) + " " + KernelName(kernel) + " prefill";
      SCOPED_TRACE(prefix);
      std::mt19937 rng(dtype == DType::kBF16 ? 21 : 22);
      std::vector<DeltaTokens> seq;
      for (int len : prefill) seq.push_back(RandomTokens(rng, s, len + kDecodes, dtype));
      std::vector<float> zero(batch * s.state_size(), 0.0f);
      DeviceBuffer state = DeviceBuffer::FromHost(zero);

      // GPU: the prefill of every sequence in one call, outputs per sequence.
      DeltaTokens packed;
      for (int b = 0; b < batch; ++b) packed.Append(seq[b].Slice(s, 0, prefill[b]));
      const std::vector<int32_t> cu = CuSeqlens(prefill);
      const std::vector<float> pre =
          GpuDeltaRule(ctx, dtype, s, packed, state, cu, slots, batch, max_prefill, kernel);
      const int64_t row = s.hv * s.dv;
      std::vector<std::vector<float>> got(batch);
      for (int b = 0; b < batch; ++b) {
        got[b].assign(pre.begin() + cu[b] * row, pre.begin() + cu[b + 1] * row);
      }
      // Decode steps: row b of the step is sequence b's next token.
      for (int i = 0; i < kDecodes; ++i) {
        DeltaTokens step;
        for (int b = 0; b < batch; ++b) step.Append(seq[b].Slice(s, prefill[b] + i, 1));
        const std::vector<float> o =
            GpuDeltaRule(ctx, dtype, s, step, state, {}, slots, batch, 1, DeltaRuleKernel::kAuto);
        for (int b = 0; b < batch; ++b) {
          got[b].insert(got[b].end(), o.begin() + b * row, o.begin() + (b + 1) * row);
        }
      }
      const std::vector<float> got_state = state.ToHost<float>(zero.size());
      for (int b = 0; b < batch; ++b) {
        SCOPED_TRACE("sequence " + std::to_string(b));
        std::vector<float> ref_state(s.state_size(), 0.0f);
        const std::vector<float> ref = CpuDeltaRule(s, seq[b], ref_state.data());
        const std::vector<float> st(got_state.begin() + slots[b] * s.state_size(),
                                    got_state.begin() + (slots[b] + 1) * s.state_size());
        ExpectDeltaClose(got[b], ref, st, ref_state, dtype,
                         MayUseTensorCores(kernel, dtype, max_prefill),
                         prefix + " + decodes, sequence " + std::to_string(b));
      }
    }
  }
}

// ---- Throughput ------------------------------------------------------------------------------

// The f32 chunked kernel vs the tensor-core one on one bf16 sequence at the Qwen3-Next-80B-A3B
// shape (Hk 16, Hv 32, Dk = Dv = 128), 32K and 128K tokens. TFLOP/s count the recurrence's work,
// 6 T Hv Dk Dv (3 FMAs per state element per token: u, the update, o), whatever form computes it.
// The tokens repeat a random 4096-row block (the speed does not depend on the values). Then both
// kernels run once more from a zero state and their final states and last rows are compared.
TEST(CudaGatedDeltaNetTest, DISABLED_ThroughputQwen3NextShape) {
  UP_CUDA_TEST_CONTEXT(ctx);
  const DeltaShape s{16, 32, 128, 128};
  constexpr int64_t kBlockRows = 4096;
  std::mt19937 rng(41);
  const DeltaTokens block = RandomTokens(rng, s, kBlockRows, DType::kBF16);
  const std::vector<uint16_t> block_bf16 = ut::ToBf16(block.fused);
  const int64_t row = s.hv * s.dv;
  for (int64_t T : {int64_t{32768}, int64_t{131072}}) {
    DeviceBuffer fused(T * s.width() * 2), g(T * s.hv * 4), beta(T * s.hv * 4);
    for (int64_t r0 = 0; r0 < T; r0 += kBlockRows) {
      fused.CopyFromHost(block_bf16.data(), block_bf16.size() * 2, r0 * s.width() * 2);
      g.CopyFromHost(block.g.data(), block.g.size() * 4, r0 * s.hv * 4);
      beta.CopyFromHost(block.beta.data(), block.beta.size() * 4, r0 * s.hv * 4);
    }
    DeviceBuffer out(T * row * 2), state(s.state_size() * 4);
    DeviceBuffer scratch(cuda::GatedDeltaRuleScratchBytes(T, s.hv, s.dv));
    LinearAttentionBatch seqs;
    seqs.batch = 1;
    seqs.max_seqlen = static_cast<int>(T);
    const int64_t W = s.width();
    auto run = [&](DeltaRuleKernel kernel) {
      cuda::GatedDeltaRule(
          ctx, View(out.data(), DType::kBF16, Device::kCuda, 0, {T, s.hv, s.dv}, row),
          View(fused.data(), DType::kBF16, Device::kCuda, 0, {T, s.hk, s.dk}, W),
          View(fused.data(), DType::kBF16, Device::kCuda, s.hk * s.dk, {T, s.hk, s.dk}, W),
          View(fused.data(), DType::kBF16, Device::kCuda, 2 * s.hk * s.dk, {T, s.hv, s.dv}, W),
          View(g.data(), DType::kF32, Device::kCuda, 0, {T, s.hv}, s.hv),
          View(beta.data(), DType::kF32, Device::kCuda, 0, {T, s.hv}, s.hv), state.as<float>(),
          seqs, kernel, scratch.data(), scratch.size());
    };
    const double flops = 6.0 * static_cast<double>(T) * s.hv * s.dk * s.dv;
    std::vector<std::vector<float>> states, last_rows;
    for (DeltaRuleKernel kernel : {DeltaRuleKernel::kChunked, DeltaRuleKernel::kChunkedTensorCore,
                                   DeltaRuleKernel::kChunkedTensorCoreSplit}) {
      state.Fill(0);
      const double ms = ut::MeanCudaMs(ctx, 3, [&] { run(kernel); });
      std::printf("GatedDeltaRule bf16 T %lld Hk 16 Hv 32 Dk 128 Dv 128 %-11s: %8.3f ms, "
                  "%6.1f TFLOP/s, %6.2f Mtok/s\n",
                  static_cast<long long>(T), KernelName(kernel), ms, flops / ms / 1e9,
                  T / ms / 1e3);
      state.Fill(0);
      run(kernel);
      ctx.cuda().Synchronize();
      states.push_back(state.ToHost<float>(s.state_size()));
      std::vector<uint16_t> tail(64 * row);
      out.CopyToHost(tail.data(), tail.size() * 2, (T - 64) * row * 2);
      last_rows.push_back(ut::FromBf16(tail));
    }
    ExpectDeltaClose(last_rows[1], last_rows[0], states[1], states[0], DType::kBF16, true,
                     "throughput T=" + std::to_string(T) + " tensor-core vs chunked");
    ExpectDeltaClose(last_rows[2], last_rows[0], states[2], states[0], DType::kBF16, true,
                     "throughput T=" + std::to_string(T) + " tc-split vs chunked");
  }
}

}  // namespace
}  // namespace uniprefill::ops
