#include "ops/cpu/cpu_gemm_tile.h"

#include <immintrin.h>

#include <cstring>

#include "ops/cpu/cpu_math.h"

// Register blocking: MR (<= 6) rows x 16 columns = 12 ymm accumulators, 2 for B, 1 broadcast of A:
// 15 of the 16 ymm registers. Per k step: 2 loads + MR broadcasts for 2 * MR FMAs, so Zen's one
// 256-bit FMA per cycle stays the bottleneck.

namespace uniprefill::ops::cpu {
namespace {

template <int MR>
void KernelPacked(float* c, int64_t ldc, const float* a, int64_t lda, const float* bp, int k) {
  __m256 acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int p = 0; p < k; ++p) {
    const __m256 b0 = _mm256_loadu_ps(bp + kPanel * p);
    const __m256 b1 = _mm256_loadu_ps(bp + kPanel * p + 8);
    for (int r = 0; r < MR; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r * lda + p);
      acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    _mm256_storeu_ps(c + r * ldc, acc[r][0]);
    _mm256_storeu_ps(c + r * ldc + 8, acc[r][1]);
  }
}

// The full 6-row kernels with named accumulators: with an array GCC 12 keeps spilling every
// accumulator to the stack inside the k loop.
#define UP_FMA_ROW(i)                                     \
  do {                                                    \
    const __m256 av = _mm256_broadcast_ss(ap + (i) * lda); \
    c##i##0 = _mm256_fmadd_ps(av, b0, c##i##0);           \
    c##i##1 = _mm256_fmadd_ps(av, b1, c##i##1);           \
  } while (0)
#define UP_STORE_ROW(i)                          \
  do {                                           \
    _mm256_storeu_ps(c + (i) * ldc, c##i##0);     \
    _mm256_storeu_ps(c + (i) * ldc + 8, c##i##1); \
  } while (0)

template <>
void KernelPacked<6>(float* c, int64_t ldc, const float* a, int64_t lda, const float* bp, int k) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
         c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int p = 0; p < k; ++p) {
    const __m256 b0 = _mm256_loadu_ps(bp + kPanel * p);
    const __m256 b1 = _mm256_loadu_ps(bp + kPanel * p + 8);
    const float* ap = a + p;
    UP_FMA_ROW(0);
    UP_FMA_ROW(1);
    UP_FMA_ROW(2);
    UP_FMA_ROW(3);
    UP_FMA_ROW(4);
    UP_FMA_ROW(5);
  }
  UP_STORE_ROW(0);
  UP_STORE_ROW(1);
  UP_STORE_ROW(2);
  UP_STORE_ROW(3);
  UP_STORE_ROW(4);
  UP_STORE_ROW(5);
}

template <bool kTail>
void KernelAccum6(float* c, int64_t ldc, const float* alpha, const float* a, int64_t lda,
                  const float* b, int64_t ldb, int k, __m256i mask0, __m256i mask1) {
#define UP_LOAD_ROW(i)                                              \
  const __m256 s##i = _mm256_broadcast_ss(alpha + (i));             \
  __m256 c##i##0 = _mm256_mul_ps(_mm256_loadu_ps(c + (i) * ldc), s##i); \
  __m256 c##i##1 = _mm256_mul_ps(_mm256_loadu_ps(c + (i) * ldc + 8), s##i)
  UP_LOAD_ROW(0);
  UP_LOAD_ROW(1);
  UP_LOAD_ROW(2);
  UP_LOAD_ROW(3);
  UP_LOAD_ROW(4);
  UP_LOAD_ROW(5);
#undef UP_LOAD_ROW
  for (int p = 0; p < k; ++p) {
    const float* br = b + p * ldb;
    const __m256 b0 = kTail ? _mm256_maskload_ps(br, mask0) : _mm256_loadu_ps(br);
    const __m256 b1 = kTail ? _mm256_maskload_ps(br + 8, mask1) : _mm256_loadu_ps(br + 8);
    const float* ap = a + p;
    UP_FMA_ROW(0);
    UP_FMA_ROW(1);
    UP_FMA_ROW(2);
    UP_FMA_ROW(3);
    UP_FMA_ROW(4);
    UP_FMA_ROW(5);
  }
  UP_STORE_ROW(0);
  UP_STORE_ROW(1);
  UP_STORE_ROW(2);
  UP_STORE_ROW(3);
  UP_STORE_ROW(4);
  UP_STORE_ROW(5);
}
#undef UP_FMA_ROW
#undef UP_STORE_ROW

template <int MR, bool kTail>
void KernelAccum(float* c, int64_t ldc, const float* alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, int k, __m256i mask0, __m256i mask1) {
  __m256 acc[MR][2];
  for (int r = 0; r < MR; ++r) {
    const __m256 s = _mm256_broadcast_ss(alpha + r);
    acc[r][0] = _mm256_mul_ps(_mm256_loadu_ps(c + r * ldc), s);
    acc[r][1] = _mm256_mul_ps(_mm256_loadu_ps(c + r * ldc + 8), s);
  }
  for (int p = 0; p < k; ++p) {
    const float* br = b + p * ldb;
    const __m256 b0 = kTail ? _mm256_maskload_ps(br, mask0) : _mm256_loadu_ps(br);
    const __m256 b1 = kTail ? _mm256_maskload_ps(br + 8, mask1) : _mm256_loadu_ps(br + 8);
    for (int r = 0; r < MR; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r * lda + p);
      acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    _mm256_storeu_ps(c + r * ldc, acc[r][0]);
    _mm256_storeu_ps(c + r * ldc + 8, acc[r][1]);
  }
}

template <bool kTail>
void AccumPanel(float* c, int64_t ldc, const float* alpha, const float* a, int64_t lda,
                const float* b, int64_t ldb, int m, int k, __m256i m0, __m256i m1) {
  int r = 0;
  for (; r + 6 <= m; r += 6) {
    KernelAccum6<kTail>(c + r * ldc, ldc, alpha + r, a + r * lda, lda, b, ldb, k, m0, m1);
  }
  float* cr = c + r * ldc;
  const float* ar = a + r * lda;
  switch (m - r) {
    case 1: KernelAccum<1, kTail>(cr, ldc, alpha + r, ar, lda, b, ldb, k, m0, m1); break;
    case 2: KernelAccum<2, kTail>(cr, ldc, alpha + r, ar, lda, b, ldb, k, m0, m1); break;
    case 3: KernelAccum<3, kTail>(cr, ldc, alpha + r, ar, lda, b, ldb, k, m0, m1); break;
    case 4: KernelAccum<4, kTail>(cr, ldc, alpha + r, ar, lda, b, ldb, k, m0, m1); break;
    case 5: KernelAccum<5, kTail>(cr, ldc, alpha + r, ar, lda, b, ldb, k, m0, m1); break;
    default: break;
  }
}

template <int M>
void DotRowsM(float* c, int64_t ldc, const float* a, int64_t lda, const float* b, int64_t ldb,
              int n, int k) {
  for (int j = 0; j < n; ++j) {
    const float* br = b + j * ldb;
    __m256 acc[M];
    for (int r = 0; r < M; ++r) acc[r] = _mm256_setzero_ps();
    int p = 0;
    for (; p + 8 <= k; p += 8) {
      const __m256 bv = _mm256_loadu_ps(br + p);
      for (int r = 0; r < M; ++r) acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(a + r * lda + p), bv, acc[r]);
    }
    for (int r = 0; r < M; ++r) {
      float sum = HorizontalSum(acc[r]);
      for (int q = p; q < k; ++q) sum += a[r * lda + q] * br[q];
      c[r * ldc + j] = sum;
    }
  }
}

