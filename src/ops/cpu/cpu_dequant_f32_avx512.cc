// cpu_dequant_f32_avx512.h, compiled with the AVX-512 flags. Block layouts as in ggml-common.h.
#include "ops/cpu/cpu_dequant_f32_avx512.h"

#include <cassert>
#include <cstring>

#include "ops/cpu/cpu_avx512_common.h"
#include "ops/cpu/cpu_dequant_rows_avx512.h"

namespace uniprefill::ops::cpu {
namespace {

// How f32 rows store 32 values (cpu_dequant_rows_avx512.h's store policy).
struct StoreF32 {
  // dst[0, 32) = the 32 signed bytes q, each times the scale of its half (lo: first 16).
  static UP_INLINE_AVX512 void Mul(__m256i q, __m512 lo_scale, __m512 hi_scale, float* dst) {
    const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q)));
    const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1)));
    _mm512_storeu_ps(dst, _mm512_mul_ps(lo, lo_scale));
    _mm512_storeu_ps(dst + 16, _mm512_mul_ps(hi, hi_scale));
  }
  // dst[0, 32) = q * scale - min for 32 unsigned bytes q.
  static UP_INLINE_AVX512 void Fmsub(__m256i q, __m512 scale, __m512 min, float* dst) {
    const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(q)));
    const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(q, 1)));
    _mm512_storeu_ps(dst, _mm512_fmsub_ps(scale, lo, min));
    _mm512_storeu_ps(dst + 16, _mm512_fmsub_ps(scale, hi, min));
  }
};

void RowF16(const uint8_t* p, int64_t n, float* y) {
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    _mm512_storeu_ps(y + k, _mm512_cvtph_ps(_mm256_loadu_si256(
                                reinterpret_cast<const __m256i*>(p + 2 * k))));
  }
  for (; k < n; ++k) y[k] = Half(p + 2 * k);
}

void RowBf16(const uint8_t* p, int64_t n, float* y) {
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    const __m512i w = _mm512_cvtepu16_epi32(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * k)));
    _mm512_storeu_ps(y + k, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
  for (; k < n; ++k) {
    uint32_t bits = static_cast<uint32_t>(p[2 * k] | (p[2 * k + 1] << 8)) << 16;
    std::memcpy(y + k, &bits, 4);
  }
}

}  // namespace

bool HasDequantRowF32Avx512(DType type) {
  switch (type) {
    case DType::kQ8_0:
    case DType::kQ5_0:
    case DType::kQ4_K:
    case DType::kQ6_K:
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
      return true;
    default:
      return false;
  }
}

void DequantRowF32Avx512(DType type, const uint8_t* row, int64_t n, float* dst) {
  switch (type) {
    case DType::kQ8_0: DequantRowQ8_0<StoreF32>(row, n / 32, dst); return;
    case DType::kQ5_0: DequantRowQ5_0<StoreF32>(row, n / 32, dst); return;
    case DType::kQ4_K: DequantRowQ4_K<StoreF32>(row, n / 256, dst); return;
    case DType::kQ6_K: DequantRowQ6_K<StoreF32>(row, n / 256, dst); return;
    case DType::kF32: std::memcpy(dst, row, static_cast<size_t>(n) * 4); return;
    case DType::kF16: RowF16(row, n, dst); return;
    case DType::kBF16: RowBf16(row, n, dst); return;
    default: assert(false && "no AVX-512 f32 decoder for this type");
  }
}

}  // namespace uniprefill::ops::cpu
