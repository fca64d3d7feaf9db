// QuantizeRowI8Blocks (cpu_quant_dot_i8.h) on the AVX2 baseline: it runs on every level, once per
// activation row and call (~in values against the kernels' in * out multiply-adds).
#include "ops/cpu/cpu_quant_dot_i8.h"

#include <immintrin.h>

namespace uniprefill::ops::cpu {
namespace {

float MaxAbs(const float* x, int64_t n) {  // n a multiple of 8
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 m = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) {
    m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask));
  }
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 8 values times inv, rounded to nearest even (as lrintf) and clamped to +-127.
__m256i Round8(const float* x, __m256 inv) {
  const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), inv));
  return _mm256_max_epi32(_mm256_min_epi32(q, _mm256_set1_epi32(127)), _mm256_set1_epi32(-127));
}

// One block of 32: xu = xq + 128 written, the sum of xq returned.
int32_t QuantizeBlock(const float* x, __m256 inv, uint8_t* xu) {
  const __m256i a = Round8(x, inv), b = Round8(x + 8, inv), c = Round8(x + 16, inv),
                d = Round8(x + 24, inv);
  // packs work per 128-bit lane: dwords come out in the order 0 4 1 5 2 6 3 7.
  const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
  const __m256i ordered =
      _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(xu),
                      _mm256_xor_si256(ordered, _mm256_set1_epi8(static_cast<char>(0x80))));
  const __m256i s = _mm256_add_epi32(_mm256_add_epi32(a, b), _mm256_add_epi32(c, d));
  __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
  return _mm_cvtsi128_si32(t);
}

}  // namespace

void QuantizeRowI8Blocks(const float* x, int64_t n, uint8_t* xu, float* scale, float* bsum) {
  for (int64_t i = 0; i < n; i += 32) {
    const float amax = MaxAbs(x + i, 32);
    const float s = amax / 127.0f;
    const __m256 inv = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    _mm256_storeu_ps(scale + i / 4, _mm256_set1_ps(s));  // 8 lanes of 4 values each
    // |sum| <= 32 * 127: exact in f32.
    bsum[i / 32] = s * static_cast<float>(QuantizeBlock(x + i, inv, xu + i));
  }
}

}  // namespace uniprefill::ops::cpu
