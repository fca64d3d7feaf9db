// The AVX-512 int16-activation decode kernels (cpu_quant_dot_i16.h), one body for two levels:
// included only by cpu_quant_dot_i16_avx512.cc (AVX-512 F/BW/VL/DQ: vpmaddwd + vpaddd) and
// cpu_quant_dot_i16_avx512_vnni.cc (+ VNNI: vpdpwssd fuses the two), each compiled with its own
// flags. Everything is in an anonymous namespace so each of those files keeps its own copy (a
// shared inline would let the linker pick one compiled with the wrong flags).
//
// Layout of the work: 32 int16 activations fill one zmm, so a 32-weight block is one
// vpmovsx/zxbw (bytes -> int16) and one multiply-add. K-quants also keep their 6-/8-bit
// sub-block scales as integers: q * sc fits int16 (Q4_K <= 15 * 63, Q6_K <= 32 * 128), so a whole
// super-block (Q4_K) or half of one (Q6_K) accumulates in int32 with one conversion at its end;
// the Q4_K min term uses sum_j m_j * sum(xq of sub-block j), accumulated the same way.
// Overflow bounds per int32 lane (2 products per multiply-add, |xq| <= 32767): Q8_0 / Q5_0 /
// Q4_1 one block, <= 2 * 128 * 32767; Q4_K 8 sub-blocks, <= 16 * 945 * 32767 = 4.95e8 (mins
// 16 * 63 * 32767); Q6_K 4 groups, <= 8 * 4096 * 32767 = 1.07e9; all below 2^31.
#pragma once

#include <cstdint>
#include <cstring>

#include "ops/cpu/cpu_avx512_common.h"
#include "ops/cpu/cpu_quant_blocks_avx512.h"
#include "ops/cpu/cpu_quant_dot_isa.h"

namespace uniprefill::ops::cpu {
namespace {

UP_INLINE_AVX512 __m512i LoadX(const int16_t* xq) { return _mm512_loadu_si512(xq); }

// acc + pairwise sums of a * b (int16 -> int32 lanes).
UP_INLINE_AVX512 __m512i DotAdd(__m512i acc, __m512i a, __m512i b) {
#if defined(__AVX512VNNI__)
  return _mm512_dpwssd_epi32(acc, a, b);
#else
  return _mm512_add_epi32(acc, _mm512_madd_epi16(a, b));
#endif
}

// 32 signed bytes (elements 0..31 of a block) times 32 int16 activations: 16 int32 sums.
UP_INLINE_AVX512 __m512i Dot32(__m256i q, const int16_t* xq) {
  return _mm512_madd_epi16(_mm512_cvtepi8_epi16(q), LoadX(xq));
}

// Q8_0 block: f16 d, int8 q[32].
UP_INLINE_AVX512 __m512i BlockQ8_0(const uint8_t* b, const int16_t* xq) {
  return Dot32(BytesQ8_0(b), xq);
}

// Q5_0 block: f16 d, u32 qh, qs[16]; q = (nibble | bit j of qh << 4) - 16.
UP_INLINE_AVX512 __m512i BlockQ5_0(const uint8_t* b, const int16_t* xq) {
  return Dot32(BytesQ5_0(b), xq);
}

// Two blocks per iteration into two accumulators so the FMA latency overlaps.
template <int kBlockBytes, __m512i (*Block)(const uint8_t*, const int16_t*)>
float DotBlocks(const void* w, const int16_t* xq, int64_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(w);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64, b += 2 * kBlockBytes) {
    const __m512i p0 = Block(b, xq + i);
    const __m512i p1 = Block(b + kBlockBytes, xq + i + 32);
    acc0 = _mm512_fmadd_ps(HalfInLanes(b), _mm512_cvtepi32_ps(p0), acc0);
    acc1 = _mm512_fmadd_ps(HalfInLanes(b + kBlockBytes), _mm512_cvtepi32_ps(p1), acc1);
  }
  if (i < n) {
    acc0 = _mm512_fmadd_ps(HalfInLanes(b), _mm512_cvtepi32_ps(Block(b, xq + i)), acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

// Q4_1 block: f16 d, f16 m, qs[16]; the block's sum is d * sum(q * xq) + m * sum(xq).
float DotQ4_1(const void* w, const int16_t* xq, int64_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(w);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m512i ones = _mm512_set1_epi16(1);
  __m512 acc_d = _mm512_setzero_ps(), acc_m = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 32, b += 20) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4));
    const __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), m4);
    const __m512i x = LoadX(xq + i);
    const __m512i dq = _mm512_madd_epi16(_mm512_cvtepu8_epi16(q), x);
    const __m512i sx = _mm512_madd_epi16(ones, x);
    acc_d = _mm512_fmadd_ps(_mm512_set1_ps(Half(b)), _mm512_cvtepi32_ps(dq), acc_d);
    acc_m = _mm512_fmadd_ps(_mm512_set1_ps(Half(b + 2)), _mm512_cvtepi32_ps(sx), acc_m);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc_d, acc_m));
}

