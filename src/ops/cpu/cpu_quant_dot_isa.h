// The ISA-specific tables behind FusedQuantDot / FusedQuantDotI16 / FusedQuantDotI8Rows
// (cpu_quant_dot.h, cpu_quant_dot_i16.h, cpu_quant_dot_i8.h). Each namespace is one translation
// unit compiled with that level's flags (CMakeLists.txt); call them only through the
// dispatchers, which check the context's level. Every lookup returns nullptr for a type that
// level has no kernel of its own for (the dispatcher then falls back to the level below).
#pragma once

#include "core/dtype.h"
#include "ops/cpu/cpu_quant_dot.h"
#include "ops/cpu/cpu_quant_dot_i16.h"
#include "ops/cpu/cpu_quant_dot_i8.h"
#include "ops/cpu/cpu_quant_lanes_i16.h"

namespace uniprefill::ops::cpu {

namespace avx2 {
QuantDotFn FusedQuantDot(DType type);        // cpu_quant_dot.cc
QuantDotI16Fn FusedQuantDotI16(DType type);  // cpu_quant_dot_i16.cc
}  // namespace avx2

namespace avx512 {
QuantDotFn FusedQuantDot(DType type);        // cpu_quant_dot_avx512.cc
QuantDotI16Fn FusedQuantDotI16(DType type);  // cpu_quant_dot_i16_avx512.cc
QuantDotI16RowsFn FusedQuantDotI16Rows(DType type);  // cpu_quant_dot_i16_avx512.cc
}  // namespace avx512

namespace avx512_vnni {
QuantDotI16Fn FusedQuantDotI16(DType type);  // cpu_quant_dot_i16_avx512_vnni.cc
QuantDotI16RowsFn FusedQuantDotI16Rows(DType type);  // cpu_quant_dot_i16_avx512_vnni.cc
QuantDotI8RowsFn FusedQuantDotI8Rows(DType type);    // cpu_quant_rows_i8_avx512_vnni.cc
QuantDotI16LanesFn FusedQuantDotI16Lanes(DType type);  // cpu_quant_dot_i16_avx512_vnni.cc
}  // namespace avx512_vnni

}  // namespace uniprefill::ops::cpu
