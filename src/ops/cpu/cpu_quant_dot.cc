#include "ops/cpu/cpu_quant_dot.h"

#include <immintrin.h>

#include <cstring>

#include "ops/cpu/cpu_math.h"
#include "ops/cpu/cpu_quant_dot_isa.h"

// Every kernel decodes 8 weights at a time into a __m256 of f32 (scale, and for K-quants the min,
// folded in with one FMA: w = q * (d * sc) - dmin * m) and FMAs it into every activation row, so
// weights are decoded once however many rows there are. The integer -> float conversions dominate
// the instruction count; at one row the kernels run near memory bandwidth (see docs/kernels.md).

namespace uniprefill::ops::cpu {
namespace {

// Low 8 signed bytes of v -> 8 floats.
UP_INLINE __m256 I8ToF32(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }

// 8 signed bytes at p -> 8 floats (the load folds into vpmovsxbd).
UP_INLINE __m256 LoadI8(const uint8_t* p) {
  return I8ToF32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// The four 8-byte quarters of 32 signed bytes -> 4 x 8 floats.
UP_INLINE void I8x32ToF32(__m256i v, __m256 f[4]) {
  const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
  f[0] = I8ToF32(lo);
  f[1] = I8ToF32(_mm_srli_si128(lo, 8));
  f[2] = I8ToF32(hi);
  f[3] = I8ToF32(_mm_srli_si128(hi, 8));
}

// Accumulators for NX activation rows. With few rows each row gets several independent FMA chains
// so the FMA latency (5 cycles on Zen) does not serialise the loop.
template <int NX>
struct Rows {
  static constexpr int kAcc = NX == 1 ? 4 : NX <= 3 ? 2 : 1;
  __m256 acc[NX][kAcc];
  float tail[NX] = {};
  const float* x;
  int64_t xs;

  UP_INLINE Rows(const float* x_in, int64_t x_stride) : x(x_in), xs(x_stride) {
    for (int r = 0; r < NX; ++r) {
      for (int a = 0; a < kAcc; ++a) acc[r][a] = _mm256_setzero_ps();
    }
  }
  // acc[r] += w * x[r][i, i + 8); k (a literal at every call site) picks the chain.
  UP_INLINE void Fma(__m256 w, int64_t i, int k) {
    for (int r = 0; r < NX; ++r) {
      acc[r][k % kAcc] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + r * xs + i), acc[r][k % kAcc]);
    }
  }
  UP_INLINE void Fma4(const __m256 w[4], int64_t i) {
    Fma(w[0], i, 0);
    Fma(w[1], i + 8, 1);
    Fma(w[2], i + 16, 2);
    Fma(w[3], i + 24, 3);
  }
  // Fma4 of w * scale, where w holds unscaled values. With few rows it is cheaper to sum the
  // block's products per row first and scale that once (1 FMA per row instead of 4 multiplies).
  UP_INLINE void Fma4Scaled(const __m256 w[4], int64_t i, __m256 scale) {
    if constexpr (NX <= 3) {
      for (int r = 0; r < NX; ++r) {
        const float* xr = x + r * xs + i;
        __m256 s = _mm256_mul_ps(w[0], _mm256_loadu_ps(xr));
        s = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(xr + 8), s);
        s = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(xr + 16), s);
        s = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(xr + 24), s);
        acc[r][0] = _mm256_fmadd_ps(s, scale, acc[r][0]);
      }
    } else {
      const __m256 ws[4] = {_mm256_mul_ps(w[0], scale), _mm256_mul_ps(w[1], scale),
                            _mm256_mul_ps(w[2], scale), _mm256_mul_ps(w[3], scale)};
      Fma4(ws, i);
    }
  }
  // Same with scale0 for w[0..1] and scale1 for w[2..3] (Q6_K: one scale per 16 weights).
  UP_INLINE void Fma4Scaled2(const __m256 w[4], int64_t i, __m256 scale0, __m256 scale1) {
    if constexpr (NX <= 3) {
      for (int r = 0; r < NX; ++r) {
        const float* xr = x + r * xs + i;
        const __m256 s0 = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(xr + 8),
                                          _mm256_mul_ps(w[0], _mm256_loadu_ps(xr)));
        const __m256 s1 = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(xr + 24),
                                          _mm256_mul_ps(w[2], _mm256_loadu_ps(xr + 16)));
        acc[r][0] = _mm256_fmadd_ps(s0, scale0, acc[r][0]);
        acc[r][1 % kAcc] = _mm256_fmadd_ps(s1, scale1, acc[r][1 % kAcc]);
      }
    } else {
      const __m256 ws[4] = {_mm256_mul_ps(w[0], scale0), _mm256_mul_ps(w[1], scale0),
                            _mm256_mul_ps(w[2], scale1), _mm256_mul_ps(w[3], scale1)};
      Fma4(ws, i);
    }
  }
  UP_INLINE void Store(float* out, int64_t os) {
    for (int r = 0; r < NX; ++r) {
      __m256 s = acc[r][0];
      for (int a = 1; a < kAcc; ++a) s = _mm256_add_ps(s, acc[r][a]);
      out[r * os] = HorizontalSum(s) + tail[r];
    }
  }
};

