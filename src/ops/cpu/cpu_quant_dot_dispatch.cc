// FusedQuantDot / FusedQuantDotI16 / ...Rows: the context's ISA level -> the kernel. A level
// without a kernel of its own for a type falls back to the level below, down to the AVX2 baseline
// (the int8 rows: down to the VNNI level only).
// Compiled with the baseline flags: it only compares levels and calls the tables' lookups.
#include "ops/cpu/cpu_quant_dot_isa.h"

namespace uniprefill::ops::cpu {
namespace {

template <typename Fn>
struct Choice {
  Fn fn = nullptr;
  std::string_view level;
};

Choice<QuantDotFn> ChooseF32(DType type, CpuIsa isa) {
  if (isa >= CpuIsa::kAvx512) {
    if (QuantDotFn fn = avx512::FusedQuantDot(type)) return {fn, "avx512"};
  }
  if (QuantDotFn fn = avx2::FusedQuantDot(type)) return {fn, "avx2"};
  return {};
}

Choice<QuantDotI16Fn> ChooseI16(DType type, CpuIsa isa) {
  if (isa >= CpuIsa::kAvx512Vnni) {
    if (QuantDotI16Fn fn = avx512_vnni::FusedQuantDotI16(type)) return {fn, "avx512-vnni"};
  }
  if (isa >= CpuIsa::kAvx512) {
    if (QuantDotI16Fn fn = avx512::FusedQuantDotI16(type)) return {fn, "avx512"};
  }
  if (QuantDotI16Fn fn = avx2::FusedQuantDotI16(type)) return {fn, "avx2"};
  return {};
}

Choice<QuantDotI16RowsFn> ChooseI16Rows(DType type, CpuIsa isa) {
  if (isa >= CpuIsa::kAvx512Vnni) {
    if (QuantDotI16RowsFn fn = avx512_vnni::FusedQuantDotI16Rows(type)) return {fn, "avx512-vnni"};
  }
  if (isa >= CpuIsa::kAvx512) {
    if (QuantDotI16RowsFn fn = avx512::FusedQuantDotI16Rows(type)) return {fn, "avx512"};
  }
  return {};
}

// int8 activations need vpdpbusd: VNNI levels only, no fall back below them.
Choice<QuantDotI8RowsFn> ChooseI8Rows(DType type, CpuIsa isa) {
  if (isa >= CpuIsa::kAvx512Vnni) {
    if (QuantDotI8RowsFn fn = avx512_vnni::FusedQuantDotI8Rows(type)) return {fn, "avx512-vnni"};
  }
  return {};
}

// The lanes kernels need vpdpwssd's broadcast operand: VNNI levels only.
Choice<QuantDotI16LanesFn> ChooseI16Lanes(DType type, CpuIsa isa) {
  if (isa >= CpuIsa::kAvx512Vnni) {
    if (QuantDotI16LanesFn fn = avx512_vnni::FusedQuantDotI16Lanes(type)) {
      return {fn, "avx512-vnni"};
    }
  }
  return {};
}

}  // namespace

QuantDotFn FusedQuantDot(DType type, CpuIsa isa) { return ChooseF32(type, isa).fn; }
std::string_view FusedQuantDotLevel(DType type, CpuIsa isa) { return ChooseF32(type, isa).level; }

QuantDotI16Fn FusedQuantDotI16(DType type, CpuIsa isa) { return ChooseI16(type, isa).fn; }
std::string_view FusedQuantDotI16Level(DType type, CpuIsa isa) {
  return ChooseI16(type, isa).level;
}

QuantDotI16RowsFn FusedQuantDotI16Rows(DType type, CpuIsa isa) {
  return ChooseI16Rows(type, isa).fn;
}
std::string_view FusedQuantDotI16RowsLevel(DType type, CpuIsa isa) {
  return ChooseI16Rows(type, isa).level;
}

QuantDotI8RowsFn FusedQuantDotI8Rows(DType type, CpuIsa isa) {
  return ChooseI8Rows(type, isa).fn;
}
std::string_view FusedQuantDotI8RowsLevel(DType type, CpuIsa isa) {
  return ChooseI8Rows(type, isa).level;
}

QuantDotI16LanesFn FusedQuantDotI16Lanes(DType type, CpuIsa isa) {
  return ChooseI16Lanes(type, isa).fn;
}
std::string_view FusedQuantDotI16LanesLevel(DType type, CpuIsa isa) {
  return ChooseI16Lanes(type, isa).level;
}

}  // namespace uniprefill::ops::cpu
