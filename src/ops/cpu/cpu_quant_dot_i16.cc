#include "ops/cpu/cpu_quant_dot_i16.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/cpu/cpu_math.h"
#include "ops/cpu/cpu_quant_dot_isa.h"

namespace uniprefill::ops::cpu {
namespace {

// 32 signed int8 weights (lo = elements 0..15, hi = 16..31) times 32 int16 activations: 8 int32
// partial sums. No overflow: |w| <= 128, |xq| <= 32767, 4 products per lane.
UP_INLINE __m256i Dot32(__m128i lo, __m128i hi, const int16_t* xq) {
  const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
  const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 16));
  return _mm256_add_epi32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(lo), x0),
                          _mm256_madd_epi16(_mm256_cvtepi8_epi16(hi), x1));
}

// Q8_0 block: fp16 d, int8 q[32].
UP_INLINE __m256i BlockQ8_0(const uint8_t* b, const int16_t* xq) {
  return Dot32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2)),
               _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 18)), xq);
}

// Q5_0 block: fp16 d, u32 qh, qs[16]; q = (nibble | bit << 4) - 16.
UP_INLINE __m256i BlockQ5_0(const uint8_t* b, const int16_t* xq) {
  const __m128i m4 = _mm_set1_epi8(0x0F), sixteen = _mm_set1_epi8(16);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  const __m256i hb = _mm256_and_si256(BytesFromBits(qh), _mm256_set1_epi8(0x10));
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 6));
  const __m128i lo =
      _mm_sub_epi8(_mm_or_si128(_mm_and_si128(v, m4), _mm256_castsi256_si128(hb)), sixteen);
  const __m128i hi = _mm_sub_epi8(
      _mm_or_si128(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm256_extracti128_si256(hb, 1)),
      sixteen);
  return Dot32(lo, hi, xq);
}

// Two blocks per iteration into two accumulators so the FMA latency overlaps.
template <int kBlockBytes, __m256i (*Block)(const uint8_t*, const int16_t*)>
float DotBlocks(const void* w, const int16_t* xq, int64_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(w);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64, b += 2 * kBlockBytes) {
    const __m256i p0 = Block(b, xq + i);
    const __m256i p1 = Block(b + kBlockBytes, xq + i + 32);
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(HalfAt(b)), _mm256_cvtepi32_ps(p0), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_set1_ps(HalfAt(b + kBlockBytes)), _mm256_cvtepi32_ps(p1), acc1);
  }
  if (i < n) {
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(HalfAt(b)), _mm256_cvtepi32_ps(Block(b, xq + i)), acc0);
  }
  return HorizontalSum(_mm256_add_ps(acc0, acc1));
}

// Q4_1 block: fp16 d, fp16 m, qs[16]; w = q * d + m, so the block's sum is
// d * sum(q * xq) + m * sum(xq). The min needs its own term, hence its own loop.
float DotQ4_1(const void* w, const int16_t* xq, int64_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(w);
  const __m128i m4 = _mm_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc_d = _mm256_setzero_ps(), acc_m = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 32, b += 20) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4));
    const __m256i q = Dot32(_mm_and_si128(v, m4), _mm_and_si128(_mm_srli_epi16(v, 4), m4), xq + i);
    // sum(xq) over the block: |sum| <= 32 * 32767, no overflow in int32.
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + i));
    const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + i + 16));
    const __m256i sx = _mm256_add_epi32(_mm256_madd_epi16(x0, ones), _mm256_madd_epi16(x1, ones));
    acc_d = _mm256_fmadd_ps(_mm256_set1_ps(HalfAt(b)), _mm256_cvtepi32_ps(q), acc_d);
    acc_m = _mm256_fmadd_ps(_mm256_set1_ps(HalfAt(b + 2)), _mm256_cvtepi32_ps(sx), acc_m);
  }
  return HorizontalSum(_mm256_add_ps(acc_d, acc_m));
}

}  // namespace

// Vectorised (every activation row of a batched step passes here once per Linear): the same
// f32 products, clamps and round-to-nearest-even conversions as the scalar tail, so the same
// values (and max |x| is order-independent).
void QuantizeRowI16(const float* x, int64_t n, int16_t* xq, float* scale) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 m8 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    // max(|x|, m8) keeps m8 where x is NaN, as std::max(amax, |x|) does.
    m8 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask), m8);
  }
  float amax = HorizontalMax(m8);
  for (; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  *scale = amax / 32767.0f;
  const float inv = amax > 0.0f ? 32767.0f / amax : 0.0f;
  const __m256 vinv = _mm256_set1_ps(inv), lo = _mm256_set1_ps(-32767.0f),
               hi = _mm256_set1_ps(32767.0f);
  i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a =
        _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vinv), lo), hi);
    const __m256 b =
        _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8), vinv), lo), hi);
    // packs interleaves the 128-bit lanes: a0 b0 a1 b1 -> a0 a1 b0 b1.
    const __m256i p = _mm256_packs_epi32(_mm256_cvtps_epi32(a), _mm256_cvtps_epi32(b));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(xq + i), _mm256_permute4x64_epi64(p, 0xD8));
  }
  for (; i < n; ++i) {
    xq[i] = static_cast<int16_t>(std::lrintf(std::clamp(x[i] * inv, -32767.0f, 32767.0f)));
  }
}

void QuantizeRowI16Groups(const float* x, int64_t n, int16_t* xq, float* scale, float* bsum) {
  for (int64_t g0 = 0; g0 < n; g0 += kI16ScaleGroup) {
    const int64_t len = std::min(kI16ScaleGroup, n - g0);
    float* s = &scale[g0 / kI16ScaleGroup];
    QuantizeRowI16(x + g0, len, xq + g0, s);
    for (int64_t j = g0 / 32; j < (g0 + len) / 32; ++j) {
      int32_t sum = 0;  // |sum| <= 32 * 32767: exact in int32 and in f32
      for (int i = 0; i < 32; ++i) sum += xq[32 * j + i];
      bsum[j] = *s * static_cast<float>(sum);
    }
  }
}

QuantDotI16Fn avx2::FusedQuantDotI16(DType type) {
  switch (type) {
    case DType::kQ8_0: return &DotBlocks<34, BlockQ8_0>;
    case DType::kQ5_0: return &DotBlocks<22, BlockQ5_0>;
    case DType::kQ4_1: return &DotQ4_1;
    default: return nullptr;
  }
}

}  // namespace uniprefill::ops::cpu
