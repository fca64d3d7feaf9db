// LinearBf16 (cpu_linear_bf16.h): the threads and the weights' dequantisation around the AMX tile
// loop (cpu_gemm_bf16_amx.h). Baseline flags: only the amx:: functions run tile instructions.
#include "ops/cpu/cpu_linear_bf16.h"

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <vector>

#include "io/dequant.h"
#include "ops/cpu/cpu_gemm_bf16_amx.h"

namespace uniprefill::ops::cpu {
namespace {

// The stored row of output column o (parts stacked along `out`).
const uint8_t* WeightRow(const LinearWeight& w, int64_t o, DType* type) {
  for (const TensorView& p : w.parts) {
    if (o < p.dim(0)) {
      *type = p.dtype;
      return static_cast<const uint8_t*>(p.data) + o * DTypeBytes(p.dtype, p.stride[0]);
    }
    o -= p.dim(0);
  }
  assert(false && "column outside the weight");
  return nullptr;
}

// Panels packed together before the activation rows pass: 4 x 32 columns of 2048 inputs are 512
// KB of bf16, inside a core's L2 (2 MB on the Xeon of 2026-12-03) with a 32-row block of
// activations (128 KB), so the activations stream from memory once per 128 columns, not 32.
constexpr int64_t kPanelsPerGroup = 4;

}  // namespace

bool CanRunLinearBf16(const LinearWeight& w, CpuIsa isa) {
  if (isa < CpuIsa::kAmxBf16 || w.parts.empty() || w.in_features % 32 != 0) return false;
  return std::all_of(w.parts.begin(), w.parts.end(),
                     [](const TensorView& p) { return CanDequantize(p.dtype); });
}

void LinearBf16(DeviceContext& ctx, TensorView out, TensorView x, const LinearWeight& w) {
  assert(CanRunLinearBf16(w, ctx.cpu_isa()));
  const int64_t T = x.dim(0), in = w.in_features, cols = w.out_features;
  const int64_t padded = (T + amx::kAmxRowsBlock - 1) / amx::kAmxRowsBlock * amx::kAmxRowsBlock;
  // a: bf16 [padded, in]; the padding rows are zero (their sums are computed and dropped).
  std::vector<uint16_t> a(padded * in);
  std::fill(a.begin() + T * in, a.end(), uint16_t{0});
  ctx.pool().ParallelFor(T, 16, [&](int64_t begin, int64_t end, int) {
    amx::ConvertRowsBf16(x.as<float>() + begin * x.stride[0], x.stride[0], end - begin, in,
                         a.data() + begin * in);
  });
  const int64_t panels = (cols + amx::kAmxPanelCols - 1) / amx::kAmxPanelCols;
  ctx.pool().ParallelFor(panels, 1, [&](int64_t begin, int64_t end, int) {
    std::vector<float> rows_f32(amx::kAmxPanelCols * in);  // f32 [32, in]
    // bf16, tile layout: kPanelsPerGroup panels side by side
    std::vector<uint16_t> group(kPanelsPerGroup * amx::PanelElements(in));
    amx::ConfigureTiles();
    for (int64_t g0 = begin; g0 < end; g0 += kPanelsPerGroup) {
      const int64_t g1 = std::min(end, g0 + kPanelsPerGroup);
      for (int64_t b = g0; b < g1; ++b) {
        const int64_t c0 = b * amx::kAmxPanelCols;
        const int n = static_cast<int>(std::min<int64_t>(amx::kAmxPanelCols, cols - c0));
        for (int c = 0; c < n; ++c) {
          DType type{};
          const uint8_t* row = WeightRow(w, c0 + c, &type);
          const Status s = Dequantize(type, row, rows_f32.data() + c * in, in);
          assert(s.ok());
          (void)s;
        }
        amx::PackPanelBf16(rows_f32.data(), n, in,
                           group.data() + (b - g0) * amx::PanelElements(in));
      }
      // Each block of activation rows comes from memory once per group and is reused from the
      // cache by the group's panels.
      for (int64_t t0 = 0; t0 < T; t0 += amx::kAmxRowsBlock) {
        const int64_t nt = std::min<int64_t>(amx::kAmxRowsBlock, T - t0);
        for (int64_t b = g0; b < g1; ++b) {
          const int64_t c0 = b * amx::kAmxPanelCols;
          const int n = static_cast<int>(std::min<int64_t>(amx::kAmxPanelCols, cols - c0));
          amx::GemmPanel(a.data() + t0 * in, nt, in,
                         group.data() + (b - g0) * amx::PanelElements(in), n,
                         out.as<float>() + t0 * out.stride[0] + c0, out.stride[0]);
        }
      }
    }
    amx::ReleaseTiles();
  });
}

}  // namespace uniprefill::ops::cpu
