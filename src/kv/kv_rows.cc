#include "kv/kv_rows.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace uniprefill {

void StoreKvValues(void* dst, DType kv_dtype, const float* src, int64_t n) {
  if (kv_dtype != DType::kF16) {
    std::memcpy(dst, src, sizeof(float) * static_cast<size_t>(n));
    return;
  }
  constexpr float kMax = 65504.0f;  // the largest finite f16
  auto* out = static_cast<uint16_t*>(dst);
  const __m256 hi = _mm256_set1_ps(kMax), lo = _mm256_set1_ps(-kMax);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_max_ps(_mm256_min_ps(_mm256_loadu_ps(src + i), hi), lo);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) {
    const float x = std::clamp(src[i], -kMax, kMax);
    out[i] = static_cast<uint16_t>(
        _mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(x), _MM_FROUND_TO_NEAREST_INT), 0));
  }
}

void LoadKvValues(float* dst, const void* src, DType kv_dtype, int64_t n) {
  if (kv_dtype != DType::kF16) {
    std::memcpy(dst, src, sizeof(float) * static_cast<size_t>(n));
    return;
  }
  const auto* in = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  }
  for (; i < n; ++i) dst[i] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(in[i])));
}

}  // namespace uniprefill
