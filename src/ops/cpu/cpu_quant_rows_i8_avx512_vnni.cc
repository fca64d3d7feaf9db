// The multi-row int8-activation kernels (QuantDotI8RowsFn, cpu_quant_dot_i8.h) on AVX-512 VNNI:
// one weight row against up to kQuantDotI8Rows activation rows. Compiled with -mavx512vnni
// (CMakeLists.txt); everything but the lookup is in an anonymous namespace (its own copies of the
// block decoders: no inline symbol shared with a TU of other flags).
//
// Layout of the work: a weight row is walked in units of 64 weights, decoded once to 64 signed
// bytes w (Q8_0 / Q5_0: two blocks; Q4_K: one 32-byte run of nibbles, sub-blocks 2j and 2j + 1;
// Q6_K: two 32-weight groups), with f, the f32 weight factor of each int32 lane (lane l covers
// weights 4l .. 4l + 3: the block scale d, or d * sub-block scale), and neg = -128 * (the sum of
// each lane's 4 weights). Per activation row, one vpdpbusd starting from neg gives sum(w * xq) per
// lane (|.| <= 4 * 128 * 127: exact), then total += f * (that, as f32) * (the row's activation
// scales, one per 32 values, stored per lane by the quantiser). Per row and 64 weights: two loads,
// one vpdpbusd, one vcvtdq2ps, one multiply, one FMA. Q4_K's mins are
// dmin * sum_j m_j * (the row's dequantised block sums, bsum), one 8-lane FMA per super-block.
#include <cstdint>
#include <cstring>

#include "ops/cpu/cpu_avx512_common.h"
#include "ops/cpu/cpu_quant_blocks_avx512.h"
#include "ops/cpu/cpu_quant_dot_isa.h"

#if !defined(__AVX512VNNI__)
#error "cpu_quant_rows_i8_avx512_vnni.cc must be compiled with -mavx512vnni (CMakeLists.txt)"
#endif

namespace uniprefill::ops::cpu {
namespace {

// 64 weights as signed bytes and what each activation row needs to multiply them (see the top).
struct Unit {
  __m512i w;
  __m512 f;
  __m512i neg;
};

UP_INLINE_AVX512 Unit MakeUnit(__m512i w, __m512 f) {
  const __m512i sum =
      _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(static_cast<char>(0x80)), w);
  return {w, f, _mm512_sub_epi32(_mm512_setzero_si512(), sum)};
}

// total[r] += f * sum(w * xq_r) * (row r's activation scales) per lane, for the unit at
// activation offset i.
template <int NX>
UP_INLINE_AVX512 void MulUnit(const Unit& u, const I8Rows& x, int64_t i, __m512* total) {
  static_assert(kI8ScaleGroup == 32, "one activation scale per half unit, lanes as stored");
  for (int r = 0; r < NX; ++r) {
    const __m512i xu = _mm512_loadu_si512(x.xu + r * x.xu_stride + i);
    const __m512 p = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(u.neg, xu, u.w));
    const __m512 s = _mm512_loadu_ps(x.scale + r * x.scale_stride + i / 4);
    total[r] = _mm512_fmadd_ps(_mm512_mul_ps(p, u.f), s, total[r]);
  }
}

// Lanes 0..7 a, lanes 8..15 b.
UP_INLINE_AVX512 __m512 Halves(float a, float b) {
  return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1);
}

UP_INLINE_AVX512 __m512i Join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// Blocks of 32 with an f16 scale first (Q8_0, Q5_0): two blocks per unit.
template <int NX, int kBlockBytes, __m256i (*Bytes)(const uint8_t*)>
void RowsBlocks32(const void* w, const I8Rows& x, int64_t n, float* out, int64_t os) {
  const uint8_t* b = static_cast<const uint8_t*>(w);
  __m512 total[NX];
  for (int r = 0; r < NX; ++r) total[r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 64, b += 2 * kBlockBytes) {
    const Unit u =
        MakeUnit(Join(Bytes(b), Bytes(b + kBlockBytes)), Halves(Half(b), Half(b + kBlockBytes)));
    MulUnit<NX>(u, x, i, total);
  }
  for (int r = 0; r < NX; ++r) out[r * os] = _mm512_reduce_add_ps(total[r]);
}

