// Linear on the CPU. Four variants, picked by the row count T and what the weight offers:
// - T >= kBf16MinRows with LinearWeight::bf16_prefill_gemm (--prefill-gemm bf16) at the
//   amx-bf16 level: LinearBf16 (cpu_linear_bf16.h), AMX tiles on bf16 dequantised from the
//   stored weights (prefill chunks and batched decode steps alike); without AMX such a weight
//   takes the int16 rows below.
// - 2 <= T <= kQuantBatchMaxRows (a decode step of several requests, short chunks), or any
//   T >= 2 without an f32 copy (--prefill-gemm int16 skips the copies), when int16 activations
//   are allowed and CanRunLinearInt16Rows (a part has a multi-row int16 kernel at the context's
//   ISA level: Q8_0, Q5_0, Q4_K, Q6_K on AVX-512): LinearInt16Rows (cpu_linear_int16_rows.h),
//   the stored quantised weights read once per chunk of rows; with
//   LinearWeight::int8_rows_activations (--prefill-gemm int8) and CanRunLinearInt8Rows (VNNI)
//   LinearInt8Rows instead (cpu_linear_int8_rows.h), the same on int8 activations.
// - T >= kGemmMinRows and an f32 copy of W exists: sgemm split over the pool (PoolSgemm);
//   with LinearWeight::f32_on_call the copy is made for the call (DequantiseForGemm) and freed.
// - otherwise (one decode row; AVX2; weights without int16 multi-row kernels): a fused
//   dequantise-and-dot matvec over the stored parts (the variant of DeviceContext::cpu_isa()),
//   split over output rows with the thread pool; up to kQuantDotMaxRows rows of x share one pass
//   over the weights.
#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <memory>
#include <vector>

#include "io/dequant.h"
#include "ops/cpu/cpu_dequant_f32_avx512.h"
#include "ops/cpu/cpu_linear_bf16.h"
#include "ops/cpu/cpu_linear_int16_rows.h"
#include "ops/cpu/cpu_linear_int8_rows.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/cpu_quant_dot.h"
#include "ops/cpu/cpu_quant_dot_i16.h"
#include "ops/cpu/cpu_sgemm.h"

namespace uniprefill::ops::cpu {
namespace {

struct PartPlan {
  int64_t row_begin;  // first output column of this part
  int64_t rows;
  const uint8_t* data;
  int64_t row_bytes;
  DType dtype;
  QuantDotFn fused;  // nullptr: dequantise a row, then the F32 kernel
  QuantDotI16Fn fused_i16;  // single-row kernel on int16 activations, or nullptr
};

std::vector<PartPlan> PlanParts(const LinearWeight& w, CpuIsa isa) {
  std::vector<PartPlan> plan;
  int64_t col = 0;
  for (const TensorView& p : w.parts) {
    assert(p.dim(1) == w.in_features);
    plan.push_back({col, p.dim(0), static_cast<const uint8_t*>(p.data),
                    DTypeBytes(p.dtype, p.stride[0]), p.dtype, FusedQuantDot(p.dtype, isa),
                    w.int16_decode_activations ? FusedQuantDotI16(p.dtype, isa) : nullptr});
    col += p.dim(0);
  }
  assert(col == w.out_features);
  return plan;
}

// How far ahead of the weight row being read MatVec prefetches. A decode step streams every
// weight from memory once; the hardware prefetchers alone kept the Gemma 3 270M head (Q8_0
// [262144, 640], 178 MB) at 12-14 GB/s on the 2-core Xeon of 2026-12-03, whose two cores read
// ~18 GB/s; prefetching the row 3 KB ahead here: 12.7-13.7 -> 10.0-11.3 ms per token (the same
// distance inside the Q8_0 kernel gave 9.1-10.6; 2 KB 10.3-12.6; 1.5 KB and less nothing).
constexpr int64_t kMatVecPrefetchBytes = 3072;

// MatVec's rows go out in ParallelForDynamic chunks of out / (threads * 8) rows, at least 32:
// with static halves the main thread spun at the join for 6.6-6.7% of a 1K-context decode's
// samples on the 2-vCPU Emerald Rapids VM (perf, 2026-12-04), with these chunks 2.0-2.9%.
constexpr int64_t kMatVecChunksPerThread = 8;
constexpr int64_t kMatVecMinChunkRows = 32;

// Asks for the cache lines of the `bytes` from p (addresses past the weight are harmless: a
// prefetch never faults).
inline void PrefetchRow(const uint8_t* p, int64_t bytes) {
  for (int64_t off = 0; off < bytes; off += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T0);
  }
}

// out f32 [nx, out] = x f32 [nx, in] @ W^T for nx <= kQuantDotMaxRows.
void MatVec(DeviceContext& ctx, TensorView out, TensorView x, const LinearWeight& w,
            const std::vector<PartPlan>& plan) {
  const int nx = static_cast<int>(x.dim(0));
  const int64_t in = w.in_features;
  const QuantDotFn f32_dot = FusedQuantDot(DType::kF32, ctx.cpu_isa());
  // One activation row: quantise it to int16 once for the parts that have an int16 kernel.
  std::vector<int16_t> xq;
  float x_scale = 0.0f;
  const bool any_i16 = std::any_of(plan.begin(), plan.end(),
                                   [](const PartPlan& p) { return p.fused_i16 != nullptr; });
  if (nx == 1 && any_i16) {
    xq.resize(in);
    QuantizeRowI16(x.as<float>(), in, xq.data(), &x_scale);
  }
  // Rows in chunks handed to whichever thread is free (every row is computed alone, so the
  // result does not depend on who runs it): on a shared machine one core is often slowed, and
  // with static halves the other waits for it at the end of every matvec.
  auto body = [&](int64_t begin, int64_t end, int) {
    std::vector<float> scratch;  // one dequantised row for types without a fused kernel
    for (const PartPlan& p : plan) {
      const int64_t lo = std::max(begin, p.row_begin), hi = std::min(end, p.row_begin + p.rows);
      // The row kMatVecPrefetchBytes ahead (whole rows) is asked for as this one is read.
      const int64_t ahead = (kMatVecPrefetchBytes + p.row_bytes - 1) / p.row_bytes * p.row_bytes;
      for (int64_t o = lo; o < hi; ++o) {
        const uint8_t* row = p.data + (o - p.row_begin) * p.row_bytes;
        PrefetchRow(row + ahead, p.row_bytes);
        float* dst = out.as<float>() + o;
        if (!xq.empty() && p.fused_i16 != nullptr) {
          *dst = x_scale * p.fused_i16(row, xq.data(), in);
        } else if (p.fused != nullptr) {
          p.fused(row, x.as<float>(), x.stride[0], nx, in, dst, out.stride[0]);
        } else {
          scratch.resize(in);
          const Status s = Dequantize(p.dtype, row, scratch.data(), in);
          assert(s.ok());
          (void)s;
          f32_dot(scratch.data(), x.as<float>(), x.stride[0], nx, in, dst, out.stride[0]);
        }
      }
    }
  };
  const int64_t chunk = std::max<int64_t>(
      kMatVecMinChunkRows, (w.out_features + kMatVecChunksPerThread * ctx.pool().size() - 1) /
                               (kMatVecChunksPerThread * ctx.pool().size()));
  ctx.pool().ParallelForDynamic(w.out_features, chunk, body);
}

// f32 [out, in] = W's parts dequantised, rows split over the pool (LinearWeight::f32_on_call;
// the loader sets it only where every part has an AVX-512 decoder at the context's level).
// (new float[]: every element is written, so no zero fill first.)
std::unique_ptr<float[]> DequantiseForGemm(DeviceContext& ctx, const LinearWeight& w) {
  std::unique_ptr<float[]> f32(new float[static_cast<size_t>(w.out_features * w.in_features)]);
  const int64_t in = w.in_features;
  int64_t row0 = 0;
  for (const TensorView& p : w.parts) {
    const auto* bytes = static_cast<const uint8_t*>(p.data);
    const int64_t row_bytes = DTypeBytes(p.dtype, p.stride[0]);
    float* dst = f32.get() + row0 * in;
    ctx.pool().ParallelFor(p.dim(0), 16, [&](int64_t b, int64_t e, int) {
      for (int64_t r = b; r < e; ++r) {
        DequantRowF32Avx512(p.dtype, bytes + r * row_bytes, in, dst + r * in);
      }
    });
    row0 += p.dim(0);
  }
  return f32;
}

}  // namespace

