// The AVX-512 multi-row int16-activation kernels (QuantDotI16RowsFn, cpu_quant_dot_i16.h): one
// weight row against up to kQuantDotI16Rows activation rows, the weights decoded to int16 once and
// multiplied into every row. Included only by cpu_quant_dot_i16_avx512.cc and
// cpu_quant_dot_i16_avx512_vnni.cc after cpu_quant_dot_i16_avx512_kernels.h (its helpers: DotAdd,
// LoadX, ScaleMinK4), so each level keeps its own copy (anonymous namespace).
//
// Why: a decode step of several requests (and a short prefill chunk) reads every weight once for
// all of its rows; per row only the integer multiply-adds and one conversion per block remain.
// The int32 sums per row are the single-row kernels' (same blocks: same bounds, no overflow);
// each scale group (kI16ScaleGroup activations: one K-quant super-block, eight 32-blocks) is
// multiplied by its activation scale once. The mins of Q4_K use the rows' dequantised
// 32-element sums (bsum), so they cost one FMA per super-block instead of a multiply-add per
// element.
#pragma once

#include <cstdint>

#include "ops/cpu/cpu_quant_dot_i16_avx512_kernels.h"

namespace uniprefill::ops::cpu {
namespace {

// Blocks of 32 with one f16 scale at the block start (Q8_0, Q5_0): Decode(b) gives the 32 weights
// as int16. Per row, a group's blocks accumulate d * sum(q * xq) in f32, then one FMA with the
// group's activation scale. (Q4_1 has no multi-row kernel: its min term made it slower than the
// f32-activation kernels, which LinearInt16Rows uses for it.)
template <int NX, int kBlockBytes, __m512i (*Decode)(const uint8_t*)>
void RowsBlocks32(const void* w, const I16Rows& x, int64_t n, float* out, int64_t os) {
  const uint8_t* b = static_cast<const uint8_t*>(w);
  const int16_t* xq = x.xq;
  const float* scale = x.scale;
  const int64_t xs = x.xq_stride, ss = x.scale_stride;
  __m512 total[NX];
  for (int r = 0; r < NX; ++r) total[r] = _mm512_setzero_ps();
  for (int64_t g0 = 0; g0 < n; g0 += kI16ScaleGroup) {
    const int64_t g1 = g0 + kI16ScaleGroup < n ? g0 + kI16ScaleGroup : n;
    __m512 acc[NX];
    for (int r = 0; r < NX; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t i = g0; i < g1; i += 32, b += kBlockBytes) {
      const __m512i q = Decode(b);
      const __m512 d = _mm512_set1_ps(Half(b));
      for (int r = 0; r < NX; ++r) {
        const __m512i p = _mm512_madd_epi16(q, LoadX(xq + r * xs + i));
        acc[r] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc[r]);
      }
    }
    const int64_t g = g0 / kI16ScaleGroup;
    for (int r = 0; r < NX; ++r) {
      total[r] = _mm512_fmadd_ps(acc[r], _mm512_set1_ps(scale[r * ss + g]), total[r]);
    }
  }
  for (int r = 0; r < NX; ++r) out[r * os] = _mm512_reduce_add_ps(total[r]);
}

UP_INLINE_AVX512 __m512i DecodeQ8_0(const uint8_t* b) { return _mm512_cvtepi8_epi16(BytesQ8_0(b)); }

UP_INLINE_AVX512 __m512i DecodeQ5_0(const uint8_t* b) { return _mm512_cvtepi8_epi16(BytesQ5_0(b)); }

// total[r] += sum[r] * d * (row r's scale of group g): the end of one scale group.
template <int NX>
UP_INLINE_AVX512 void AddGroup(__m512* total, const __m512* sum, float d, const I16Rows& x,
                               int64_t g) {
  for (int r = 0; r < NX; ++r) {
    total[r] =
        _mm512_fmadd_ps(sum[r], _mm512_set1_ps(d * x.scale[r * x.scale_stride + g]), total[r]);
  }
}

// Q4_K: per super-block (one scale group) the 8 sub-blocks' q * sc (int16) are decoded once; each
// row sums them in int32 and takes the mins from its 8 block sums.
template <int NX>
void RowsQ4_K(const void* w, const I16Rows& x, int64_t n, float* out, int64_t os) {
  const uint8_t* b = static_cast<const uint8_t*>(w);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m512 total[NX];
  __m256 acc_m[NX];
  for (int r = 0; r < NX; ++r) {
    total[r] = _mm512_setzero_ps();
    acc_m[r] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < n; i += 256, b += 144) {
    const uint8_t* scales = b + 4;
    const uint8_t* qs = b + 16;
    const float d = Half(b);
    alignas(32) float mins[8];
    __m512i sum[NX];
    for (int r = 0; r < NX; ++r) sum[r] = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j));
      int sc0, m0, sc1, m1;
      ScaleMinK4(2 * j, scales, &sc0, &m0);
      ScaleMinK4(2 * j + 1, scales, &sc1, &m1);
      mins[2 * j] = static_cast<float>(m0);
      mins[2 * j + 1] = static_cast<float>(m1);
      const __m512i q0 = _mm512_mullo_epi16(_mm512_cvtepu8_epi16(_mm256_and_si256(v, m4)),
                                            _mm512_set1_epi16(static_cast<int16_t>(sc0)));
      const __m512i q1 =
          _mm512_mullo_epi16(_mm512_cvtepu8_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4)),
                             _mm512_set1_epi16(static_cast<int16_t>(sc1)));
      for (int r = 0; r < NX; ++r) {
        const int16_t* xr = x.xq + r * x.xq_stride + i + 64 * j;
        sum[r] = DotAdd(DotAdd(sum[r], q0, LoadX(xr)), q1, LoadX(xr + 32));
      }
    }
    __m512 f[NX];
    for (int r = 0; r < NX; ++r) f[r] = _mm512_cvtepi32_ps(sum[r]);
    AddGroup<NX>(total, f, d, x, i / kI16ScaleGroup);
    const __m256 dm = _mm256_mul_ps(_mm256_set1_ps(Half(b + 2)), _mm256_load_ps(mins));
    for (int r = 0; r < NX; ++r) {
      acc_m[r] =
          _mm256_fmadd_ps(dm, _mm256_loadu_ps(x.bsum + r * x.bsum_stride + i / 32), acc_m[r]);
    }
  }
  for (int r = 0; r < NX; ++r) {
    const __m256 m = acc_m[r];
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    out[r * os] = _mm512_reduce_add_ps(total[r]) - _mm_cvtss_f32(s);
  }
}

