// AVX-512 (F, BW, VL, DQ) versions of the fused dequantise-and-dot kernels (cpu_quant_dot.h), same
// contract and same arithmetic as the AVX2 ones, on 16 f32 lanes: a 32-weight block is two
// vectors, decoded once and FMA'd into every activation row. Float types finish with a masked
// load instead of a scalar tail.
//
// Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq (CMakeLists.txt) and reached only
// through FusedQuantDot(type, isa >= kAvx512). Every helper is in an anonymous namespace and no
// project header with inline code is used here: an inline function compiled under these flags and
// also under the baseline ones could be the copy the linker keeps for both (one definition rule),
// putting AVX-512 instructions on the AVX2 path.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ops/cpu/cpu_avx512_common.h"
#include "ops/cpu/cpu_quant_blocks_avx512.h"
#include "ops/cpu/cpu_quant_dot_isa.h"

namespace uniprefill::ops::cpu {
namespace {

// 16 signed bytes -> 16 floats.
UP_INLINE_AVX512 __m512 I8ToF32(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)); }

UP_INLINE_AVX512 __m128i Load128(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// Accumulators for NX activation rows; with few rows each gets several chains (k picks one, the
// callers alternate it between blocks) so the FMA latency does not serialise consecutive blocks.
template <int NX>
struct Rows {
  static constexpr int kAcc = NX == 1 ? 4 : NX <= 3 ? 2 : 1;
  __m512 acc[NX][kAcc];
  const float* x;
  int64_t xs;

  UP_INLINE_AVX512 Rows(const float* x_in, int64_t x_stride) : x(x_in), xs(x_stride) {
    for (int r = 0; r < NX; ++r) {
      for (int a = 0; a < kAcc; ++a) acc[r][a] = _mm512_setzero_ps();
    }
  }
  // acc[r] += w * x[r][i, i + 16).
  UP_INLINE_AVX512 void Fma(__m512 w, int64_t i, int k) {
    for (int r = 0; r < NX; ++r) {
      acc[r][k % kAcc] = _mm512_fmadd_ps(w, _mm512_loadu_ps(x + r * xs + i), acc[r][k % kAcc]);
    }
  }
  // Only lanes in `m` of w * x[r][i, i + 16) (the float types' tail).
  UP_INLINE_AVX512 void FmaMasked(__m512 w, int64_t i, __mmask16 m) {
    for (int r = 0; r < NX; ++r) {
      acc[r][0] = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(m, x + r * xs + i), acc[r][0]);
    }
  }
  // Two vectors into chains k and k + 1.
  UP_INLINE_AVX512 void Fma2(const __m512 w[2], int64_t i, int k) {
    Fma(w[0], i, k);
    Fma(w[1], i + 16, k + 1);
  }
  // Fma2 of w * scale (w unscaled): with few rows the block's products are summed first and
  // scaled once per row.
  UP_INLINE_AVX512 void Fma2Scaled(const __m512 w[2], int64_t i, __m512 scale, int k) {
    if constexpr (NX <= 3) {
      for (int r = 0; r < NX; ++r) {
        const float* xr = x + r * xs + i;
        const __m512 s = _mm512_fmadd_ps(w[1], _mm512_loadu_ps(xr + 16),
                                         _mm512_mul_ps(w[0], _mm512_loadu_ps(xr)));
        acc[r][k % kAcc] = _mm512_fmadd_ps(s, scale, acc[r][k % kAcc]);
      }
    } else {
      const __m512 ws[2] = {_mm512_mul_ps(w[0], scale), _mm512_mul_ps(w[1], scale)};
      Fma2(ws, i, 0);
    }
  }
  UP_INLINE_AVX512 void Store(float* out, int64_t os) {
    for (int r = 0; r < NX; ++r) {
      __m512 s = acc[r][0];
      for (int a = 1; a < kAcc; ++a) s = _mm512_add_ps(s, acc[r][a]);
      out[r * os] = _mm512_reduce_add_ps(s);
    }
  }
};

// Calls block(i, b, K) for every 32-weight block of a row (i: first element, b: its bytes), K a
// compile-time 0 / 1 alternating between blocks: the accumulator chain, which must be a constant
// for the accumulators to stay in registers.
template <int kBlockBytes, typename Block>
UP_INLINE_AVX512 void ForBlocks(const void* w, int64_t n, Block&& block) {
  const uint8_t* b = static_cast<const uint8_t*>(w);
  int64_t i = 0;
  for (; i + 64 <= n; i += 64, b += 2 * kBlockBytes) {
    block(i, b, std::integral_constant<int, 0>());
    block(i + 32, b + kBlockBytes, std::integral_constant<int, 1>());
  }
  if (i < n) block(i, b, std::integral_constant<int, 0>());
}

// Q8_0: f16 d, int8 q[32].
struct KernelQ8_0 {
  template <int NX>
  static void Run(const void* w, const float* x, int64_t xs, int64_t n, float* out, int64_t os) {
    Rows<NX> rows(x, xs);
    ForBlocks<34>(w, n, [&](int64_t i, const uint8_t* b, auto k) {
      const __m512 f[2] = {I8ToF32(Load128(b + 2)), I8ToF32(Load128(b + 18))};
      rows.Fma2Scaled(f, i, _mm512_set1_ps(Half(b)), k());
    });
    rows.Store(out, os);
  }
};

