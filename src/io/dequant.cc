#include "io/dequant.h"

#include <cstring>
#include <string>

namespace uniprefill {
namespace {

constexpr int kQK = 32;    // elements per block of the *_0 / *_1 formats
constexpr int kQK_K = 256;  // elements per super-block of the K formats

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Blocks are packed byte arrays with no alignment guarantee: read multi-byte fields by memcpy.
float LoadHalf(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return HalfToFloat(h);
}
uint32_t LoadU32(const uint8_t* p) {
  uint32_t u;
  std::memcpy(&u, p, 4);
  return u;
}

// Sub-block j's 6-bit scale and min from the 12 packed bytes of a Q4_K / Q5_K block (ggml's
// get_scale_min_k4).
void ScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// ---- Block formats (layouts as in ggml-common.h) ---------------------------------------------

// Q4_0: f16 d, u8 qs[16].
void DequantQ4_0(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = static_cast<float>((qs[j] & 0xF) - 8) * d;
    y[j + kQK / 2] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// Q4_1: f16 d, f16 m, u8 qs[16].
void DequantQ4_1(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  const float m = LoadHalf(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = static_cast<float>(qs[j] & 0xF) * d + m;
    y[j + kQK / 2] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// Q5_0: f16 d, u32 qh (bit j = fifth bit of element j), u8 qs[16].
void DequantQ5_0(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  const uint32_t qh = LoadU32(b + 2);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < kQK / 2; ++j) {
    const int h0 = static_cast<int>(((qh >> j) & 1) << 4);
    const int h1 = static_cast<int>(((qh >> (j + 16)) & 1) << 4);
    y[j] = static_cast<float>(((qs[j] & 0xF) | h0) - 16) * d;
    y[j + kQK / 2] = static_cast<float>(((qs[j] >> 4) | h1) - 16) * d;
  }
}

// Q5_1: f16 d, f16 m, u32 qh, u8 qs[16].
void DequantQ5_1(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  const float m = LoadHalf(b + 2);
  const uint32_t qh = LoadU32(b + 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < kQK / 2; ++j) {
    const int h0 = static_cast<int>(((qh >> j) & 1) << 4);
    const int h1 = static_cast<int>(((qh >> (j + 16)) & 1) << 4);
    y[j] = static_cast<float>((qs[j] & 0xF) | h0) * d + m;
    y[j + kQK / 2] = static_cast<float>((qs[j] >> 4) | h1) * d + m;
  }
}

// Q8_0: f16 d, i8 qs[32].
void DequantQ8_0(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(qs[j]) * d;
}

// Q4_K: f16 d, f16 dmin, u8 scales[12], u8 qs[128].
void DequantQ4_K(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  const float dmin = LoadHalf(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int c = 0; c < 4; ++c, q += 32, y += 64) {
    uint8_t sc, m;
    ScaleMinK4(2 * c, scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    ScaleMinK4(2 * c + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) y[l] = d1 * static_cast<float>(q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) y[l + 32] = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}

// Q5_K: f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128].
void DequantQ5_K(const uint8_t* b, float* y) {
  const float d = LoadHalf(b);
  const float dmin = LoadHalf(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* q = b + 48;
  uint8_t u1 = 1, u2 = 2;
  for (int c = 0; c < 4; ++c, q += 32, y += 64, u1 <<= 2, u2 <<= 2) {
    uint8_t sc, m;
    ScaleMinK4(2 * c, scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    ScaleMinK4(2 * c + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) {
      y[l] = d1 * static_cast<float>((q[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
    }
    for (int l = 0; l < 32; ++l) {
      y[l + 32] = d2 * static_cast<float>((q[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    }
  }
}

// Q6_K: u8 ql[128], u8 qh[64], i8 scales[16], f16 d.
void DequantQ6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = LoadHalf(b + 208);
  for (int n = 0; n < 2; ++n, ql += 64, qh += 32, sc += 8, y += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * sc[is + 0] * static_cast<float>(q1);
      y[l + 32] = d * sc[is + 2] * static_cast<float>(q2);
      y[l + 64] = d * sc[is + 4] * static_cast<float>(q3);
      y[l + 96] = d * sc[is + 6] * static_cast<float>(q4);
    }
  }
}

using BlockFn = void (*)(const uint8_t*, float*);

void DequantBlocks(BlockFn fn, int64_t block_elems, int64_t block_bytes, const void* src,
                   float* dst, int64_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n / block_elems; ++i) fn(p + i * block_bytes, dst + i * block_elems);
}

}  // namespace

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  if (exp == 0x1F) return BitsFloat(sign | 0x7F800000 | (mant << 13));  // inf / nan
  if (exp == 0) {
    if (mant == 0) return BitsFloat(sign);  // +-0
    // Subnormal: normalise the mantissa (value = mant * 2^-24).
    exp = 1;
    while ((mant & 0x400) == 0) {
      mant <<= 1;
      --exp;
    }
    mant &= 0x3FF;
  }
  return BitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t FloatToHalf(float f) {
  uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  x &= 0x7FFFFFFF;
  if (x >= 0x7F800000) {  // inf stays inf; nan stays a (quiet) nan keeping its top payload bits
    return sign | (x > 0x7F800000 ? 0x7E00 | ((x >> 13) & 0x3FF) : 0x7C00);
  }
  if (x >= 0x477FF000) return sign | 0x7C00;  // >= 65520 rounds (ties to even) to inf
  if (x < 0x38800000) {                       // below 2^-14: a half subnormal or zero
    if (x <= 0x33000000) return sign;         // <= 2^-25 rounds to zero (2^-25 is a tie -> even)
    const uint32_t e = x >> 23;
    const uint32_t m = (x & 0x7FFFFF) | 0x800000;
    const uint32_t shift = 126 - e;  // value / 2^-24 = m >> shift; 14 <= shift <= 24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  const uint32_t rebased = x - 0x38000000;  // exponent bias 127 -> 15
  uint32_t h = rebased >> 13;
  const uint32_t rem = rebased & 0x1FFF;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;  // a carry into the exponent is correct
  return static_cast<uint16_t>(sign | h);
}

float Bf16ToFloat(uint16_t h) { return BitsFloat(static_cast<uint32_t>(h) << 16); }

bool CanDequantize(DType type) {
  const auto info = GetDTypeInfo(static_cast<uint32_t>(type));
  return info && info->dequantizable;
}

Status Dequantize(DType type, const void* src, float* dst, int64_t n) {
  const auto info = GetDTypeInfo(static_cast<uint32_t>(type));
  if (!info || !info->dequantizable) {
    return Unimplemented(std::string("cannot dequantize type ") + DTypeName(type) + " (id " +
                         std::to_string(static_cast<uint32_t>(type)) + ")");
  }
  if (n < 0 || n % info->block_elems != 0) {
    return InvalidArgument("Dequantize " + std::string(info->name) + ": n = " + std::to_string(n) +
                           " is not a non-negative multiple of the block size " +
                           std::to_string(info->block_elems));
  }
  if (n == 0) return OkStatus();  // src may be null
  const uint8_t* p = static_cast<const uint8_t*>(src);
  switch (type) {
    case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return OkStatus();
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = LoadHalf(p + 2 * i);
      return OkStatus();
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = Bf16ToFloat(h);
      }
      return OkStatus();
    case DType::kQ4_0: DequantBlocks(DequantQ4_0, kQK, 18, src, dst, n); return OkStatus();
    case DType::kQ4_1: DequantBlocks(DequantQ4_1, kQK, 20, src, dst, n); return OkStatus();
    case DType::kQ5_0: DequantBlocks(DequantQ5_0, kQK, 22, src, dst, n); return OkStatus();
    case DType::kQ5_1: DequantBlocks(DequantQ5_1, kQK, 24, src, dst, n); return OkStatus();
    case DType::kQ8_0: DequantBlocks(DequantQ8_0, kQK, 34, src, dst, n); return OkStatus();
    case DType::kQ4_K: DequantBlocks(DequantQ4_K, kQK_K, 144, src, dst, n); return OkStatus();
    case DType::kQ5_K: DequantBlocks(DequantQ5_K, kQK_K, 176, src, dst, n); return OkStatus();
    case DType::kQ6_K: DequantBlocks(DequantQ6_K, kQK_K, 210, src, dst, n); return OkStatus();
    default: break;
  }
  return Unimplemented(std::string("no dequantizer for type ") + info->name);
}

}  // namespace uniprefill
