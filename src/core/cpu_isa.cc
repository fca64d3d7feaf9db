#include "core/cpu_isa.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <initializer_list>

namespace uniprefill {
namespace {

constexpr CpuIsa kLevels[] = {CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Vnni,
                              CpuIsa::kAvx512Bf16, CpuIsa::kAmxBf16};

struct Feature {
  const char* name;
  bool CpuFeatures::*has;
  CpuIsa level;  // the lowest level that needs it
};

constexpr Feature kFeatures[] = {
    {"avx2", &CpuFeatures::avx2, CpuIsa::kAvx2},
    {"fma", &CpuFeatures::fma, CpuIsa::kAvx2},
    {"f16c", &CpuFeatures::f16c, CpuIsa::kAvx2},
    {"avx512f", &CpuFeatures::avx512f, CpuIsa::kAvx512},
    {"avx512bw", &CpuFeatures::avx512bw, CpuIsa::kAvx512},
    {"avx512vl", &CpuFeatures::avx512vl, CpuIsa::kAvx512},
    {"avx512dq", &CpuFeatures::avx512dq, CpuIsa::kAvx512},
    {"avx512vnni", &CpuFeatures::avx512vnni, CpuIsa::kAvx512Vnni},
    {"avx512bf16", &CpuFeatures::avx512bf16, CpuIsa::kAvx512Bf16},
    {"amx_tile", &CpuFeatures::amx_tile, CpuIsa::kAmxBf16},
    {"amx_bf16", &CpuFeatures::amx_bf16, CpuIsa::kAmxBf16},
    {"amx_int8", &CpuFeatures::amx_int8, CpuIsa::kAmxBf16},  // Q8_0 decode steps (every AMX CPU)
};

// AMX needs three things: the CPU's CPUID bits (leaf 7: EDX bit 24 AMX-TILE, bit 22 AMX-BF16,
// bit 25 AMX-INT8), the OS saving the tile state (XCR0 bits 17 and 18), and on Linux the
// process's permission to use the 8 KB tile data state, which a process must ask for before its
// first tile instruction (ARCH_REQ_XCOMP_PERM; it then holds for every thread of the process).
// Without any of them the first tile instruction would fault, so all three decide.
bool AmxUsable(bool* bf16, bool* int8) {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool tile = (edx >> 24) & 1u;
  *bf16 = (edx >> 22) & 1u;
  *int8 = (edx >> 25) & 1u;
  if (!tile) return false;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !((ecx >> 27) & 1u)) return false;  // OSXSAVE
  uint32_t xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if (((xcr0_lo >> 17) & 3u) != 3u) return false;
#ifdef __linux__
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
#endif
  return true;
}

CpuFeatures ReadCpuid() {
  __builtin_cpu_init();
  CpuFeatures f;
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.f16c = __builtin_cpu_supports("f16c");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
  f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
  bool amx_bf16 = false, amx_int8 = false;
  f.amx_tile = AmxUsable(&amx_bf16, &amx_int8);
  f.amx_bf16 = f.amx_tile && amx_bf16;
  f.amx_int8 = f.amx_tile && amx_int8;
  return f;
}

}  // namespace

const CpuFeatures& DetectCpuFeatures() {
  static const CpuFeatures features = ReadCpuid();
  return features;
}

std::string MissingCpuFeatures(CpuIsa isa, const CpuFeatures& f) {
  std::string missing;
  for (const Feature& feature : kFeatures) {
    if (feature.level > isa || f.*feature.has) continue;
    missing += (missing.empty() ? "" : " ") + std::string(feature.name);
  }
  return missing;
}

CpuIsa BestCpuIsa(const CpuFeatures& f) {
  CpuIsa best = CpuIsa::kAvx2;
  for (CpuIsa level : kLevels) {
    if (MissingCpuFeatures(level, f).empty()) best = level;
  }
  return best;
}

std::string_view CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAuto: return "auto";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
    case CpuIsa::kAvx512Vnni: return "avx512-vnni";
    case CpuIsa::kAvx512Bf16: return "avx512-bf16";
    case CpuIsa::kAmxBf16: return "amx-bf16";
  }
  return "?";
}

Result<CpuIsa> ParseCpuIsa(std::string_view name) {
  for (CpuIsa isa : {CpuIsa::kAuto, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Vnni,
                     CpuIsa::kAvx512Bf16, CpuIsa::kAmxBf16}) {
    if (name == CpuIsaName(isa)) return isa;
  }
  return InvalidArgument("unknown CPU ISA level '" + std::string(name) +
                         "' (--cpu-isa / UNIPREFILL_CPU_ISA: expected auto, avx2, avx512, "
                         "avx512-vnni, avx512-bf16 or amx-bf16)");
}

Result<CpuIsa> ResolveCpuIsa(CpuIsa requested, const CpuFeatures& f) {
  if (requested == CpuIsa::kAuto) return BestCpuIsa(f);
  const std::string missing = MissingCpuFeatures(requested, f);
  if (missing.empty()) return requested;
  std::string have;
  for (CpuIsa level : kLevels) {
    if (level > BestCpuIsa(f)) break;
    have += (have.empty() ? "" : ", ") + std::string(CpuIsaName(level));
  }
  return InvalidArgument("CPU ISA level '" + std::string(CpuIsaName(requested)) +
                         "' (--cpu-isa / UNIPREFILL_CPU_ISA) needs " + missing +
                         ", which this CPU lacks; it supports " + have +
                         " (or use auto to pick the best)");
}

std::string DescribeCpuFeatures(const CpuFeatures& f) {
  std::string out;
  for (const Feature& feature : kFeatures) {
    if (f.*feature.has) out += (out.empty() ? "" : " ") + std::string(feature.name);
  }
  return out.empty() ? "none of avx2 / avx512" : out;
}

}  // namespace uniprefill
