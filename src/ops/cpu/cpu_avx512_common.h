// What every AVX-512 translation unit of the CPU kernels starts with (include it only from files
// compiled with the AVX-512 flags: *_avx512*.cc and the headers they alone include): the
// intrinsics header without GCC 12's false warning, and the helpers they share.
#pragma once

// GCC 12 warns that the AVX-512 intrinsics' own _mm512_undefined_* placeholders are used
// uninitialised (GCC bug 105593, fixed in 12.3/13); the warning is about the header, not us.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstdint>
#include <cstring>

#define UP_INLINE_AVX512 inline __attribute__((always_inline))

namespace uniprefill::ops::cpu {
namespace {  // internal linkage: never merged with a same-named function of another level

// An f16 block scale (2 bytes, unaligned) as f32.
UP_INLINE_AVX512 float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// The same scale in all 16 lanes: a word broadcast (from memory) and one 16-wide conversion, one
// op fewer than Half's scalar conversion and a broadcast.
UP_INLINE_AVX512 __m512 HalfInLanes(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _mm512_cvtph_ps(_mm256_set1_epi16(static_cast<short>(h)));
}

}  // namespace
}  // namespace uniprefill::ops::cpu
