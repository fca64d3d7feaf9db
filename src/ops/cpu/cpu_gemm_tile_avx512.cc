// AVX-512 versions of the attention tile kernels (cpu_gemm_tile.h), same contracts and the same
// packed-panel layout (kPanel = 16 columns = one zmm), so PackPanels is shared.
// Register blocking: 12 rows x 32 columns (two panels) = 24 zmm accumulators, 2 for B; A comes in
// as a broadcast shared by the two panels' FMAs. Per k step: 2 loads + 12 broadcasts + 24 FMAs
// (a single 16-column panel, the last of an odd count, keeps 12 x 16).
// Column tails are masked loads / stores instead of AVX2's maskload. With <= 6 rows (decode)
// C = alpha C + P V runs 32 columns at a time (8 FMA chains). The decode scores (DotRows) stay on
// the AVX2 kernel (see the end of the file).
//
// Compiled with the AVX-512 flags (CMakeLists.txt, *_avx512.cc); only avx512::GemmTiles() is
// visible outside, the rest is in an anonymous namespace (see cpu_quant_dot_avx512.cc for why).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstdint>
#include <type_traits>
#include <utility>

#include "ops/cpu/cpu_gemm_tile.h"

namespace uniprefill::ops::cpu {
namespace {

constexpr int kRows = 12;  // rows per full micro-kernel

// Rows [0, MR) of C tile (16 columns) += A [MR, k] * B [k, 16], B packed (row stride kPanel) or in
// place (row stride ldb, lanes outside `mask` not read); C starts as alpha[r] * C (kAccum) or 0.
// MR is a template parameter, the row loops fully unrolled, so the accumulators stay in registers.
template <int MR, bool kAccum>
inline __attribute__((always_inline)) void Tile(float* c, int64_t ldc, const float* alpha,
                                                const float* a, int64_t lda, const float* b,
                                                int64_t ldb, int k, __mmask16 mask) {
  __m512 acc[MR];
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) {
    acc[r] = kAccum ? _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, c + r * ldc),
                                    _mm512_set1_ps(alpha[r]))
                    : _mm512_setzero_ps();
  }
  for (int p = 0; p < k; ++p) {
    const __m512 bv = _mm512_maskz_loadu_ps(mask, b + p * ldb);
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
      acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * lda + p]), bv, acc[r]);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) {
    if (kAccum) {
      _mm512_mask_storeu_ps(c + r * ldc, mask, acc[r]);
    } else {
      _mm512_storeu_ps(c + r * ldc, acc[r]);
    }
  }
}

// Rows [0, MR) of a 32-column C tile (two panels): C = alpha * C + A B with B rows in place
// (lanes outside mask0 / mask1 not read). Few rows (decode) need the two accumulators per row to
// keep 8 FMA chains in flight.
template <int MR>
inline __attribute__((always_inline)) void AccumTile2(float* c, int64_t ldc, const float* alpha,
                                                      const float* a, int64_t lda, const float* b,
                                                      int64_t ldb, int k, __mmask16 mask0,
                                                      __mmask16 mask1) {
  __m512 acc[MR][2];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) {
    const __m512 s = _mm512_set1_ps(alpha[r]);
    acc[r][0] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask0, c + r * ldc), s);
    acc[r][1] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask1, c + r * ldc + kPanel), s);
  }
  for (int p = 0; p < k; ++p) {
    const __m512 b0 = _mm512_maskz_loadu_ps(mask0, b + p * ldb);
    const __m512 b1 = _mm512_maskz_loadu_ps(mask1, b + p * ldb + kPanel);
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * lda + p]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) {
    _mm512_mask_storeu_ps(c + r * ldc, mask0, acc[r][0]);
    _mm512_mask_storeu_ps(c + r * ldc + kPanel, mask1, acc[r][1]);
  }
}

// Rows [0, MR) of a 32-column C tile made of two 16-column panels, b0 and b1 (each row stride
// ldb: packed panels or in place): per k step 2 loads feed 2 x MR FMAs, where a one-panel Tile's
// 1 load and MR embedded-broadcast loads feed MR (measured on the served chunked prefill: the
// attention's tile kernels were ~29% of its time, Column the larger part). Each C element sees
// the same FMAs in the same order as in Tile: bit-identical results.
template <int MR, bool kAccum>
inline __attribute__((always_inline)) void TilePair(float* c, int64_t ldc, const float* alpha,
                                                    const float* a, int64_t lda, const float* b0,
                                                    const float* b1, int64_t ldb, int k,
                                                    __mmask16 mask0, __mmask16 mask1) {
  __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) {
    if (kAccum) {
      const __m512 s = _mm512_set1_ps(alpha[r]);
      acc0[r] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask0, c + r * ldc), s);
      acc1[r] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask1, c + r * ldc + kPanel), s);
    } else {
      acc0[r] = _mm512_setzero_ps();
      acc1[r] = _mm512_setzero_ps();
    }
  }
  for (int p = 0; p < k; ++p) {
    const __m512 v0 = _mm512_maskz_loadu_ps(mask0, b0 + p * ldb);
    const __m512 v1 = _mm512_maskz_loadu_ps(mask1, b1 + p * ldb);
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * lda + p]);
      acc0[r] = _mm512_fmadd_ps(av, v0, acc0[r]);
      acc1[r] = _mm512_fmadd_ps(av, v1, acc1[r]);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) {
    if (kAccum) {
      _mm512_mask_storeu_ps(c + r * ldc, mask0, acc0[r]);
      _mm512_mask_storeu_ps(c + r * ldc + kPanel, mask1, acc1[r]);
    } else {
      _mm512_storeu_ps(c + r * ldc, acc0[r]);
      _mm512_storeu_ps(c + r * ldc + kPanel, acc1[r]);
    }
  }
}

