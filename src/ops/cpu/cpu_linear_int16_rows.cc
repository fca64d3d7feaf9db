// LinearInt16Rows (cpu_linear_int16_rows.h): cpu_linear_quant_rows.h on int16 activations.
#include "ops/cpu/cpu_linear_int16_rows.h"

#include "ops/cpu/cpu_linear_quant_rows.h"
#include "ops/cpu/cpu_quant_dot_i16.h"

namespace uniprefill::ops::cpu {
namespace {

struct Int16Format {
  using Elem = int16_t;
  using Rows = I16Rows;
  using Kernel = QuantDotI16RowsFn;
  static int64_t Scales(int64_t in) { return (in + kI16ScaleGroup - 1) / kI16ScaleGroup; }
  static constexpr int kRows = kQuantDotI16Rows;
  static constexpr int64_t kLengthMultiple = 32;
  static Kernel Lookup(DType type, CpuIsa isa) { return FusedQuantDotI16Rows(type, isa); }
  static QuantDotI16LanesFn Lanes(DType type, CpuIsa isa) {
    return FusedQuantDotI16Lanes(type, isa);
  }
  static void Quantize(const float* x, int64_t n, int16_t* xq, float* scale, float* bsum) {
    QuantizeRowI16Groups(x, n, xq, scale, bsum);
  }
};

}  // namespace

bool CanRunLinearInt16Rows(const LinearWeight& w, CpuIsa isa) {
  return quant_rows::CanRun<Int16Format>(w, isa);
}

void LinearInt16Rows(DeviceContext& ctx, TensorView out, TensorView x, const LinearWeight& w) {
  quant_rows::Run<Int16Format>(ctx, out, x, w);
}

}  // namespace uniprefill::ops::cpu
