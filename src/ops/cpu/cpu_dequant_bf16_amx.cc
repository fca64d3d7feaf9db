// cpu_dequant_bf16_amx.h, compiled with the AMX flags (AVX-512 BF16 for the conversion). Block
// layouts as in ggml-common.h, the arithmetic as io/dequant.cc's scalar loops.
#include "ops/cpu/cpu_dequant_bf16_amx.h"

#include <cassert>
#include <cstring>

#include "ops/cpu/cpu_avx512_common.h"
#include "ops/cpu/cpu_dequant_rows_avx512.h"

namespace uniprefill::ops::cpu::amx {
namespace {

// How bf16 rows store 32 values (cpu_dequant_rows_avx512.h's store policy): as the f32 ones,
// then rounded to bf16 (round to nearest even).
struct StoreBf16 {
  // dst[0, 32) = bf16 of the 32 signed bytes q, each times the scale of its half (lo: first 16).
  static UP_INLINE_AVX512 void Mul(__m256i q, __m512 lo_scale, __m512 hi_scale, uint16_t* dst) {
    const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q)));
    const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1)));
    const __m512bh v =
        _mm512_cvtne2ps_pbh(_mm512_mul_ps(hi, hi_scale), _mm512_mul_ps(lo, lo_scale));
    _mm512_storeu_si512(dst, reinterpret_cast<__m512i>(v));
  }
  // dst[0, 32) = bf16(q * scale - min) for 32 unsigned bytes q.
  static UP_INLINE_AVX512 void Fmsub(__m256i q, __m512 scale, __m512 min, uint16_t* dst) {
    const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(q)));
    const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(q, 1)));
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_fmsub_ps(hi, scale, min),
                                           _mm512_fmsub_ps(lo, scale, min));
    _mm512_storeu_si512(dst, reinterpret_cast<__m512i>(v));
  }
};

void RowF32(const uint8_t* p, int64_t n, uint16_t* y) {
  const float* x = reinterpret_cast<const float*>(p);
  for (int64_t k = 0; k < n; k += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + k + 16), _mm512_loadu_ps(x + k));
    _mm512_storeu_si512(y + k, reinterpret_cast<__m512i>(v));
  }
}

void RowF16(const uint8_t* p, int64_t n, uint16_t* y) {
  for (int64_t k = 0; k < n; k += 32) {
    const __m512 lo = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    const __m512 hi =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)));
    _mm512_storeu_si512(y + k, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
    p += 64;
  }
}

}  // namespace

bool HasDequantRowBf16(DType type) {
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

void DequantRowBf16(DType type, const uint8_t* row, int64_t n, uint16_t* dst) {
  switch (type) {
    case DType::kQ8_0: DequantRowQ8_0<StoreBf16>(row, n / 32, dst); return;
    case DType::kQ5_0: DequantRowQ5_0<StoreBf16>(row, n / 32, dst); return;
    case DType::kQ4_K: DequantRowQ4_K<StoreBf16>(row, n / 256, dst); return;
    case DType::kQ6_K: DequantRowQ6_K<StoreBf16>(row, n / 256, dst); return;
    case DType::kF32: RowF32(row, n, dst); return;
    case DType::kF16: RowF16(row, n, dst); return;
    case DType::kBF16: std::memcpy(dst, row, static_cast<size_t>(n) * 2); return;
    default: assert(false && "no vector decoder for this type");
  }
}

}  // namespace uniprefill::ops::cpu::amx