// Q4_K super-block: f16 d, f16 dmin, scales[12], qs[128] (32 bytes hold sub-block 2j in their
// low nibbles, 2j + 1 in their high ones); w = d * sc * q - dmin * m, q in 0..15.
template <int NX>
void RowsQ4_K(const void* w, const I8Rows& x, int64_t n, float* out, int64_t os) {
  const uint8_t* b = static_cast<const uint8_t*>(w);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m512i lane_half =
      _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 3);
  __m512 total[NX];
  for (int r = 0; r < NX; ++r) total[r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 256, b += 144) {
    alignas(32) float sc[8], mins[8];
    for (int j = 0; j < 8; ++j) {
      int s, m;
      ScaleMinK4(j, b + 4, &s, &m);
      sc[j] = static_cast<float>(s);
      mins[j] = static_cast<float>(m);
    }
    // f32 d * sc of sub-blocks 0..7; unit j takes 2j on lanes 0..7 and 2j + 1 on lanes 8..15.
    const __m512 dsc =
        _mm512_zextps256_ps512(_mm256_mul_ps(_mm256_set1_ps(Half(b)), _mm256_load_ps(sc)));
    for (int j = 0; j < 4; ++j) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16 + 32 * j));
      const __m512 f =
          _mm512_permutexvar_ps(_mm512_add_epi32(lane_half, _mm512_set1_epi32(2 * j)), dsc);
      const Unit u =
          MakeUnit(Join(_mm256_and_si256(v, m4), _mm256_and_si256(_mm256_srli_epi16(v, 4), m4)), f);
      MulUnit<NX>(u, x, i + 64 * j, total);
    }
    // The mins: total -= dmin * m_j * (row's block sum j), on lanes 0..7 (the upper ones 0 * 0).
    const __m512 dm =
        _mm512_zextps256_ps512(_mm256_mul_ps(_mm256_set1_ps(Half(b + 2)), _mm256_load_ps(mins)));
    for (int r = 0; r < NX; ++r) {
      const __m512 bs =
          _mm512_zextps256_ps512(_mm256_loadu_ps(x.bsum + r * x.bsum_stride + i / 32));
      total[r] = _mm512_fnmadd_ps(dm, bs, total[r]);
    }
  }
  for (int r = 0; r < NX; ++r) out[r * os] = _mm512_reduce_add_ps(total[r]);
}

// Q6_K super-block: ql[128], qh[64], int8 scales[16], f16 d; q = (4 low bits | 2 high bits << 4)
// - 32, one scale per 16 weights. Per half (128 weights) four 32-weight groups g; unit u of a half
// is groups 2u and 2u + 1, its lanes 4k .. 4k + 3 take scale 8h + 4u + k.
template <int NX>
void RowsQ6_K(const void* w, const I8Rows& x, int64_t n, float* out, int64_t os) {
  const uint8_t* b = static_cast<const uint8_t*>(w);
  const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(0x03),
                k32 = _mm256_set1_epi8(32);
  const __m512i lane_quarter =
      _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), 2);
  __m512 total[NX];
  for (int r = 0; r < NX; ++r) total[r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 256, b += 210) {
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192));
    const __m512 dsc =
        _mm512_mul_ps(_mm512_set1_ps(Half(b + 208)), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc8)));
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = b + 64 * h;
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h));
      const __m256i lo[4] = {_mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
                             _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                             _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4)};
      __m256i q[4];
      for (int g = 0; g < 4; ++g) {
        const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), m3), 4);
        q[g] = _mm256_sub_epi8(_mm256_or_si256(lo[g], hi), k32);
      }
      for (int u = 0; u < 2; ++u) {
        const __m512 f = _mm512_permutexvar_ps(
            _mm512_add_epi32(lane_quarter, _mm512_set1_epi32(8 * h + 4 * u)), dsc);
        const Unit unit = MakeUnit(Join(q[2 * u], q[2 * u + 1]), f);
        MulUnit<NX>(unit, x, i + 128 * h + 64 * u, total);
      }
    }
  }
  for (int r = 0; r < NX; ++r) out[r * os] = _mm512_reduce_add_ps(total[r]);
}

// nx (1..kQuantDotI8Rows) -> the kernel instantiated for it.
template <template <int> class K>
void AnyRowsI8(const void* w, const I8Rows& x, int nx, int64_t n, float* out, int64_t os) {
  static_assert(kQuantDotI8Rows == 8, "one case per row count");
  switch (nx) {
    case 1: K<1>::Run(w, x, n, out, os); break;
    case 2: K<2>::Run(w, x, n, out, os); break;
    case 3: K<3>::Run(w, x, n, out, os); break;
    case 4: K<4>::Run(w, x, n, out, os); break;
    case 5: K<5>::Run(w, x, n, out, os); break;
    case 6: K<6>::Run(w, x, n, out, os); break;
    case 7: K<7>::Run(w, x, n, out, os); break;
    case 8: K<8>::Run(w, x, n, out, os); break;
    default: break;
  }
}

template <int NX>
struct KQ8_0 {
  static constexpr auto Run = &RowsBlocks32<NX, 34, BytesQ8_0>;
};
template <int NX>
struct KQ5_0 {
  static constexpr auto Run = &RowsBlocks32<NX, 22, BytesQ5_0>;
};
template <int NX>
struct KQ4_K {
  static constexpr auto Run = &RowsQ4_K<NX>;
};
template <int NX>
struct KQ6_K {
  static constexpr auto Run = &RowsQ6_K<NX>;
};

}  // namespace

QuantDotI8RowsFn avx512_vnni::FusedQuantDotI8Rows(DType type) {
  switch (type) {
    case DType::kQ8_0: return &AnyRowsI8<KQ8_0>;
    case DType::kQ5_0: return &AnyRowsI8<KQ5_0>;
    case DType::kQ4_K: return &AnyRowsI8<KQ4_K>;
    case DType::kQ6_K: return &AnyRowsI8<KQ6_K>;
    default: return nullptr;
  }
}

}  // namespace uniprefill::ops::cpu
