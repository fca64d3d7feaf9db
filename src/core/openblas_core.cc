#include "core/openblas_core.h"

#include <cblas.h>
#include <dlfcn.h>

#include <cstdlib>

namespace uniprefill {
namespace {

std::string CoreName() {
  const char* name = openblas_get_corename();
  return name ? name : "";
}

OpenBlasCore Repair(const CpuFeatures& f) {
  OpenBlasCore core;
  const char* config = openblas_get_config();
  core.config = config ? config : "";
  core.chosen = core.running = CoreName();
  const std::string want = OpenBlasCoreFor(f);
  if (core.chosen != "Prescott" || want.empty()) return core;  // detected, or nothing better
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) {
    core.note = "OPENBLAS_CORETYPE is set: left as the user chose";
    return core;
  }
  using InitFn = void (*)();
  auto quit = reinterpret_cast<InitFn>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit"));
  auto init = reinterpret_cast<InitFn>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init"));
  if (quit == nullptr || init == nullptr) {
    core.note = "OpenBLAS chose its generic Prescott kernels and has no dynamic-arch initialiser "
                "to run again; set OPENBLAS_CORETYPE=" + want + " before starting";
    return core;
  }
  // gotoblas_dynamic_init returns at once while a core is set; quit clears it, and init then
  // reads OPENBLAS_CORETYPE as at load time.
  setenv("OPENBLAS_CORETYPE", want.c_str(), /*overwrite=*/0);
  quit();
  init();
  core.running = CoreName();
  core.note = "OpenBLAS did not recognise this CPU and chose its generic Prescott kernels; "
              "switched to " + core.running;
  return core;
}

}  // namespace

std::string OpenBlasCoreFor(const CpuFeatures& f) {
  const bool avx512 = f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
  if (avx512 && f.avx512bf16) return "Cooperlake";
  if (avx512) return "SkylakeX";
  if (f.avx2 && f.fma) return "Haswell";
  return "";
}

const OpenBlasCore& EnsureOpenBlasCoreMatchesCpu(const CpuFeatures& f) {
  static const OpenBlasCore core = Repair(f);
  return core;
}

}  // namespace uniprefill
