// Small single-threaded GEMM kernels for attention tiles: AVX2 (6 x 16 register blocks) and
// AVX-512 (12 x 16) variants, chosen by the context's ISA level through GemmTiles().
//
// Why not cblas_sgemm: attention is parallelised over (head, query tile) with our own pool, and
// Debian's OpenBLAS 0.3.21 (pthread variant) has only a process-global thread count
// (openblas_set_num_threads), so a call from a pool worker would fan out onto OpenBLAS's own
// threads and oversubscribe the cores; switching the global count per call is not thread-safe.
// These kernels run in the calling thread and keep the tiles in L1/L2.
#pragma once

#include <cstdint>

#include "core/cpu_isa.h"

namespace uniprefill::ops::cpu {

inline constexpr int kPanel = 16;  // columns per packed panel / register block

// Packs n rows of k floats (row stride src_stride) as the columns of B [k, n], in panels of
// kPanel columns: dst[p][kk][c] = src[(p * kPanel + c) * src_stride + kk], zero for rows >= n.
// dst holds RoundUp(n, kPanel) * k floats.
void PackPanels(float* dst, const float* src, int64_t src_stride, int n, int k);

// Writes columns [col0, col0 + n) of the packed layout of PackPanels from n rows of src (row
// stride src_stride); with src == nullptr writes zeros there. Lets a tile be packed from pieces.
void PackPanelColumns(float* dst, const float* src, int64_t src_stride, int col0, int n, int k);

// C [m, panels * kPanel] = A [m, k] @ B, B packed by PackPanels.
void GemmPacked(float* c, int64_t ldc, const float* a, int64_t lda, const float* b_packed, int m,
                int panels, int k);

// C[r][j] = alpha[r] * C[r][j] + sum_p A[r][p] * B[p][j] for r < m, j < n; B is row-major with
// row stride ldb and is read only inside [0, n); C rows must have room for RoundUp(n, kPanel)
// columns (the padding columns stay zero if they start zero).
void GemmAccumScaled(float* c, int64_t ldc, const float* alpha, const float* a, int64_t lda,
                     const float* b, int64_t ldb, int m, int n, int k);

// C[r][j] = dot(A[r], B[j]) over k for r < m <= kDotRowsMax, j < n; A and B row-major (row
// strides lda, ldb). For few rows (decode) this beats packing B, which would cost a pass over B.
inline constexpr int kDotRowsMax = 4;
void DotRows(float* c, int64_t ldc, const float* a, int64_t lda, const float* b, int64_t ldb, int m,
             int n, int k);

inline int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// The three tile kernels of one ISA level (same contracts as above; PackPanels is shared).
struct GemmTileKernels {
  void (*gemm_packed)(float* c, int64_t ldc, const float* a, int64_t lda, const float* b_packed,
                      int m, int panels, int k);
  void (*gemm_accum_scaled)(float* c, int64_t ldc, const float* alpha, const float* a,
                            int64_t lda, const float* b, int64_t ldb, int m, int n, int k);
  void (*dot_rows)(float* c, int64_t ldc, const float* a, int64_t lda, const float* b,
                   int64_t ldb, int m, int n, int k);
};

// The kernels for a resolved ISA level: from kAvx512 up the AVX-512 GEMMs (12 x 16 zmm blocking,
// cpu_gemm_tile_avx512.cc) with the AVX2 DotRows, else the AVX2 ones above.
const GemmTileKernels& GemmTiles(CpuIsa isa);

namespace avx512 {
const GemmTileKernels& GemmTiles();  // cpu_gemm_tile_avx512.cc
}  // namespace avx512

}  // namespace uniprefill::ops::cpu
