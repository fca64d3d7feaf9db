// The body LinearInt16Rows (cpu_linear_int16_rows.h) and LinearInt8Rows (cpu_linear_int8_rows.h)
// share, as one template over the activation format: each activation row quantised once per call
// (Format::Quantize), then chunks of rows times tiles of weight rows (cpu_rows_tiling.h), the
// parts with a multi-row kernel of the format on the quantised rows, the others on the
// f32-activation fused kernels (cpu_quant_dot.h) with the same f32 rows.
// Include only from those two files (baseline flags both: the templates are never compiled with
// another level's flags).
// A Format has: Elem (the quantised activation type), Rows (its rows struct, with the fields of
// I16Rows), Kernel (its multi-row kernel type), Scales(in) (floats of scale per row), kRows (rows
// per kernel call), kLengthMultiple (rows' length must be a multiple of it), Lookup(type, isa),
// Lanes(type, isa) (a lanes kernel, cpu_quant_lanes_i16.h, or nullptr; only the int16 format has
// them) and Quantize(x, n, xq, scale, bsum).
// Parts with a lanes kernel take groups of more than kRows rows (up to kI16Lanes) in one call on
// the rows transposed once per call (TransposeRowsI16); every other part and group the kRows-row
// kernels.
#pragma once

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/device_context.h"
#include "core/tensor.h"
#include "ops/cpu/cpu_quant_dot.h"
#include "ops/cpu/cpu_quant_lanes_i16.h"
#include "ops/cpu/cpu_rows_tiling.h"
#include "ops/ops.h"

namespace uniprefill::ops::cpu::quant_rows {

template <class Format>
struct Part {
  int64_t row_begin;  // first output column of this part
  int64_t rows;
  const uint8_t* data;
  int64_t row_bytes;
  typename Format::Kernel multi;  // nullptr: `f32` on the f32 activation rows
  QuantDotFn f32;
  QuantDotI16LanesFn lanes;  // groups of more than Format::kRows rows, or nullptr
  unsigned lanes_layout;     // the I16LanesLayout `lanes` reads (0 without it)
  const int16_t* block_sums;  // int16 [rows, in / 32] Q8_0 block quant sums, or nullptr
  int64_t blocks;             // per row: in / 32
};

template <class Format>
std::vector<Part<Format>> PlanParts(const LinearWeight& w, CpuIsa isa) {
  std::vector<Part<Format>> plan;
  int64_t col = 0;
  for (size_t i = 0; i < w.parts.size(); ++i) {
    const TensorView& p = w.parts[i];
    const QuantDotI16LanesFn lanes = Format::Lanes(p.dtype, isa);
    const bool sums = i < w.block_quant_sums.size() && !w.block_quant_sums[i].empty();
    plan.push_back({col, p.dim(0), static_cast<const uint8_t*>(p.data),
                    DTypeBytes(p.dtype, p.stride[0]), Format::Lookup(p.dtype, isa),
                    FusedQuantDot(p.dtype, isa), lanes,
                    lanes != nullptr ? static_cast<unsigned>(I16LanesLayoutOf(p.dtype)) : 0u,
                    sums ? w.block_quant_sums[i].data() : nullptr, p.dim(1) / 32});
    col += p.dim(0);
  }
  return plan;
}

// The activations as the kernels read them (Format::Quantize of each row).
template <class Format>
struct QuantisedRows {
  int64_t in, groups, blocks;             // per row: in activations, scale groups, 32-blocks
  std::vector<typename Format::Elem> xq;  // [T, in]
  std::vector<float> scale;               // f32 [T, groups]
  std::vector<float> bsum;                // f32 [T, blocks]

  typename Format::Rows At(int64_t t) const {
    return {&xq[t * in], in, &scale[t * groups], groups, &bsum[t * blocks], blocks};
  }
};

template <class Format>
QuantisedRows<Format> Quantise(DeviceContext& ctx, TensorView x) {
  const int64_t T = x.dim(0), in = x.dim(1);
  const int64_t groups = Format::Scales(in), blocks = in / 32;
  QuantisedRows<Format> q{in,
                          groups,
                          blocks,
                          std::vector<typename Format::Elem>(T * in),
                          std::vector<float>(T * groups),
                          std::vector<float>(T * blocks)};
  ctx.pool().ParallelFor(T, 4, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      Format::Quantize(x.as<float>() + t * x.stride[0], in, &q.xq[t * in], &q.scale[t * groups],
                       &q.bsum[t * blocks]);
    }
  });
  return q;
}