// Q4_K super-block: f16 d, f16 dmin, scales[12], qs[128] (32 bytes hold sub-block 2j in their
// low nibbles, 2j + 1 in their high ones); w = d * sc * q - dmin * m.
float DotQ4_K(const void* w, const int16_t* xq, int64_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(w);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 256, b += 144) {
    const uint8_t* scales = b + 4;
    const uint8_t* qs = b + 16;
    __m512i sum_q = _mm512_setzero_si512(), sum_m = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j));
      int sc0, m0, sc1, m1;
      ScaleMinK4(2 * j, scales, &sc0, &m0);
      ScaleMinK4(2 * j + 1, scales, &sc1, &m1);
      const __m512i x0 = LoadX(xq + i + 64 * j), x1 = LoadX(xq + i + 64 * j + 32);
      const __m512i q0 = _mm512_cvtepu8_epi16(_mm256_and_si256(v, m4));
      const __m512i q1 = _mm512_cvtepu8_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
      sum_q = DotAdd(sum_q, _mm512_mullo_epi16(q0, _mm512_set1_epi16(static_cast<int16_t>(sc0))),
                     x0);
      sum_q = DotAdd(sum_q, _mm512_mullo_epi16(q1, _mm512_set1_epi16(static_cast<int16_t>(sc1))),
                     x1);
      sum_m = DotAdd(sum_m, _mm512_set1_epi16(static_cast<int16_t>(m0)), x0);
      sum_m = DotAdd(sum_m, _mm512_set1_epi16(static_cast<int16_t>(m1)), x1);
    }
    acc = _mm512_fmadd_ps(_mm512_set1_ps(Half(b)), _mm512_cvtepi32_ps(sum_q), acc);
    acc = _mm512_fnmadd_ps(_mm512_set1_ps(Half(b + 2)), _mm512_cvtepi32_ps(sum_m), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

// Q6_K super-block: ql[128], qh[64], int8 scales[16], f16 d; q = (4 low bits | 2 high bits << 4)
// - 32 with one scale per 16 weights; each half (128 weights) sums in int32, then one FMA.
float DotQ6_K(const void* w, const int16_t* xq, int64_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(w);
  const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(0x03),
                k32 = _mm256_set1_epi8(32);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 256, b += 210) {
    const __m512 d = _mm512_set1_ps(Half(b + 208));
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = b + 64 * h;
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * h);
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h));
      const __m256i hi[4] = {
          _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4),
          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4),
          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4),
          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4)};
      const __m256i lo[4] = {_mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
                             _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                             _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4)};
      __m512i sum = _mm512_setzero_si512();
      for (int g = 0; g < 4; ++g) {
        const __m256i q = _mm256_sub_epi8(_mm256_or_si256(lo[g], hi[g]), k32);
        // int16 lanes 0..15 get scale 2g, lanes 16..31 scale 2g + 1.
        const __m512i s = _mm512_inserti64x4(_mm512_set1_epi16(sc[2 * g]),
                                             _mm256_set1_epi16(sc[2 * g + 1]), 1);
        sum = DotAdd(sum, _mm512_mullo_epi16(_mm512_cvtepi8_epi16(q), s),
                     LoadX(xq + i + 128 * h + 32 * g));
      }
      if (h == 0) {
        acc0 = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sum), acc0);
      } else {
        acc1 = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sum), acc1);
      }
    }
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

// This file's kernel for `type`, or nullptr.
QuantDotI16Fn LookupI16Kernel(DType type) {
  switch (type) {
    case DType::kQ8_0: return &DotBlocks<34, BlockQ8_0>;
    case DType::kQ5_0: return &DotBlocks<22, BlockQ5_0>;
    case DType::kQ4_1: return &DotQ4_1;
    case DType::kQ4_K: return &DotQ4_K;
    case DType::kQ6_K: return &DotQ6_K;
    default: return nullptr;
  }
}

}  // namespace
}  // namespace uniprefill::ops::cpu
