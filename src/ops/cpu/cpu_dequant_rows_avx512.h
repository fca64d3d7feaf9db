// The block loops of the AVX-512 row dequantisers (cpu_dequant_f32_avx512.cc: f32 rows for the
// per-call sgemm operand; cpu_dequant_bf16_amx.cc: bf16 rows for the AMX tiles), written once
// over a store policy that says how 32 values reach the output:
//   Store::Mul(q, lo_scale, hi_scale, dst):  32 signed bytes q, each times the scale of its half
//                                            (lo: the first 16)
//   Store::Fmsub(q, scale, min, dst):        32 unsigned bytes q as q * scale - min, one fused
//                                            multiply-subtract (what the scalar loops compile to)
// Block layouts as in ggml-common.h, the arithmetic as io/dequant.cc's scalar loops, so both
// outputs equal the scalar dequantiser's values (the f32 ones bit for bit, the bf16 ones after
// its rounding). Include only from files compiled with the AVX-512 flags; the unnamed namespace
// gives each its own copy.
#pragma once

#include <cstdint>

#include "ops/cpu/cpu_avx512_common.h"
#include "ops/cpu/cpu_quant_blocks_avx512.h"

namespace uniprefill::ops::cpu {
namespace {

UP_INLINE_AVX512 __m256i Load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Q8_0: f16 d, i8 qs[32].
template <class Store, class T>
void DequantRowQ8_0(const uint8_t* b, int64_t blocks, T* y) {
  for (int64_t i = 0; i < blocks; ++i, b += 34, y += 32) {
    const __m512 d = _mm512_set1_ps(Half(b));
    Store::Mul(BytesQ8_0(b), d, d, y);
  }
}

// Q5_0: f16 d, u32 qh (bit j = fifth bit of element j), u8 qs[16].
template <class Store, class T>
void DequantRowQ5_0(const uint8_t* b, int64_t blocks, T* y) {
  for (int64_t i = 0; i < blocks; ++i, b += 22, y += 32) {
    const __m512 d = _mm512_set1_ps(Half(b));
    Store::Mul(BytesQ5_0(b), d, d, y);
  }
}

// Q4_K: f16 d, f16 dmin, u8 scales[12], u8 qs[128]; 4 x 64 values, low nibbles then high.
template <class Store, class T>
void DequantRowQ4_K(const uint8_t* b, int64_t blocks, T* y) {
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
      Store::Fmsub(_mm256_and_si256(bytes, low4), _mm512_set1_ps(d1), _mm512_set1_ps(m1), y);
      Store::Fmsub(_mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4), _mm512_set1_ps(d2),
                   _mm512_set1_ps(m2), y + 32);
    }
  }
}

// Q6_K: u8 ql[128], u8 qh[64], i8 scales[16], f16 d; two halves of 128 values, each four runs
// of 32 whose 16-value halves have their own scale (d * sc first, then times q, as the scalar).
template <class Store, class T>
void DequantRowQ6_K(const uint8_t* b, int64_t blocks, T* y) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), two = _mm256_set1_epi8(3);
  const __m256i bias = _mm256_set1_epi8(32);
  for (int64_t i = 0; i < blocks; ++i, b += 210) {
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
    const float d = Half(b + 208);
    for (int n = 0; n < 2; ++n, ql += 64, qh += 32, sc += 8, y += 128) {
      const __m256i l0 = Load32(ql), l1 = Load32(ql + 32), h = Load32(qh);
      // The 2-bit high parts, shifted to bit 4 (bytes: no cross-byte bits after the masks).
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
        Store::Mul(q[r], lo, hi, y + 32 * r);
      }
    }
  }
}

}  // namespace
}  // namespace uniprefill::ops::cpu
