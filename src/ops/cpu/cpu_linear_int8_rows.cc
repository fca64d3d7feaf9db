// LinearInt8Rows (cpu_linear_int8_rows.h): cpu_linear_quant_rows.h on int8 activations.
#include "ops/cpu/cpu_linear_int8_rows.h"

#include "ops/cpu/cpu_linear_quant_rows.h"
#include "ops/cpu/cpu_quant_dot_i8.h"

namespace uniprefill::ops::cpu {
namespace {

struct Int8Format {
  using Elem = uint8_t;  // xq + 128
  using Rows = I8Rows;
  using Kernel = QuantDotI8RowsFn;
  // Floats of scale per row: the block scales stored per kernel lane, one per 4 values.
  static int64_t Scales(int64_t in) { return in / 4; }
  static constexpr int kRows = kQuantDotI8Rows;
  static constexpr int64_t kLengthMultiple = 64;  // the kernels' unit
  static Kernel Lookup(DType type, CpuIsa isa) { return FusedQuantDotI8Rows(type, isa); }
  static QuantDotI16LanesFn Lanes(DType, CpuIsa) { return nullptr; }  // int16 activations only
  static void Quantize(const float* x, int64_t n, uint8_t* xu, float* scale, float* bsum) {
    QuantizeRowI8Blocks(x, n, xu, scale, bsum);
  }
};

}  // namespace

bool CanRunLinearInt8Rows(const LinearWeight& w, CpuIsa isa) {
  return quant_rows::CanRun<Int8Format>(w, isa);
}

void LinearInt8Rows(DeviceContext& ctx, TensorView out, TensorView x, const LinearWeight& w) {
  quant_rows::Run<Int8Format>(ctx, out, x, w);
}

}  // namespace uniprefill::ops::cpu
