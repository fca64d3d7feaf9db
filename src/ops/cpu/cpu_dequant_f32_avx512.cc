// cpu_dequant_f32_avx512.h, compiled with the AVX-512 flags. Block layouts as in ggml-common.h.
#include "ops/cpu/cpu_dequant_f32_avx512.h"

#include <cassert>
#include <cstring>

#include "ops/cpu/cpu_avx512_common.h"
#include "ops/cpu/cpu_quant_blocks_avx512.h"

namespace uniprefill::ops::cpu {
namespace {

// dst[0, 32) = the 32 signed bytes q, each times the scale of its half (lo: first 16).
UP_INLINE_AVX512 void StoreMul(__m256i q, __m512 lo_scale, __m512 hi_scale, float* dst) {
  const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q)));
  const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1)));
  _mm512_storeu_ps(dst, _mm512_mul_ps(lo, lo_scale));
  _mm512_storeu_ps(dst + 16, _mm512_mul_ps(hi, hi_scale));
}

// dst[0, 32) = q * scale - min for 32 unsigned bytes q (one fused multiply-subtract, as the
// scalar loop compiles).
UP_INLINE_AVX512 void StoreFmsub(__m256i q, __m512 scale, __m512 min, float* dst) {
  const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(q)));
  const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(q, 1)));
  _mm512_storeu_ps(dst, _mm512_fmsub_ps(scale, lo, min));
  _mm512_storeu_ps(dst + 16, _mm512_fmsub_ps(scale, hi, min));
}

UP_INLINE_AVX512 __m256i Load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

void RowQ8_0(const uint8_t* b, int64_t blocks, float* y) {
  for (int64_t i = 0; i < blocks; ++i, b += 34, y += 32) {
    const __m512 d = _mm512_set1_ps(Half(b));
    StoreMul(BytesQ8_0(b), d, d, y);
  }
}

void RowQ5_0(const uint8_t* b, int64_t blocks, float* y) {
  for (int64_t i = 0; i < blocks; ++i, b += 22, y += 32) {
    const __m512 d = _mm512_set1_ps(Half(b));
    StoreMul(BytesQ5_0(b), d, d, y);
  }
}

// Q4_K: f16 d, f16 dmin, u8 scales[12], u8 qs[128]; 4 x 64 values, low nibbles then high.
void RowQ4_K(const uint8_t* b, int64_t blocks, float* y) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int64_t i = 0; i < blocks; ++i, b += 144) {
    const float d = Half(b), dmin = Half(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* q = b + 16;
    for (int c = 0; c < 4; ++c, q += 32, y += 64) {
      int sc, m;
      ScaleMinK4(2 * c, scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      ScaleMinK4(2 * c + 1, scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      const __m256i bytes = Load32(q);
      StoreFmsub(_mm256_and_si256(bytes, low4), _mm512_set1_ps(d1), _mm512_set1_ps(m1), y);
      StoreFmsub(_mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4), _mm512_set1_ps(d2),
                 _mm512_set1_ps(m2), y + 32);
    }
  }
}

// Q6_K: u8 ql[128], u8 qh[64], i8 scales[16], f16 d; two halves of 128 values, each four runs
// of 32 whose 16-value halves have their own scale (d * sc first, then times q, as the scalar).
void RowQ6_K(const uint8_t* b, int64_t blocks, float* y) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), two = _mm256_set1_epi8(3);
  const __m256i bias = _mm256_set1_epi8(32);
  for (int64_t i = 0; i < blocks; ++i, b += 210) {
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
    const float d = Half(b + 208);
    for (int n = 0; n < 2; ++n, ql += 64, qh += 32, sc += 8, y += 128) {
      const __m256i l0 = Load32(ql), l1 = Load32(ql + 32), h = Load32(qh);
      const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(h, two), 4);
      const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), two), 4);
      const __m256i h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), two), 4);
      const __m256i h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), two), 4);
      const __m256i q[4] = {
          _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(l0, low4), h0), bias),
          _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(l1, low4), h1), bias),
          _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), h2),
                          bias),
          _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4), h3),
                          bias)};
      for (int r = 0; r < 4; ++r) {
        const __m512 lo = _mm512_set1_ps(d * static_cast<float>(sc[2 * r]));
        const __m512 hi = _mm512_set1_ps(d * static_cast<float>(sc[2 * r + 1]));
        StoreMul(q[r], lo, hi, y + 32 * r);
      }
    }
  }
}

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
    case DType::kQ8_0: RowQ8_0(row, n / 32, dst); return;
    case DType::kQ5_0: RowQ5_0(row, n / 32, dst); return;
    case DType::kQ4_K: RowQ4_K(row, n / 256, dst); return;
    case DType::kQ6_K: RowQ6_K(row, n / 256, dst); return;
    case DType::kF32: std::memcpy(dst, row, static_cast<size_t>(n) * 4); return;
    case DType::kF16: RowF16(row, n, dst); return;
    case DType::kBF16: RowBf16(row, n, dst); return;
    default: assert(false && "no AVX-512 f32 decoder for this type");
  }
}

}  // namespace uniprefill::ops::cpu
