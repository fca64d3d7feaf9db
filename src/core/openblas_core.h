// Which kernels OpenBLAS runs, and a repair for one known failure of its CPU detection.
//
// OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels at load time from the CPU's
// family and model numbers. Before 0.3.25 (Debian 12 ships 0.3.21) an Intel model it does not
// know falls back to the generic "Prescott" kernels (SSE3), whatever AVX2 / AVX-512 the CPU has
// (OpenBLAS issue 4267, fixed by PR 4268). Emerald Rapids (family 6, model 207) is one: there the
// default prefill GEMM ran 149 tok/s instead of 541 (Gemma 3 270M, 1K tokens, 2 threads). The
// documented override is the OPENBLAS_CORETYPE environment variable, read once when OpenBLAS is
// loaded, before main. So the repair restarts the program with it set
// (RestartIfOpenBlasChoseGenericKernels). Switching cores inside a running process
// (gotoblas_dynamic_quit + init, the first version of this repair) is not safe: OpenBLAS's worker
// threads, started at load, read the core table while they start, and one that started late read
// it while it was null (a SEGFAULT in CI). valgrind and gdb follow only the first image by
// default: set OPENBLAS_CORETYPE yourself when running a uniprefill program under them.
#pragma once

#include <string>

#include "core/cpu_isa.h"

namespace uniprefill {

struct OpenBlasCore {
  std::string config;         // openblas_get_config(): version and build options
  std::string chosen;         // the core OpenBLAS picked by itself at load time
  std::string running;        // the core its kernels come from now
  std::string note;           // why they differ (or why they should), else ""
};

// The core OpenBLAS would need for `f`'s instruction sets: "Cooperlake" (AVX-512 BF16),
// "SkylakeX" (AVX-512 F/BW/VL/DQ), "Haswell" (AVX2 + FMA), or "" (nothing better than SSE3).
std::string OpenBlasCoreFor(const CpuFeatures& f);

// Call first thing in main, before the program starts threads or prints: when OpenBLAS chose
// Prescott, the user did not set OPENBLAS_CORETYPE and OpenBlasCoreFor(the CPU) is not empty,
// re-executes this program (/proc/self/exe, same argv, same pid) with OPENBLAS_CORETYPE set to it
// and UNIPREFILL_OPENBLAS_CHOSE=Prescott, which also stops a second restart. Returns when no
// restart is needed, or when exec failed (the program then runs on the generic kernels and
// DescribeOpenBlasCore says so).
void RestartIfOpenBlasChoseGenericKernels(char** argv);

// What OpenBLAS runs in this process and, when it is the generic kernels on a CPU with better
// ones, what to do about it. Reads only; safe from any thread.
OpenBlasCore DescribeOpenBlasCore(const CpuFeatures& f);

}  // namespace uniprefill