// out[r * os] for r < nx: weight row o (of part p) times activation rows t0 .. t0 + nx (x: the
// f32 rows, q: the same quantised).
template <class Format>
void MultiplyRow(const Part<Format>& p, int64_t o, TensorView x, const QuantisedRows<Format>& q,
                 int64_t t0, int nx, float* out, int64_t os) {
  const uint8_t* row = p.data + (o - p.row_begin) * p.row_bytes;
  if (p.multi != nullptr) {
    p.multi(row, q.At(t0), nx, q.in, out, os);
    return;
  }
  const int64_t xs = x.stride[0];
  for (int r = 0; r < nx; r += kQuantDotMaxRows) {
    const int n = std::min(kQuantDotMaxRows, nx - r);
    p.f32(row, x.as<float>() + (t0 + r) * xs, xs, n, q.in, out + r * os, os);
  }
}

// Some part of w has a multi-row kernel of the format at `isa`, every other part an
// f32-activation fused kernel, and the rows' length suits the format.
template <class Format>
bool CanRun(const LinearWeight& w, CpuIsa isa) {
  if (w.parts.empty() || w.in_features % Format::kLengthMultiple != 0) return false;
  const auto multi = [&](const TensorView& p) { return Format::Lookup(p.dtype, isa) != nullptr; };
  const auto runnable = [&](const TensorView& p) {
    return multi(p) || FusedQuantDot(p.dtype, isa) != nullptr;
  };
  return std::any_of(w.parts.begin(), w.parts.end(), multi) &&
         std::all_of(w.parts.begin(), w.parts.end(), runnable);
}

// The rows of q in groups of kI16Lanes, transposed for the lanes kernels (one buffer per group)
// in the layouts they read (a union of I16LanesLayout).
template <class Format>
std::vector<I16LanesBuffer> TransposeGroups(DeviceContext& ctx, const QuantisedRows<Format>& q,
                                            int64_t T, unsigned layouts) {
  std::vector<I16LanesBuffer> lanes((T + kI16Lanes - 1) / kI16Lanes);
  ctx.pool().ParallelFor(static_cast<int64_t>(lanes.size()), 1,
                         [&](int64_t begin, int64_t end, int) {
                           for (int64_t g = begin; g < end; ++g) {
                             const int nx = static_cast<int>(
                                 std::min<int64_t>(kI16Lanes, T - g * kI16Lanes));
                             TransposeRowsI16(q.At(g * kI16Lanes), nx, q.in, &lanes[g], layouts);
                           }
                         });
  return lanes;
}

// out f32 [T, out] = x f32 [T, in] @ W^T; requires CanRun<Format>(w, ctx.cpu_isa()).
template <class Format>
void Run(DeviceContext& ctx, TensorView out, TensorView x, const LinearWeight& w) {
  const int64_t T = x.dim(0), os = out.stride[0];
  assert(CanRun<Format>(w, ctx.cpu_isa()));
  const std::vector<Part<Format>> plan = PlanParts<Format>(w, ctx.cpu_isa());
  const QuantisedRows<Format> q = Quantise<Format>(ctx, x);
  // Lanes pay off once a group needs two passes of the kRows-row kernels.
  const bool use_lanes = T > Format::kRows &&
                         std::any_of(plan.begin(), plan.end(),
                                     [](const Part<Format>& p) { return p.lanes != nullptr; });
  std::vector<I16LanesBuffer> lanes;
  if constexpr (std::is_same_v<typename Format::Rows, I16Rows>) {
    unsigned layouts = 0;
    for (const Part<Format>& p : plan) layouts |= p.lanes_layout;
    if (use_lanes) lanes = TransposeGroups(ctx, q, T, layouts);
  }
  const int group = use_lanes ? kI16Lanes : Format::kRows;
  float* o_base = out.as<float>();
  ForEachRowsTile(ctx, T, w.out_features, group, [&](int64_t o0, int64_t o1, int64_t t0, int nx) {
    for (const Part<Format>& p : plan) {
      const int64_t lo = std::max(o0, p.row_begin);
      const int64_t hi = std::min(o1, p.row_begin + p.rows);
      if (lo >= hi) continue;
      if (p.lanes != nullptr && nx > Format::kRows) {
        static_assert(kRowsChunk % kI16Lanes == 0, "t0 starts a group of lanes");
        p.lanes(p.data + (lo - p.row_begin) * p.row_bytes, p.row_bytes,
                p.block_sums != nullptr ? p.block_sums + (lo - p.row_begin) * p.blocks : nullptr,
                static_cast<int>(hi - lo), lanes[t0 / kI16Lanes].View(), nx, q.in,
                o_base + t0 * os + lo, os);
        continue;
      }
      for (int64_t o = lo; o < hi; ++o) {
        for (int r = 0; r < nx; r += Format::kRows) {
          MultiplyRow(p, o, x, q, t0 + r, std::min(Format::kRows, nx - r),
                      o_base + (t0 + r) * os + o, os);
        }
      }
    }
  });
}

}  // namespace uniprefill::ops::cpu::quant_rows