bool CanDequantiseForGemm(const LinearWeight& w, CpuIsa isa) {
  if (isa < CpuIsa::kAvx512 || w.parts.empty()) return false;
  for (const TensorView& p : w.parts) {
    if (!HasDequantRowF32Avx512(p.dtype) || p.dim(1) != w.in_features) return false;
  }
  return true;
}

void Linear(DeviceContext& ctx, TensorView out, TensorView x, const LinearWeight& w) {
  const int64_t T = x.dim(0);
  assert(x.dim(1) == w.in_features && out.dim(1) == w.out_features && out.dim(0) == T);
  const bool has_f32 = w.f32.size() > 0 || w.f32_on_call;
  if (T >= kBf16MinRows && w.int16_decode_activations && w.bf16_prefill_gemm &&
      CanRunLinearBf16(w, ctx.cpu_isa())) {
    LinearBf16(ctx, out, x, w);
    return;
  }
  if (T >= 2 && w.int16_decode_activations && (T <= kQuantBatchMaxRows || !has_f32)) {
    if (w.int8_rows_activations && CanRunLinearInt8Rows(w, ctx.cpu_isa())) {
      LinearInt8Rows(ctx, out, x, w);
      return;
    }
    if (CanRunLinearInt16Rows(w, ctx.cpu_isa())) {
      LinearInt16Rows(ctx, out, x, w);
      return;
    }
  }
  if (T >= kGemmMinRows && has_f32) {
    std::unique_ptr<float[]> on_call;
    if (w.f32.size() == 0) on_call = DequantiseForGemm(ctx, w);
    const float* f32 = w.f32.size() > 0 ? w.f32.as<float>() : on_call.get();
    // out [T, out] = x [T, in] * f32[out, in]^T
    PoolSgemm(ctx, T, w.out_features, w.in_features, 1.0f, x.as<float>(), x.stride[0], f32,
              w.in_features, out.as<float>(), out.stride[0]);
    return;
  }
  const std::vector<PartPlan> plan = PlanParts(w, ctx.cpu_isa());
  for (int64_t t0 = 0; t0 < T; t0 += kQuantDotMaxRows) {
    const int64_t n = std::min<int64_t>(kQuantDotMaxRows, T - t0);
    MatVec(ctx, out.Slice0(t0, n), x.Slice0(t0, n), w, plan);
  }
}

}  // namespace uniprefill::ops::cpu