__m256i TailMask(int valid) {  // lanes < valid set
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(valid), idx);
}

}  // namespace

void PackPanels(float* dst, const float* src, int64_t src_stride, int n, int k) {
  const int panels = static_cast<int>(RoundUp(n, kPanel) / kPanel);
  for (int p = 0; p < panels; ++p) {
    float* d = dst + static_cast<int64_t>(p) * kPanel * k;
    const int cols = n - p * kPanel < kPanel ? n - p * kPanel : kPanel;
    if (cols < kPanel) std::memset(d, 0, sizeof(float) * kPanel * k);
    for (int c = 0; c < cols; ++c) {
      const float* s = src + (static_cast<int64_t>(p) * kPanel + c) * src_stride;
      for (int kk = 0; kk < k; ++kk) d[kk * kPanel + c] = s[kk];
    }
  }
}

void PackPanelColumns(float* dst, const float* src, int64_t src_stride, int col0, int n, int k) {
  for (int j = 0; j < n; ++j) {
    const int col = col0 + j;
    float* d = dst + static_cast<int64_t>(col / kPanel) * kPanel * k + col % kPanel;
    const float* s = src ? src + j * src_stride : nullptr;
    for (int kk = 0; kk < k; ++kk) d[kk * kPanel] = s ? s[kk] : 0.0f;
  }
}

