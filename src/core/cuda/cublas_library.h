// cuBLAS and cuBLASLt, loaded with dlopen when the first CUDA context is made instead of linked.
// Why: a process that merely links libcublasLt.so.13 carries ~150 MiB more resident memory from
// start to exit (its relocations and static data: an empty program linking it peaks at 154 MiB
// against 3 MiB, measured on the dev machine), which every CPU-only run of a CUDA-enabled build
// paid (issue 22's peak RSS goal; issue 21's memory per rank). The engine's cuBLAS calls resolve
// to forwarding definitions (cublas_library.cc) that call into the loaded libraries.
#pragma once

#include "core/status.h"

namespace uniprefill::cuda {

// Loads libcublasLt and libcublas (of the major version the engine was built with) once per
// process: from the CUDA toolkit's library folder of the build, else the loader's search path
// (LD_LIBRARY_PATH, ld.so.cache). An error names the library and what to install; every later
// call returns the same result.
Status LoadCublasLibraries();

}  // namespace uniprefill::cuda
