#include "core/cuda/cublas_library.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>

#include <string>

namespace uniprefill::cuda {
namespace {

struct CublasHandles {
  void* lt = nullptr;    // libcublasLt.so.N
  void* blas = nullptr;  // libcublas.so.N
  std::string error;     // why a library did not load (empty: both loaded)
};

void* OpenLibrary(const std::string& soname, std::string* error) {
#ifdef UP_CUDA_LIBRARY_DIR
  if (void* h = dlopen((std::string(UP_CUDA_LIBRARY_DIR) + "/" + soname).c_str(), RTLD_NOW)) {
    return h;
  }
#endif
  if (void* h = dlopen(soname.c_str(), RTLD_NOW)) return h;
  const char* why = dlerror();
  *error = "cannot load " + soname + " (" + (why ? why : "not found") +
           "): install CUDA's cuBLAS " + std::to_string(CUBLAS_VER_MAJOR) +
           " (the toolkit, or PyPI nvidia-cublas) or add its folder to LD_LIBRARY_PATH";
  return nullptr;
}

// A process-wide fact (the libraries stay loaded until exit), made once on first use.
const CublasHandles& Handles() {
  static const CublasHandles handles = [] {
    CublasHandles h;
    const std::string major = std::to_string(CUBLAS_VER_MAJOR);
    h.lt = OpenLibrary("libcublasLt.so." + major, &h.error);
    if (h.lt != nullptr) h.blas = OpenLibrary("libcublas.so." + major, &h.error);
    return h;
  }();
  return handles;
}

// The library's `name` as the function type Fn, or null (LoadCublasLibraries failed).
template <typename Fn>
Fn Symbol(bool lt, const char* name) {
  void* lib = lt ? Handles().lt : Handles().blas;
  return lib == nullptr ? nullptr : reinterpret_cast<Fn>(dlsym(lib, name));
}

}  // namespace

Status LoadCublasLibraries() {
  const CublasHandles& h = Handles();
  if (!h.error.empty()) return Unavailable("cuBLAS: " + h.error);
  return OkStatus();
}

}  // namespace uniprefill::cuda

// The cuBLAS entry points the engine calls, with the headers' exact signatures. Each resolves
// its symbol once; before the libraries are loaded (LoadCublasLibraries failed or was not
// called) it answers CUBLAS_STATUS_NOT_INITIALIZED.
#define UP_CUBLAS_FORWARD(lt, name, params, args)                                        \
  cublasStatus_t CUBLASWINAPI name params {                                              \
    static const auto fn = uniprefill::cuda::Symbol<decltype(&name)>(lt, #name);         \
    return fn == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : fn args;                      \
  }

extern "C" {

UP_CUBLAS_FORWARD(true, cublasLtCreate, (cublasLtHandle_t * handle), (handle))
UP_CUBLAS_FORWARD(true, cublasLtDestroy, (cublasLtHandle_t handle), (handle))
UP_CUBLAS_FORWARD(true, cublasLtMatmul,
                  (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                   const void* A, cublasLtMatrixLayout_t a_desc, const void* B,
                   cublasLtMatrixLayout_t b_desc, const void* beta, const void* C,
                   cublasLtMatrixLayout_t c_desc, void* D, cublasLtMatrixLayout_t d_desc,
                   const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                   cudaStream_t stream),
                  (handle, desc, alpha, A, a_desc, B, b_desc, beta, C, c_desc, D, d_desc, algo,
                   workspace, workspace_bytes, stream))
UP_CUBLAS_FORWARD(true, cublasLtMatmulAlgoGetHeuristic,
                  (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                   cublasLtMatrixLayout_t a_desc, cublasLtMatrixLayout_t b_desc,
                   cublasLtMatrixLayout_t c_desc, cublasLtMatrixLayout_t d_desc,
                   cublasLtMatmulPreference_t preference, int requested,
                   cublasLtMatmulHeuristicResult_t results[], int* returned),
                  (handle, desc, a_desc, b_desc, c_desc, d_desc, preference, requested, results,
                   returned))
UP_CUBLAS_FORWARD(true, cublasLtMatmulAlgoCheck,
                  (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                   cublasLtMatrixLayout_t a_desc, cublasLtMatrixLayout_t b_desc,
                   cublasLtMatrixLayout_t c_desc, cublasLtMatrixLayout_t d_desc,
                   const cublasLtMatmulAlgo_t* algo, cublasLtMatmulHeuristicResult_t* result),
                  (handle, desc, a_desc, b_desc, c_desc, d_desc, algo, result))
UP_CUBLAS_FORWARD(true, cublasLtMatmulDescCreate,
                  (cublasLtMatmulDesc_t * desc, cublasComputeType_t compute,
                   cudaDataType_t scale),
                  (desc, compute, scale))
UP_CUBLAS_FORWARD(true, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t desc), (desc))
UP_CUBLAS_FORWARD(true, cublasLtMatmulDescSetAttribute,
                  (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                   const void* buf, size_t bytes),
                  (desc, attr, buf, bytes))
UP_CUBLAS_FORWARD(true, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * pref),
                  (pref))
UP_CUBLAS_FORWARD(true, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref),
                  (pref))
UP_CUBLAS_FORWARD(true, cublasLtMatmulPreferenceSetAttribute,
                  (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                   const void* buf, size_t bytes),
                  (pref, attr, buf, bytes))
UP_CUBLAS_FORWARD(true, cublasLtMatrixLayoutCreate,
                  (cublasLtMatrixLayout_t * layout, cudaDataType type, uint64_t rows,
                   uint64_t cols, int64_t ld),
                  (layout, type, rows, cols, ld))
UP_CUBLAS_FORWARD(true, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t layout), (layout))
UP_CUBLAS_FORWARD(false, cublasCreate_v2, (cublasHandle_t * handle), (handle))
UP_CUBLAS_FORWARD(false, cublasDestroy_v2, (cublasHandle_t handle), (handle))
UP_CUBLAS_FORWARD(false, cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t stream),
                  (handle, stream))
UP_CUBLAS_FORWARD(false, cublasGemmGroupedBatchedEx,
                  (cublasHandle_t handle, const cublasOperation_t transa[],
                   const cublasOperation_t transb[], const int m[], const int n[], const int k[],
                   const void* alpha, const void* const A[], cudaDataType_t a_type,
                   const int lda[], const void* const B[], cudaDataType_t b_type, const int ldb[],
                   const void* beta, void* const C[], cudaDataType_t c_type, const int ldc[],
                   int group_count, const int group_size[], cublasComputeType_t compute),
                  (handle, transa, transb, m, n, k, alpha, A, a_type, lda, B, b_type, ldb, beta, C,
                   c_type, ldc, group_count, group_size, compute))

// Status strings: the library's own once loaded, else a fixed text (errors may be reported
// before or without the libraries).
const char* CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) {
  static const auto fn =
      uniprefill::cuda::Symbol<decltype(&cublasLtGetStatusString)>(true, "cublasLtGetStatusString");
  return fn == nullptr ? "cuBLASLt status (library not loaded)" : fn(status);
}

const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  static const auto fn =
      uniprefill::cuda::Symbol<decltype(&cublasGetStatusString)>(false, "cublasGetStatusString");
  return fn == nullptr ? "cuBLAS status (library not loaded)" : fn(status);
}

}  // extern "C"
