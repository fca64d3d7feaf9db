// Small AVX2 math helpers shared by CPU kernels.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

// Forces inlining of small SIMD helpers in hot loops (GCC otherwise keeps some out of line).
#ifndef UP_INLINE
#define UP_INLINE inline __attribute__((always_inline))
#endif

namespace uniprefill::ops::cpu {

// The fp16 value stored (little-endian, possibly unaligned) at p, as f32.
UP_INLINE float HalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Byte j of the result is 0xFF when bit j of x is set (32 bits -> 32 bytes).
UP_INLINE __m256i BytesFromBits(uint32_t x) {
  const __m256i shuf = _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101,
                                          0x0202020202020202, 0x0303030303030303);
  __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(x)), shuf);
  bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

// Cephes expf, ~1 ulp on [-87.3, 88]: x = n ln2 + r, |r| <= ln2 / 2, exp(r) by a degree-7
// polynomial, times 2^n. Inputs are clamped to that range (exp(-inf) gives ~1e-38, not 0).
inline __m256 Exp(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.0f));
  const __m256 fx = _mm256_floor_ps(
      _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  const __m256i n =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(n));
}

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float HorizontalMax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace uniprefill::ops::cpu
