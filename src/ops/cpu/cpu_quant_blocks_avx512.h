// Block decoders shared by the AVX-512 kernel files (each compiled with its own flags: the
// unnamed namespace gives every one of them its own copy, so the linker never picks one built
// for another level). Layouts as in ggml-common.h.
#pragma once

#include <cstdint>
#include <cstring>

#include "ops/cpu/cpu_avx512_common.h"

namespace uniprefill::ops::cpu {
namespace {

// Q8_0 block: f16 d, int8 q[32]; the 32 values.
UP_INLINE_AVX512 __m256i BytesQ8_0(const uint8_t* b) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
}

// Q5_0 block: f16 d, u32 qh, qs[16]; q = (nibble | bit j of qh << 4) - 16, as int8.
// Four vector ALU ops (this decode is what bounds the Q5_0 kernels): qs is loaded into both
// 128-bit halves (a load-port broadcast), the high half shifted right by 4 under a word mask
// (so its low nibbles are qs's high ones), masked to nibbles, and 16 subtracted where bit j of
// qh is clear. (Before: shift, insert, and, masked move, or, subtract: 6-7 ops.)
UP_INLINE_AVX512 __m256i BytesQ5_0(const uint8_t* b) {
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  const __m256i v =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 6)));
  const __m256i shifted = _mm256_mask_srli_epi16(v, /*words 8..15*/ 0xFF00, v, 4);
  const __m256i nib = _mm256_and_si256(shifted, _mm256_set1_epi8(0x0F));
  return _mm256_mask_sub_epi8(nib, _cvtu32_mask32(~qh), nib, _mm256_set1_epi8(16));
}

// 6-bit scale and min j (0..7) of a Q4_K super-block (ggml's get_scale_min_k4).
UP_INLINE_AVX512 void ScaleMinK4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

}  // namespace
}  // namespace uniprefill::ops::cpu
