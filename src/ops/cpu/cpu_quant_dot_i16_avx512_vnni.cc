// AVX-512 VNNI int16-activation decode kernels: the AVX-512 bodies of
// cpu_quant_dot_i16_avx512_kernels.h compiled with -mavx512vnni, so their integer
// multiply-accumulates are one vpdpwssd each (CMakeLists.txt gives this file the flags), and the
// lanes kernels (cpu_quant_lanes_i16_avx512_kernels.h), which need VNNI's broadcast operand.
#include "ops/cpu/cpu_quant_dot_i16_avx512_kernels.h"
#include "ops/cpu/cpu_quant_rows_i16_avx512_kernels.h"
#include "ops/cpu/cpu_quant_lanes_i16_avx512_kernels.h"

#if !defined(__AVX512VNNI__)
#error "cpu_quant_dot_i16_avx512_vnni.cc must be compiled with -mavx512vnni (CMakeLists.txt)"
#endif

namespace uniprefill::ops::cpu {

QuantDotI16Fn avx512_vnni::FusedQuantDotI16(DType type) { return LookupI16Kernel(type); }
QuantDotI16RowsFn avx512_vnni::FusedQuantDotI16Rows(DType type) {
  return LookupI16RowsKernel(type);
}
QuantDotI16LanesFn avx512_vnni::FusedQuantDotI16Lanes(DType type) {
  return LookupI16LanesKernel(type);
}

}  // namespace uniprefill::ops::cpu
