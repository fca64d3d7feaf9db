#include "core/openblas_core.h"

#include <cblas.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace uniprefill {
namespace {

// Set by the restart: what OpenBLAS chose before it. Its presence also means OPENBLAS_CORETYPE
// was set by us, not by the user.
constexpr const char* kChoseVariable = "UNIPREFILL_OPENBLAS_CHOSE";
constexpr const char* kGenericCore = "Prescott";

std::string CoreName() {
  const char* name = openblas_get_corename();
  return name ? name : "";
}

}  // namespace

std::string OpenBlasCoreFor(const CpuFeatures& f) {
  const bool avx512 = f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq;
  if (avx512 && f.avx512bf16) return "Cooperlake";
  if (avx512) return "SkylakeX";
  if (f.avx2 && f.fma) return "Haswell";
  return "";
}

void RestartIfOpenBlasChoseGenericKernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || std::getenv(kChoseVariable) != nullptr) return;
  if (CoreName() != kGenericCore) return;
  const std::string want = OpenBlasCoreFor(DetectCpuFeatures());
  if (want.empty()) return;
  setenv("OPENBLAS_CORETYPE", want.c_str(), /*overwrite=*/1);
  setenv(kChoseVariable, kGenericCore, /*overwrite=*/1);
  std::fflush(nullptr);
  execv("/proc/self/exe", argv);
  // Only reached when exec failed: run on, on the generic kernels, and leave the environment as
  // the user gave it.
  const int exec_errno = errno;
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(kChoseVariable);
  std::fprintf(stderr,
               "warning: OpenBLAS chose its generic %s kernels on this CPU and restarting with "
               "OPENBLAS_CORETYPE=%s failed (%s); set that variable before starting for faster "
               "GEMMs\n",
               kGenericCore, want.c_str(), std::strerror(exec_errno));
}

OpenBlasCore DescribeOpenBlasCore(const CpuFeatures& f) {
  OpenBlasCore core;
  const char* config = openblas_get_config();
  core.config = config ? config : "";
  core.chosen = core.running = CoreName();
  const char* chose = std::getenv(kChoseVariable);
  const std::string want = OpenBlasCoreFor(f);
  if (chose != nullptr) {
    core.chosen = chose;
    core.note = "OpenBLAS did not recognise this CPU and chose its generic " + core.chosen +
                " kernels; restarted with OPENBLAS_CORETYPE=" + core.running;
  } else if (core.running == kGenericCore && !want.empty()) {
    core.note = std::getenv("OPENBLAS_CORETYPE") != nullptr
                    ? "OPENBLAS_CORETYPE is set: left as the user chose"
                    : "OpenBLAS chose its generic kernels; set OPENBLAS_CORETYPE=" + want +
                          " before starting for faster GEMMs";
  }
  return core;
}

}  // namespace uniprefill
