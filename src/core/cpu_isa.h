// CPU instruction-set levels for the CPU kernels, detected at run time.
//
// What it is for: one binary built for the x86-64 baseline of this project (AVX2 + FMA + F16C)
// picks at start the best kernel set the CPU supports (CPUID via __builtin_cpu_supports, which
// also checks that the OS saves the AVX-512 registers). A level can be forced (--cpu-isa,
// UNIPREFILL_CPU_ISA) to test or compare paths; forcing one this CPU lacks is an error.
// What it is not for: choosing kernels. The resolved level travels in the DeviceContext and each
// kernel family maps it to its variant (ops/cpu/cpu_kernel_paths.h lists them).
// Invariants: levels are ordered, each implies every lower one; code compiled for a level above
// kAvx2 lives in its own translation units and runs only after Resolve allowed that level.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace uniprefill {

enum class CpuIsa {
  kAuto,        // a request only: the best level this CPU supports
  kAvx2,        // AVX2 + FMA + F16C: the build's baseline
  kAvx512,      // + AVX-512 F, BW, VL, DQ
  kAvx512Vnni,  // + AVX-512 VNNI (vpdpwssd / vpdpbusd)
  kAvx512Bf16,  // + AVX-512 BF16 (vdpbf16ps)
  kAmxBf16,     // + AMX tiles with BF16 (tdpbf16ps), the OS's permission to use them granted
};

// What CPUID (and the OS) report for the features the levels are made of.
struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512bf16 = false;
  // AMX: CPUID's AMX-TILE, AMX-BF16 and AMX-INT8, XCR0's tile state, and Linux's per-process
  // permission (arch_prctl ARCH_REQ_XCOMP_PERM), asked for once by DetectCpuFeatures.
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
};

// This CPU's features, read once (a function-local static: CPUID does not change while running).
const CpuFeatures& DetectCpuFeatures();
// The highest level `f` supports (kAvx2 when even AVX2 is missing: the binary needs it anyway).
CpuIsa BestCpuIsa(const CpuFeatures& f);
// "avx2", "avx512", "avx512-vnni", "avx512-bf16", "amx-bf16", "auto".
std::string_view CpuIsaName(CpuIsa isa);
// The inverse of CpuIsaName; InvalidArgument listing the names otherwise.
Result<CpuIsa> ParseCpuIsa(std::string_view name);
// The features `isa` needs that `f` lacks, space-separated ("" when supported).
std::string MissingCpuFeatures(CpuIsa isa, const CpuFeatures& f);
// The level to run: kAuto -> BestCpuIsa(f); a forced level if `f` supports it, else
// InvalidArgument naming the missing features and the levels this CPU has.
Result<CpuIsa> ResolveCpuIsa(CpuIsa requested, const CpuFeatures& f);
// The features `f` has, space-separated in CPUID's names ("avx2 fma f16c avx512f ...").
std::string DescribeCpuFeatures(const CpuFeatures& f);

}  // namespace uniprefill
