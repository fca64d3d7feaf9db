#include "ops/cpu/cpu_sgemm.h"

#include <cblas.h>

#include <algorithm>

namespace uniprefill::ops::cpu {

namespace {
constexpr int64_t kSplitAlign = 16;  // a part's rows / columns: whole register blocks
}  // namespace

void PoolSgemm(DeviceContext& ctx, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float* out, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (openblas_get_num_threads() > 1) {  // UNIPREFILL_OPENBLAS_OWN_THREADS: OpenBLAS splits it
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb),
                0.0f, out, static_cast<int>(ldc));
    return;
  }
  const bool split_m = m >= n;
  const int64_t extent = split_m ? m : n;
  const int64_t parts = std::min<int64_t>(ctx.threads(), (extent + kSplitAlign - 1) / kSplitAlign);
  const int64_t per = ((extent + parts - 1) / parts + kSplitAlign - 1) / kSplitAlign * kSplitAlign;
  ctx.pool().ParallelFor(parts, 1, [&](int64_t first, int64_t last, int) {
    for (int64_t part = first; part < last; ++part) {
      const int64_t begin = part * per, count = std::min(extent, begin + per) - begin;
      if (count <= 0) continue;
      if (split_m) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(count),
                    static_cast<int>(n), static_cast<int>(k), alpha, a + begin * lda,
                    static_cast<int>(lda), b, static_cast<int>(ldb), 0.0f, out + begin * ldc,
                    static_cast<int>(ldc));
      } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m),
                    static_cast<int>(count), static_cast<int>(k), alpha, a, static_cast<int>(lda),
                    b + begin * ldb, static_cast<int>(ldb), 0.0f, out + begin,
                    static_cast<int>(ldc));
      }
    }
  });
}

}  // namespace uniprefill::ops::cpu