// Q6_K: per half super-block the 4 groups' q * sc (int16) are decoded once; each row sums them in
// int32 and converts once per half (a whole super-block could overflow int32); one scale group
// per super-block.
template <int NX>
void RowsQ6_K(const void* w, const I16Rows& x, int64_t n, float* out, int64_t os) {
  const uint8_t* b = static_cast<const uint8_t*>(w);
  const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(0x03),
                k32 = _mm256_set1_epi8(32);
  __m512 total[NX];
  for (int r = 0; r < NX; ++r) total[r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 256, b += 210) {
    const float d = Half(b + 208);
    __m512 f[NX];
    for (int r = 0; r < NX; ++r) f[r] = _mm512_setzero_ps();
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = b + 64 * h;
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * h);
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h));
      const __m256i lo[4] = {_mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
                             _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                             _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4)};
      __m512i sum[NX];
      for (int r = 0; r < NX; ++r) sum[r] = _mm512_setzero_si512();
      for (int g = 0; g < 4; ++g) {
        const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), m3), 4);
        const __m256i q8 = _mm256_sub_epi8(_mm256_or_si256(lo[g], hi), k32);
        // int16 lanes 0..15 get scale 2g, lanes 16..31 scale 2g + 1.
        const __m512i s =
            _mm512_inserti64x4(_mm512_set1_epi16(sc[2 * g]), _mm256_set1_epi16(sc[2 * g + 1]), 1);
        const __m512i q = _mm512_mullo_epi16(_mm512_cvtepi8_epi16(q8), s);
        for (int r = 0; r < NX; ++r) {
          sum[r] = DotAdd(sum[r], q, LoadX(x.xq + r * x.xq_stride + i + 128 * h + 32 * g));
        }
      }
      for (int r = 0; r < NX; ++r) f[r] = _mm512_add_ps(f[r], _mm512_cvtepi32_ps(sum[r]));
    }
    AddGroup<NX>(total, f, d, x, i / kI16ScaleGroup);
  }
  for (int r = 0; r < NX; ++r) out[r * os] = _mm512_reduce_add_ps(total[r]);
}

// nx (1..kQuantDotI16Rows) -> the kernel instantiated for it.
template <template <int> class K>
void AnyRowsI16(const void* w, const I16Rows& x, int nx, int64_t n, float* out, int64_t os) {
  static_assert(kQuantDotI16Rows == 8, "one case per row count");
  switch (nx) {
    case 1:
      K<1>::Run(w, x, n, out, os);
      break;
    case 2:
      K<2>::Run(w, x, n, out, os);
      break;
    case 3:
      K<3>::Run(w, x, n, out, os);
      break;
    case 4:
      K<4>::Run(w, x, n, out, os);
      break;
    case 5:
      K<5>::Run(w, x, n, out, os);
      break;
    case 6:
      K<6>::Run(w, x, n, out, os);
      break;
    case 7:
      K<7>::Run(w, x, n, out, os);
      break;
    case 8:
      K<8>::Run(w, x, n, out, os);
      break;
    default:
      break;
  }
}

template <int NX>
struct KQ8_0 {
  static constexpr auto Run = &RowsBlocks32<NX, 34, DecodeQ8_0>;
};
template <int NX>
struct KQ5_0 {
  static constexpr auto Run = &RowsBlocks32<NX, 22, DecodeQ5_0>;
};
template <int NX>
struct KQ4_K {
  static constexpr auto Run = &RowsQ4_K<NX>;
};
template <int NX>
struct KQ6_K {
  static constexpr auto Run = &RowsQ6_K<NX>;
};

// This file's multi-row kernel for `type`, or nullptr.
QuantDotI16RowsFn LookupI16RowsKernel(DType type) {
  switch (type) {
    case DType::kQ8_0:
      return &AnyRowsI16<KQ8_0>;
    case DType::kQ5_0:
      return &AnyRowsI16<KQ5_0>;
    case DType::kQ4_K:
      return &AnyRowsI16<KQ4_K>;
    case DType::kQ6_K:
      return &AnyRowsI16<KQ6_K>;
    default:
      return nullptr;
  }
}

}  // namespace
}  // namespace uniprefill::ops::cpu
