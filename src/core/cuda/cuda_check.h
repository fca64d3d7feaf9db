// Checks for CUDA runtime and cuBLAS calls. A failing CUDA call inside an op is a programming error
// or a lost device (nothing a user can fix by changing a request), so these abort with the file,
// line, call and the runtime's message; user-facing failures (no device, out of memory at load) are
// reported as Status by the code that allocates.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

#define UP_CUDA_CHECK(expr)                                                                   \
  do {                                                                                        \
    cudaError_t _err = (expr);                                                                \
    if (_err != cudaSuccess) {                                                                \
      std::fprintf(stderr, "CUDA error at %s:%d: %s: %s\n", __FILE__, __LINE__, #expr,        \
                   cudaGetErrorString(_err));                                                 \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)

// After every kernel launch: catches bad launch configurations at once (asynchronous faults
// surface at the next synchronising call, also checked).
#define UP_CUDA_CHECK_LAUNCH() UP_CUDA_CHECK(cudaGetLastError())

#define UP_CUBLAS_CHECK(expr)                                                                 \
  do {                                                                                        \
    cublasStatus_t _st = (expr);                                                              \
    if (_st != CUBLAS_STATUS_SUCCESS) {                                                       \
      std::fprintf(stderr, "cuBLAS error at %s:%d: %s: %s\n", __FILE__, __LINE__, #expr,      \
                   cublasLtGetStatusString(_st));                                               \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)
