// GroupedGemmBf16 (grouped_gemm.h) on cublasGemmGroupedBatchedEx.
#include "ops/cuda/grouped_gemm.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"

namespace uniprefill::ops::cuda {

size_t GroupedGemmScratchBytes(int64_t groups) {
  return static_cast<size_t>(3 * groups) * sizeof(void*);
}

Status GroupedGemmBf16(DeviceContext& ctx, std::span<const GroupedGemmGroup> groups,
                       const GroupedGemmShape& shape, void* scratch) {
  // cuBLAS is column-major: a row-major [m, n] matrix is a column-major [n, m] one, so each group
  // runs c^T (n x m) = b (n x k) . a^T (k x m): op(A) = b^T of the column-major [k, n] b, op(B) =
  // the column-major [k, m] a.
  std::vector<const void*> a_ptrs, b_ptrs;
  std::vector<void*> c_ptrs;
  std::vector<int> m_cols;
  for (const GroupedGemmGroup& g : groups) {
    if (g.m <= 0) continue;
    a_ptrs.push_back(g.b);
    b_ptrs.push_back(g.a);
    c_ptrs.push_back(g.c);
    m_cols.push_back(g.m);
  }
  const int count = static_cast<int>(m_cols.size());
  if (count == 0) return OkStatus();
  cudaStream_t stream = ctx.cuda().stream();
  // Device arrays of pointers: A's, then B's, then C's.
  const void** d_a = static_cast<const void**>(scratch);
  const void** d_b = d_a + count;
  void** d_c = const_cast<void**>(reinterpret_cast<const void* const*>(d_b + count));
  UP_CUDA_CHECK(cudaMemcpyAsync(d_a, a_ptrs.data(), count * sizeof(void*), cudaMemcpyHostToDevice,
                                stream));
  UP_CUDA_CHECK(cudaMemcpyAsync(d_b, b_ptrs.data(), count * sizeof(void*), cudaMemcpyHostToDevice,
                                stream));
  UP_CUDA_CHECK(cudaMemcpyAsync(d_c, c_ptrs.data(), count * sizeof(void*), cudaMemcpyHostToDevice,
                                stream));
  const std::vector<cublasOperation_t> trans_a(count, CUBLAS_OP_T), trans_b(count, CUBLAS_OP_N);
  const std::vector<int> n(count, shape.n), k(count, shape.k), ones(count, 1);
  const std::vector<int> lda(count, static_cast<int>(shape.ldb)),
      ldb(count, static_cast<int>(shape.lda)), ldc(count, static_cast<int>(shape.ldc));
  const std::vector<float> alpha(count, 1.0f), beta(count, 0.0f);
  cublasHandle_t handle = ctx.cuda().blas();
  const cublasStatus_t st = cublasGemmGroupedBatchedEx(
      handle, trans_a.data(), trans_b.data(), n.data(), m_cols.data(), k.data(), alpha.data(),
      d_a, CUDA_R_16BF, lda.data(), d_b, CUDA_R_16BF, ldb.data(), beta.data(), d_c, CUDA_R_16BF,
      ldc.data(), count, ones.data(), CUBLAS_COMPUTE_32F);
  if (st != CUBLAS_STATUS_SUCCESS) {
    return Internal(std::string("cuBLAS grouped GEMM: ") + cublasGetStatusString(st));
  }
  // The host arrays above die here; a pageable cudaMemcpyAsync has read its source on return.
  return OkStatus();
}

}  // namespace uniprefill::ops::cuda
