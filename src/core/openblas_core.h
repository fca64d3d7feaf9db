// Which kernels OpenBLAS runs, and a repair for one known failure of its CPU detection.
//
// OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels at load time from the CPU's
// family and model numbers. Before 0.3.25 (Debian 12 ships 0.3.21) an Intel model it does not
// know falls back to the generic "Prescott" kernels (SSE3), whatever AVX2 / AVX-512 the CPU has
// (OpenBLAS issue 4267, fixed by PR 4268). Emerald Rapids (family 6, model 207) is one: there the
// default prefill GEMM ran 149 tok/s instead of 541 (Gemma 3 270M, 1K tokens, 2 threads). The
// documented override is the OPENBLAS_CORETYPE environment variable, read by OpenBLAS's dynamic-
// arch initialiser; EnsureOpenBlasCoreMatchesCpu sets it and runs that initialiser again.
#pragma once

#include <string>

#include "core/cpu_isa.h"

namespace uniprefill {

struct OpenBlasCore {
  std::string config;         // openblas_get_config(): version and build options
  std::string chosen;         // the core OpenBLAS picked by itself at load time
  std::string running;        // the core its kernels come from now
  std::string note;           // why they differ (or why they could not be made to), else ""
};

// The core OpenBLAS would need for `f`'s instruction sets: "Cooperlake" (AVX-512 BF16),
// "SkylakeX" (AVX-512 F/BW/VL/DQ), "Haswell" (AVX2 + FMA), or "" (nothing better than SSE3).
std::string OpenBlasCoreFor(const CpuFeatures& f);

// Once per process (a function-local static: concurrent callers wait for the first): when
// OpenBLAS chose Prescott, the user did not set OPENBLAS_CORETYPE, and `f` has AVX2 or more,
// selects OpenBlasCoreFor(f) through OpenBLAS's own initialiser (gotoblas_dynamic_init, found by
// dlsym: builds without DYNAMIC_ARCH have none and need none). Call it before the first BLAS call
// (DeviceContext does); never while another thread is inside OpenBLAS.
const OpenBlasCore& EnsureOpenBlasCoreMatchesCpu(const CpuFeatures& f);

}  // namespace uniprefill
