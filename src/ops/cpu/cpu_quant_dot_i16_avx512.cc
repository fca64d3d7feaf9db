// AVX-512 (F/BW/VL/DQ) int16-activation decode kernels (single- and multi-row); the bodies are
// shared with the VNNI level in cpu_quant_dot_i16_avx512_kernels.h and
// cpu_quant_rows_i16_avx512_kernels.h. Compiled with the AVX-512 flags (CMakeLists.txt).
#include "ops/cpu/cpu_quant_dot_i16_avx512_kernels.h"
#include "ops/cpu/cpu_quant_rows_i16_avx512_kernels.h"

namespace uniprefill::ops::cpu {

QuantDotI16Fn avx512::FusedQuantDotI16(DType type) { return LookupI16Kernel(type); }
QuantDotI16RowsFn avx512::FusedQuantDotI16Rows(DType type) {
  return LookupI16RowsKernel(type);
}

}  // namespace uniprefill::ops::cpu
