// LinearInt16Rows (cpu_linear_int16_rows.h): activation rows quantised to int16 once, then
// chunks of rows times tiles of weight rows, threads over output columns.
#include "ops/cpu/cpu_linear_int16_rows.h"

#include <algorithm>
#include <cassert>
#include <vector>

#include "ops/cpu/cpu_quant_dot.h"
#include "ops/cpu/cpu_quant_dot_i16.h"

namespace uniprefill::ops::cpu {
namespace {

// Weight rows multiplied into a chunk of activation rows before the next tile: 16 rows of the
// widest layer here (2048 Q8_0 inputs, 2.2 KB a row) stay in L1 next to a group of activation
// rows; a chunk of 64 int16 rows (256 KB at 2048 inputs) stays in L2 while every tile of the
// thread's columns passes (prefill: the layer's weights come from L3 once per chunk).
constexpr int64_t kWeightTile = 16;
constexpr int64_t kRowChunk = 64;

struct Part {
  int64_t row_begin;  // first output column of this part
  int64_t rows;
  const uint8_t* data;
  int64_t row_bytes;
  QuantDotI16RowsFn multi;  // nullptr: `f32` on the f32 activation rows
  QuantDotFn f32;
};

std::vector<Part> PlanParts(const LinearWeight& w, CpuIsa isa) {
  std::vector<Part> plan;
  int64_t col = 0;
  for (const TensorView& p : w.parts) {
    plan.push_back({col, p.dim(0), static_cast<const uint8_t*>(p.data),
                    DTypeBytes(p.dtype, p.stride[0]), FusedQuantDotI16Rows(p.dtype, isa),
                    FusedQuantDot(p.dtype, isa)});
    col += p.dim(0);
  }
  return plan;
}

// The activations as the kernels read them (QuantizeRowI16Groups of each row).
struct QuantisedRows {
  int64_t in, groups, blocks;  // per row: in activations, scale groups, 32-blocks
  std::vector<int16_t> xq;     // int16 [T, in]
  std::vector<float> scale;    // f32 [T, groups]
  std::vector<float> bsum;     // f32 [T, blocks]

  I16Rows At(int64_t t) const {
    return {&xq[t * in], in, &scale[t * groups], groups, &bsum[t * blocks], blocks};
  }
};

QuantisedRows Quantise(DeviceContext& ctx, TensorView x) {
  const int64_t T = x.dim(0), in = x.dim(1);
  const int64_t groups = (in + kI16ScaleGroup - 1) / kI16ScaleGroup, blocks = in / 32;
  QuantisedRows q{in,
                  groups,
                  blocks,
                  std::vector<int16_t>(T * in),
                  std::vector<float>(T * groups),
                  std::vector<float>(T * blocks)};
  ctx.pool().ParallelFor(T, 4, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      QuantizeRowI16Groups(x.as<float>() + t * x.stride[0], in, &q.xq[t * in], &q.scale[t * groups],
                           &q.bsum[t * blocks]);
    }
  });
  return q;
}

// out[r * os] for r < nx: weight row o (of part p) times activation rows t0 .. t0 + nx (x: the
// f32 rows, q: the same quantised).
void MultiplyRow(const Part& p, int64_t o, TensorView x, const QuantisedRows& q, int64_t t0, int nx,
                 float* out, int64_t os) {
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

}  // namespace

bool CanRunLinearInt16Rows(const LinearWeight& w, CpuIsa isa) {
  if (w.parts.empty() || w.in_features % 32 != 0) return false;
  const auto multi = [&](const TensorView& p) {
    return FusedQuantDotI16Rows(p.dtype, isa) != nullptr;
  };
  const auto runnable = [&](const TensorView& p) {
    return multi(p) || FusedQuantDot(p.dtype, isa) != nullptr;
  };
  return std::any_of(w.parts.begin(), w.parts.end(), multi) &&
         std::all_of(w.parts.begin(), w.parts.end(), runnable);
}

void LinearInt16Rows(DeviceContext& ctx, TensorView out, TensorView x, const LinearWeight& w) {
  const int64_t T = x.dim(0), os = out.stride[0];
  assert(CanRunLinearInt16Rows(w, ctx.cpu_isa()));
  const std::vector<Part> plan = PlanParts(w, ctx.cpu_isa());
  const QuantisedRows q = Quantise(ctx, x);
  ctx.pool().ParallelFor(w.out_features, kWeightTile, [&](int64_t begin, int64_t end, int) {
    for (int64_t c0 = 0; c0 < T; c0 += kRowChunk) {
      const int64_t c1 = std::min(T, c0 + kRowChunk);
      for (int64_t o0 = begin; o0 < end; o0 += kWeightTile) {
        const int64_t o1 = std::min(end, o0 + kWeightTile);
        for (int64_t t0 = c0; t0 < c1; t0 += kQuantDotI16Rows) {
          const int nx = static_cast<int>(std::min<int64_t>(kQuantDotI16Rows, c1 - t0));
          for (const Part& p : plan) {
            const int64_t lo = std::max(o0, p.row_begin), hi = std::min(o1, p.row_begin + p.rows);
            for (int64_t o = lo; o < hi; ++o) {
              MultiplyRow(p, o, x, q, t0, nx, out.as<float>() + t0 * os + o, os);
            }
          }
        }
      }
    }
  });
}

}  // namespace uniprefill::ops::cpu