// Q4_0: f16 d, qs[16]; q = nibble - 8 (low nibbles are elements 0..15, high 16..31).
struct KernelQ4_0 {
  template <int NX>
  static void Run(const void* w, const float* x, int64_t xs, int64_t n, float* out, int64_t os) {
    const __m128i m4 = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    Rows<NX> rows(x, xs);
    ForBlocks<18>(w, n, [&](int64_t i, const uint8_t* b, auto k) {
      const __m128i v = Load128(b + 2);
      const __m512 f[2] = {I8ToF32(_mm_sub_epi8(_mm_and_si128(v, m4), eight)),
                           I8ToF32(_mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), m4), eight))};
      rows.Fma2Scaled(f, i, _mm512_set1_ps(Half(b)), k());
    });
    rows.Store(out, os);
  }
};

// Q4_1: f16 d, f16 m, qs[16]; w = q * d + m (the min rules out scaling once per block).
struct KernelQ4_1 {
  template <int NX>
  static void Run(const void* w, const float* x, int64_t xs, int64_t n, float* out, int64_t os) {
    const __m128i m4 = _mm_set1_epi8(0x0F);
    Rows<NX> rows(x, xs);
    ForBlocks<20>(w, n, [&](int64_t i, const uint8_t* b, auto k) {
      const __m512 d = _mm512_set1_ps(Half(b)), m = _mm512_set1_ps(Half(b + 2));
      const __m128i v = Load128(b + 4);
      const __m512 f[2] = {
          _mm512_fmadd_ps(I8ToF32(_mm_and_si128(v, m4)), d, m),
          _mm512_fmadd_ps(I8ToF32(_mm_and_si128(_mm_srli_epi16(v, 4), m4)), d, m)};
      rows.Fma2(f, i, 2 * k());
    });
    rows.Store(out, os);
  }
};

// Q5_0: f16 d, u32 qh, qs[16]; q = (nibble | bit j of qh << 4) - 16.
struct KernelQ5_0 {
  template <int NX>
  static void Run(const void* w, const float* x, int64_t xs, int64_t n, float* out, int64_t os) {
    const __m128i m4 = _mm_set1_epi8(0x0F), h16 = _mm_set1_epi8(0x10), k16 = _mm_set1_epi8(16);
    Rows<NX> rows(x, xs);
    ForBlocks<22>(w, n, [&](int64_t i, const uint8_t* b, auto k) {
      uint32_t qh;
      std::memcpy(&qh, b + 2, 4);
      // The high bits straight from the mask registers (AVX-512BW + VL).
      const __m128i hlo = _mm_maskz_mov_epi8(static_cast<__mmask16>(qh & 0xFFFF), h16);
      const __m128i hhi = _mm_maskz_mov_epi8(static_cast<__mmask16>(qh >> 16), h16);
      const __m128i v = Load128(b + 6);
      const __m128i lo = _mm_sub_epi8(_mm_or_si128(_mm_and_si128(v, m4), hlo), k16);
      const __m128i hi =
          _mm_sub_epi8(_mm_or_si128(_mm_and_si128(_mm_srli_epi16(v, 4), m4), hhi), k16);
      const __m512 f[2] = {I8ToF32(lo), I8ToF32(hi)};
      rows.Fma2Scaled(f, i, _mm512_set1_ps(Half(b)), k());
    });
    rows.Store(out, os);
  }
};

// One 32-weight K-quant sub-block of unsigned values (lo = elements 0..15, hi = 16..31) -> rows,
// with w = q * dsc - dm.
template <int NX>
UP_INLINE_AVX512 void SubBlockK(Rows<NX>& rows, __m128i lo, __m128i hi, float dsc, float dm,
                            int64_t i, int k) {
  const __m512 s = _mm512_set1_ps(dsc), m = _mm512_set1_ps(dm);
  const __m512 f[2] = {_mm512_fmsub_ps(I8ToF32(lo), s, m), _mm512_fmsub_ps(I8ToF32(hi), s, m)};
  rows.Fma2(f, i, k);
}

// Q4_K: f16 d, f16 dmin, scales[12], qs[128]; 32 bytes of qs hold sub-block 2j in their low
// nibbles and 2j + 1 in their high nibbles.
struct KernelQ4_K {
  template <int NX>
  static void Run(const void* w, const float* x, int64_t xs, int64_t n, float* out, int64_t os) {
    const uint8_t* b = static_cast<const uint8_t*>(w);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    Rows<NX> rows(x, xs);
    for (int64_t i = 0; i < n; i += 256, b += 144) {
      const float d = Half(b), dmin = Half(b + 2);
      const uint8_t* scales = b + 4;
      const uint8_t* qs = b + 16;
      for (int j = 0; j < 4; ++j) {
        const __m128i v0 = Load128(qs + 32 * j), v1 = Load128(qs + 32 * j + 16);
        int sc0, m0, sc1, m1;
        ScaleMinK4(2 * j, scales, &sc0, &m0);
        ScaleMinK4(2 * j + 1, scales, &sc1, &m1);
        SubBlockK(rows, _mm_and_si128(v0, m4), _mm_and_si128(v1, m4), d * sc0, dmin * m0,
                  i + 64 * j, 0);
        SubBlockK(rows, _mm_and_si128(_mm_srli_epi16(v0, 4), m4),
                  _mm_and_si128(_mm_srli_epi16(v1, 4), m4), d * sc1, dmin * m1, i + 64 * j + 32,
                  2);
      }
    }
    rows.Store(out, os);
  }
};