struct KernelQ8_0 {
  template <int NX>
  static void Run(const void* w, const float* x, int64_t xs, int64_t n, float* out, int64_t os) {
    const uint8_t* b = static_cast<const uint8_t*>(w);
    Rows<NX> rows(x, xs);
    for (int64_t i = 0; i < n; i += 32, b += 34) {
      const __m256 d = _mm256_set1_ps(HalfAt(b));
      const __m256 f[4] = {LoadI8(b + 2), LoadI8(b + 10), LoadI8(b + 18), LoadI8(b + 26)};
      rows.Fma4Scaled(f, i, d);
    }
    rows.Store(out, os);
  }
};

struct KernelQ4_0 {
  template <int NX>
  static void Run(const void* w, const float* x, int64_t xs, int64_t n, float* out, int64_t os) {
    const uint8_t* b = static_cast<const uint8_t*>(w);
    const __m128i m4 = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    Rows<NX> rows(x, xs);
    for (int64_t i = 0; i < n; i += 32, b += 18) {
      const __m256 d = _mm256_set1_ps(HalfAt(b));
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
      const __m128i lo = _mm_sub_epi8(_mm_and_si128(v, m4), eight);
      const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), m4), eight);
      __m256 f[4] = {I8ToF32(lo), I8ToF32(_mm_srli_si128(lo, 8)), I8ToF32(hi),
                     I8ToF32(_mm_srli_si128(hi, 8))};
      rows.Fma4Scaled(f, i, d);
    }
    rows.Store(out, os);
  }
};

// Q4_1: f16 d, f16 m, u8 qs[16]; w = q * d + m with q the unsigned nibble (low nibbles are
// elements 0..15, high nibbles 16..31). The min makes the scale-once trick of Fma4Scaled wrong, so
// each weight is decoded with one FMA and then multiplied in.
struct KernelQ4_1 {
  template <int NX>
  static void Run(const void* w, const float* x, int64_t xs, int64_t n, float* out, int64_t os) {
    const uint8_t* b = static_cast<const uint8_t*>(w);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    Rows<NX> rows(x, xs);
    for (int64_t i = 0; i < n; i += 32, b += 20) {
      const __m256 d = _mm256_set1_ps(HalfAt(b)), m = _mm256_set1_ps(HalfAt(b + 2));
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 4));
      const __m128i lo = _mm_and_si128(v, m4);
      const __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
      __m256 f[4] = {I8ToF32(lo), I8ToF32(_mm_srli_si128(lo, 8)), I8ToF32(hi),
                     I8ToF32(_mm_srli_si128(hi, 8))};
      for (auto& e : f) e = _mm256_fmadd_ps(e, d, m);
      rows.Fma4(f, i);
    }
    rows.Store(out, os);
  }
};