// Calls tile(std::integral_constant<int, R>{}, r) over m rows: kRows rows at a time from r = 0,
// then the remainder (1 .. kRows - 1 rows) as one call of its own size, so every call's row loops
// are unrolled at compile time.
template <typename TileFn, int... R>
inline __attribute__((always_inline)) void RemainderTile(int rows, int r, TileFn& tile,
                                                         std::integer_sequence<int, R...>) {
  (
      [&] {
        if constexpr (R > 0) {
          if (rows == R) tile(std::integral_constant<int, R>{}, r);
        }
      }(),
      ...);
}
template <typename TileFn>
inline __attribute__((always_inline)) void RowTiles(int m, TileFn&& tile) {
  int r = 0;
  for (; r + kRows <= m; r += kRows) tile(std::integral_constant<int, kRows>{}, r);
  RemainderTile(m - r, r, tile, std::make_integer_sequence<int, kRows>{});
}

// All m rows of a two-panel (32-column) C tile.
template <bool kAccum>
void ColumnPair(float* c, int64_t ldc, const float* alpha, const float* a, int64_t lda,
                const float* b0, const float* b1, int64_t ldb, int m, int k, __mmask16 mask0,
                __mmask16 mask1) {
  RowTiles(m, [&](auto rows, int r) {
    TilePair<rows.value, kAccum>(c + r * ldc, ldc, kAccum ? alpha + r : alpha, a + r * lda, lda,
                                 b0, b1, ldb, k, mask0, mask1);
  });
}

// All m rows of one 16-column tile.
template <bool kAccum>
void Column(float* c, int64_t ldc, const float* alpha, const float* a, int64_t lda,
            const float* b, int64_t ldb, int m, int k, __mmask16 mask) {
  RowTiles(m, [&](auto rows, int r) {
    Tile<rows.value, kAccum>(c + r * ldc, ldc, kAccum ? alpha + r : alpha, a + r * lda, lda, b,
                             ldb, k, mask);
  });
}

void GemmPacked512(float* c, int64_t ldc, const float* a, int64_t lda, const float* b_packed,
                   int m, int panels, int k) {
  int p = 0;
  for (; p + 2 <= panels; p += 2) {
    const float* b0 = b_packed + int64_t{p} * kPanel * k;
    ColumnPair<false>(c + p * kPanel, ldc, nullptr, a, lda, b0, b0 + int64_t{kPanel} * k, kPanel,
                      m, k, 0xFFFF, 0xFFFF);
  }
  if (p < panels) {
    Column<false>(c + p * kPanel, ldc, nullptr, a, lda, b_packed + int64_t{p} * kPanel * k, kPanel,
                  m, k, 0xFFFF);
  }
}

__mmask16 Lanes(int valid) {  // the first min(max(valid, 0), 16) lanes
  return valid >= kPanel ? 0xFFFF : valid <= 0 ? 0 : static_cast<__mmask16>((1u << valid) - 1);
}

void GemmAccumScaled512(float* c, int64_t ldc, const float* alpha, const float* a, int64_t lda,
                        const float* b, int64_t ldb, int m, int n, int k) {
  if (m <= 6) {  // decode and short chunks: 32 columns at a time
    for (int c0 = 0; c0 < n; c0 += 2 * kPanel) {
      const __mmask16 m0 = Lanes(n - c0), m1 = Lanes(n - c0 - kPanel);
      switch (m) {
#define UP_SMALL_CASE(r) \
  case r: AccumTile2<r>(c + c0, ldc, alpha, a, lda, b + c0, ldb, k, m0, m1); break;
        UP_SMALL_CASE(1)
        UP_SMALL_CASE(2)
        UP_SMALL_CASE(3)
        UP_SMALL_CASE(4)
        UP_SMALL_CASE(5)
        UP_SMALL_CASE(6)
#undef UP_SMALL_CASE
        default: break;
      }
    }
    return;
  }
  int c0 = 0;
  for (; c0 + kPanel < n; c0 += 2 * kPanel) {  // two panels, the second at least partly inside
    ColumnPair<true>(c + c0, ldc, alpha, a, lda, b + c0, b + c0 + kPanel, ldb, m, k,
                     Lanes(n - c0), Lanes(n - c0 - kPanel));
  }
  if (c0 < n) Column<true>(c + c0, ldc, alpha, a, lda, b + c0, ldb, m, k, Lanes(n - c0));
}

// DotRows (decode scores) stays the AVX2 kernel: a 16-lane version measured ~25% slower at 16K
// keys (2.88 vs 2.29 ms, one thread), its per-key horizontal sums of a zmm costing more than the
// halved k loop saves.
constexpr GemmTileKernels kKernels = {&GemmPacked512, &GemmAccumScaled512, &DotRows};

}  // namespace

const GemmTileKernels& avx512::GemmTiles() { return kKernels; }

}  // namespace uniprefill::ops::cpu