// Q6_K: ql[128], qh[64], int8 scales[16], f16 d; q = (4 low bits | 2 high bits << 4) - 32, one
// scale per 16 weights.
struct KernelQ6_K {
  template <int NX>
  static void Run(const void* w, const float* x, int64_t xs, int64_t n, float* out, int64_t os) {
    const uint8_t* b = static_cast<const uint8_t*>(w);
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(0x03),
                  k32 = _mm256_set1_epi8(32);
    Rows<NX> rows(x, xs);
    for (int64_t i = 0; i < n; i += 256, b += 210) {
      const float d = Half(b + 208);
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
        // Group g of 32 weights into chains k, k + 1 (a literal at both calls).
        auto group = [&](int g, int k) {
          const __m256i q = _mm256_sub_epi8(_mm256_or_si256(lo[g], hi[g]), k32);
          const __m512 f[2] = {I8ToF32(_mm256_castsi256_si128(q)),
                               I8ToF32(_mm256_extracti128_si256(q, 1))};
          const __m512 s[2] = {_mm512_mul_ps(f[0], _mm512_set1_ps(d * sc[2 * g])),
                               _mm512_mul_ps(f[1], _mm512_set1_ps(d * sc[2 * g + 1]))};
          rows.Fma2(s, i + 128 * h + 32 * g, k);
        };
        for (int g = 0; g < 4; g += 2) {
          group(g, 0);
          group(g + 1, 2);
        }
      }
    }
    rows.Store(out, os);
  }
};

// Scalar-element types (any n): 64-wide main loop, then 16 at a time, the last step masked.
template <typename Load>
struct KernelFloat {
  template <int NX>
  static void Run(const void* w, const float* x, int64_t xs, int64_t n, float* out, int64_t os) {
    Rows<NX> rows(x, xs);
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
      const __m512 f[4] = {Load::Vec(w, i, 0xFFFF), Load::Vec(w, i + 16, 0xFFFF),
                           Load::Vec(w, i + 32, 0xFFFF), Load::Vec(w, i + 48, 0xFFFF)};
      rows.Fma2(f, i, 0);
      rows.Fma2(f + 2, i + 32, 2);
    }
    for (; i < n; i += 16) {
      const __mmask16 m = n - i >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - i)) - 1);
      rows.FmaMasked(Load::Vec(w, i, m), i, m);
    }
    rows.Store(out, os);
  }
};

struct LoadF16 {
  static UP_INLINE_AVX512 __m512 Vec(const void* w, int64_t i, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(w) + i));
  }
};
struct LoadBF16 {
  static UP_INLINE_AVX512 __m512 Vec(const void* w, int64_t i, __mmask16 m) {
    const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(w) + i);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
};

template <typename K>
void AnyRows(const void* w, const float* x, int64_t xs, int nx, int64_t n, float* out,
             int64_t os) {
  switch (nx) {
    case 1: K::template Run<1>(w, x, xs, n, out, os); break;
    case 2: K::template Run<2>(w, x, xs, n, out, os); break;
    case 3: K::template Run<3>(w, x, xs, n, out, os); break;
    case 4: K::template Run<4>(w, x, xs, n, out, os); break;
    case 5: K::template Run<5>(w, x, xs, n, out, os); break;
    case 6: K::template Run<6>(w, x, xs, n, out, os); break;
    case 7: K::template Run<7>(w, x, xs, n, out, os); break;
    default: break;
  }
}

}  // namespace

// Q5_K has no AVX-512 kernel yet, and F32 keeps the AVX2 one: this kernel measured ~10% slower
// on f32 weights (640 x 2048, 1 and 2 rows, docs/kernels.md), where loads are the bound. Both fall
// back to the AVX2 kernels.
QuantDotFn avx512::FusedQuantDot(DType type) {
  switch (type) {
    case DType::kF32: return nullptr;
    case DType::kF16: return &AnyRows<KernelFloat<LoadF16>>;
    case DType::kBF16: return &AnyRows<KernelFloat<LoadBF16>>;
    case DType::kQ8_0: return &AnyRows<KernelQ8_0>;
    case DType::kQ4_0: return &AnyRows<KernelQ4_0>;
    case DType::kQ4_1: return &AnyRows<KernelQ4_1>;
    case DType::kQ5_0: return &AnyRows<KernelQ5_0>;
    case DType::kQ4_K: return &AnyRows<KernelQ4_K>;
    case DType::kQ6_K: return &AnyRows<KernelQ6_K>;
    default: return nullptr;
  }
}

}  // namespace uniprefill::ops::cpu