struct KernelQ5_0 {
  template <int NX>
  static void Run(const void* w, const float* x, int64_t xs, int64_t n, float* out, int64_t os) {
    const uint8_t* b = static_cast<const uint8_t*>(w);
    const __m128i m4 = _mm_set1_epi8(0x0F), sixteen = _mm_set1_epi8(16);
    Rows<NX> rows(x, xs);
    for (int64_t i = 0; i < n; i += 32, b += 22) {
      const __m256 d = _mm256_set1_ps(HalfAt(b));
      uint32_t qh;
      std::memcpy(&qh, b + 2, 4);
      const __m256i hb = _mm256_and_si256(BytesFromBits(qh), _mm256_set1_epi8(0x10));
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 6));
      const __m128i lo = _mm_sub_epi8(
          _mm_or_si128(_mm_and_si128(v, m4), _mm256_castsi256_si128(hb)), sixteen);
      const __m128i hi = _mm_sub_epi8(
          _mm_or_si128(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm256_extracti128_si256(hb, 1)),
          sixteen);
      __m256 f[4] = {I8ToF32(lo), I8ToF32(_mm_srli_si128(lo, 8)), I8ToF32(hi),
                     I8ToF32(_mm_srli_si128(hi, 8))};
      rows.Fma4Scaled(f, i, d);
    }
    rows.Store(out, os);
  }
};

// 6-bit scale and min j (0..7) of a Q4_K / Q5_K super-block (ggml's get_scale_min_k4).
UP_INLINE void ScaleMinK4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// 32 unsigned values (bytes) of one K-quant sub-block -> rows, with w = q * dsc - dm.
template <int NX>
UP_INLINE void SubBlockK(Rows<NX>& rows, __m256i q, float dsc, float dm, int64_t i) {
  __m256 f[4];
  I8x32ToF32(q, f);
  const __m256 s = _mm256_set1_ps(dsc), m = _mm256_set1_ps(dm);
  for (auto& e : f) e = _mm256_fmsub_ps(e, s, m);
  rows.Fma4(f, i);
}

struct KernelQ4_K {
  template <int NX>
  static void Run(const void* w, const float* x, int64_t xs, int64_t n, float* out, int64_t os) {
    const uint8_t* b = static_cast<const uint8_t*>(w);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    Rows<NX> rows(x, xs);
    for (int64_t i = 0; i < n; i += 256, b += 144) {
      const float d = HalfAt(b), dmin = HalfAt(b + 2);
      const uint8_t* scales = b + 4;
      const uint8_t* qs = b + 16;
      for (int j = 0; j < 4; ++j) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j));
        int sc0, m0, sc1, m1;
        ScaleMinK4(2 * j, scales, &sc0, &m0);
        ScaleMinK4(2 * j + 1, scales, &sc1, &m1);
        SubBlockK(rows, _mm256_and_si256(v, m4), d * sc0, dmin * m0, i + 64 * j);
        SubBlockK(rows, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4), d * sc1, dmin * m1,
                  i + 64 * j + 32);
      }
    }
    rows.Store(out, os);
  }
};

struct KernelQ5_K {
  template <int NX>
  static void Run(const void* w, const float* x, int64_t xs, int64_t n, float* out, int64_t os) {
    const uint8_t* b = static_cast<const uint8_t*>(w);
    const __m256i m4 = _mm256_set1_epi8(0x0F), h16 = _mm256_set1_epi8(0x10);
    Rows<NX> rows(x, xs);
    for (int64_t i = 0; i < n; i += 256, b += 176) {
      const float d = HalfAt(b), dmin = HalfAt(b + 2);
      const uint8_t* scales = b + 4;
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
      const uint8_t* qs = b + 48;
      for (int j = 0; j < 4; ++j) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j));
        const __m256i bit0 = _mm256_set1_epi8(static_cast<char>(1 << (2 * j)));
        const __m256i bit1 = _mm256_set1_epi8(static_cast<char>(1 << (2 * j + 1)));
        const __m256i hb0 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit0), bit0), h16);
        const __m256i hb1 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit1), bit1), h16);
        int sc0, m0, sc1, m1;
        ScaleMinK4(2 * j, scales, &sc0, &m0);
        ScaleMinK4(2 * j + 1, scales, &sc1, &m1);
        SubBlockK(rows, _mm256_or_si256(_mm256_and_si256(v, m4), hb0), d * sc0, dmin * m0,
                  i + 64 * j);
        SubBlockK(rows, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), hb1),
                  d * sc1, dmin * m1, i + 64 * j + 32);
      }
    }
    rows.Store(out, os);
  }
};