void GemmPacked(float* c, int64_t ldc, const float* a, int64_t lda, const float* b_packed, int m,
                int panels, int k) {
  for (int p = 0; p < panels; ++p) {
    const float* bp = b_packed + static_cast<int64_t>(p) * kPanel * k;
    float* cp = c + p * kPanel;
    int r = 0;
    for (; r + 6 <= m; r += 6) KernelPacked<6>(cp + r * ldc, ldc, a + r * lda, lda, bp, k);
    float* cr = cp + r * ldc;
    const float* ar = a + r * lda;
    switch (m - r) {
      case 1: KernelPacked<1>(cr, ldc, ar, lda, bp, k); break;
      case 2: KernelPacked<2>(cr, ldc, ar, lda, bp, k); break;
      case 3: KernelPacked<3>(cr, ldc, ar, lda, bp, k); break;
      case 4: KernelPacked<4>(cr, ldc, ar, lda, bp, k); break;
      case 5: KernelPacked<5>(cr, ldc, ar, lda, bp, k); break;
      default: break;
    }
  }
}

void DotRows(float* c, int64_t ldc, const float* a, int64_t lda, const float* b, int64_t ldb, int m,
             int n, int k) {
  switch (m) {
    case 1: DotRowsM<1>(c, ldc, a, lda, b, ldb, n, k); break;
    case 2: DotRowsM<2>(c, ldc, a, lda, b, ldb, n, k); break;
    case 3: DotRowsM<3>(c, ldc, a, lda, b, ldb, n, k); break;
    case 4: DotRowsM<4>(c, ldc, a, lda, b, ldb, n, k); break;
    default: break;
  }
}

void GemmAccumScaled(float* c, int64_t ldc, const float* alpha, const float* a, int64_t lda,
                     const float* b, int64_t ldb, int m, int n, int k) {
  const __m256i all = _mm256_set1_epi32(-1);
  for (int c0 = 0; c0 < n; c0 += kPanel) {
    if (c0 + kPanel <= n) {
      AccumPanel<false>(c + c0, ldc, alpha, a, lda, b + c0, ldb, m, k, all, all);
    } else {
      const int valid = n - c0;
      AccumPanel<true>(c + c0, ldc, alpha, a, lda, b + c0, ldb, m, k, TailMask(valid),
                       TailMask(valid - 8));
    }
  }
}

const GemmTileKernels& GemmTiles(CpuIsa isa) {
  static constexpr GemmTileKernels kAvx2 = {&GemmPacked, &GemmAccumScaled, &DotRows};
  return isa >= CpuIsa::kAvx512 ? avx512::GemmTiles() : kAvx2;
}

}  // namespace uniprefill::ops::cpu