struct KernelQ6_K {
  template <int NX>
  static void Run(const void* w, const float* x, int64_t xs, int64_t n, float* out, int64_t os) {
    const uint8_t* b = static_cast<const uint8_t*>(w);
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(0x03),
                  k32 = _mm256_set1_epi8(32);
    Rows<NX> rows(x, xs);
    for (int64_t i = 0; i < n; i += 256, b += 210) {
      const float d = HalfAt(b + 208);
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
        for (int g = 0; g < 4; ++g) {
          const __m256i q = _mm256_sub_epi8(_mm256_or_si256(lo[g], hi[g]), k32);
          __m256 f[4];
          I8x32ToF32(q, f);
          rows.Fma4Scaled2(f, i + 128 * h + 32 * g, _mm256_set1_ps(d * sc[2 * g]),
                           _mm256_set1_ps(d * sc[2 * g + 1]));
        }
      }
    }
    rows.Store(out, os);
  }
};

// Scalar-element types (any n): 8-wide main loop, scalar tail.
template <typename Load>
struct KernelFloat {
  template <int NX>
  static void Run(const void* w, const float* x, int64_t xs, int64_t n, float* out, int64_t os) {
    Rows<NX> rows(x, xs);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      const __m256 f[4] = {Load::Vec(w, i), Load::Vec(w, i + 8), Load::Vec(w, i + 16),
                           Load::Vec(w, i + 24)};
      rows.Fma4(f, i);
    }
    for (; i + 8 <= n; i += 8) rows.Fma(Load::Vec(w, i), i, 0);
    for (; i < n; ++i) {
      for (int r = 0; r < NX; ++r) rows.tail[r] += Load::One(w, i) * x[r * xs + i];
    }
    rows.Store(out, os);
  }
};

struct LoadF32 {
  static UP_INLINE __m256 Vec(const void* w, int64_t i) {
    return _mm256_loadu_ps(static_cast<const float*>(w) + i);
  }
  static UP_INLINE float One(const void* w, int64_t i) { return static_cast<const float*>(w)[i]; }
};
struct LoadF16 {
  static UP_INLINE __m256 Vec(const void* w, int64_t i) {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i)));
  }
  static UP_INLINE float One(const void* w, int64_t i) {
    return _cvtsh_ss(static_cast<const uint16_t*>(w)[i]);
  }
};
struct LoadBF16 {
  static UP_INLINE __m256 Vec(const void* w, int64_t i) {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static UP_INLINE float One(const void* w, int64_t i) {
    const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(w)[i]) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
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

QuantDotFn avx2::FusedQuantDot(DType type) {
  switch (type) {
    case DType::kF32: return &AnyRows<KernelFloat<LoadF32>>;
    case DType::kF16: return &AnyRows<KernelFloat<LoadF16>>;
    case DType::kBF16: return &AnyRows<KernelFloat<LoadBF16>>;
    case DType::kQ8_0: return &AnyRows<KernelQ8_0>;
    case DType::kQ4_0: return &AnyRows<KernelQ4_0>;
    case DType::kQ4_1: return &AnyRows<KernelQ4_1>;
    case DType::kQ5_0: return &AnyRows<KernelQ5_0>;
    case DType::kQ4_K: return &AnyRows<KernelQ4_K>;
    case DType::kQ5_K: return &AnyRows<KernelQ5_K>;
    case DType::kQ6_K: return &AnyRows<KernelQ6_K>;
    default: return nullptr;
  }
}

}  // namespace uniprefill::ops::cpu
