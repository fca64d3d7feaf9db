// Dequantisation: fp16/bf16 conversions (exhaustively) and every block format, on hand-built blocks
// whose expected values come from a per-element formula written here independently of dequant.cc
// (element i -> which byte, which bits, which scale), plus a few values worked out by hand.
#include "io/dequant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#ifdef __F16C__
#include <immintrin.h>
#endif

namespace uniprefill {
namespace {

float F32FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t BitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
void PutU16(std::vector<uint8_t>& b, size_t at, uint16_t v) {
  b[at] = static_cast<uint8_t>(v & 0xFF);
  b[at + 1] = static_cast<uint8_t>(v >> 8);
}

// fp16 by definition: (-1)^s * 2^(e-15) * (1 + m/1024), subnormals 2^-14 * m/1024.
double HalfByDefinition(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1F, m = h & 0x3FF;
  double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  if (e == 31) v = m == 0 ? INFINITY : NAN;
  return s ? -v : v;
}

// Fp16 bits used to build blocks (so the test does not depend on FloatToHalf).
constexpr uint16_t kHalfOne = 0x3C00, kHalfHalf = 0x3800, kHalfQuarter = 0x3400,
                   kHalfEighth = 0x3000, kHalfMinusOne = 0xBC00, kHalfTwo = 0x4000;

// ---- fp16 / bf16 ----------------------------------------------------------------------------

TEST(HalfToFloat, KnownValues) {
  EXPECT_EQ(HalfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xC000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(HalfToFloat(0x7BFF), 65504.0f);                  // largest finite
  EXPECT_EQ(HalfToFloat(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(HalfToFloat(0x03FF), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(BitsOf(HalfToFloat(0x8000)), 0x80000000u);       // -0 keeps its sign
  EXPECT_EQ(HalfToFloat(0x7C00), INFINITY);
  EXPECT_EQ(HalfToFloat(0xFC00), -INFINITY);
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7E00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0xFC01)));
}

TEST(HalfToFloat, MatchesDefinitionForAllBitPatterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const double want = HalfByDefinition(static_cast<uint16_t>(h));
    const float got = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << h;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << h;
      EXPECT_EQ(std::signbit(got), (h & 0x8000) != 0) << h;
    }
  }
}

TEST(FloatToHalf, RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f)))) << h;
    } else {
      EXPECT_EQ(FloatToHalf(f), h) << h;
    }
  }
}

// Between two adjacent positive halves a and a+1: the exact midpoint rounds to the even one, and one
// float ulp either side of it rounds to the nearer one. Covers subnormals, exponent carries and the
// last finite value (whose upper neighbour is inf).
TEST(FloatToHalf, RoundsToNearestEvenEverywhere) {
  for (uint16_t a = 0; a < 0x7C00; ++a) {
    const uint16_t b = static_cast<uint16_t>(a + 1);
    const double lo = HalfByDefinition(a);
    const double hi = b == 0x7C00 ? 65536.0 : HalfByDefinition(b);
    const float mid = static_cast<float>((lo + hi) / 2);  // exact: 12 significant bits
    const uint16_t even = (a & 1) ? b : a;
    ASSERT_EQ(FloatToHalf(mid), even) << a;
    ASSERT_EQ(FloatToHalf(std::nextafter(mid, 0.0f)), a) << a;
    ASSERT_EQ(FloatToHalf(std::nextafter(mid, INFINITY)), b) << a;
    ASSERT_EQ(FloatToHalf(-mid), even | 0x8000) << a;
  }
}

TEST(FloatToHalf, EdgeCases) {
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(65519.99f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);  // tie with the next (inf) rounds to even
  EXPECT_EQ(FloatToHalf(1e10f), 0x7C00);
  EXPECT_EQ(FloatToHalf(-1e10f), 0xFC00);
  EXPECT_EQ(FloatToHalf(INFINITY), 0x7C00);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // half of the smallest subnormal: tie
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0001f, -25)), 0x0001);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -140)), 0x0000);
  EXPECT_EQ(FloatToHalf(F32FromBits(0x00000001)), 0x0000);  // a float subnormal
  const uint16_t nan = FloatToHalf(NAN);
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x3FF, 0);
}

#ifdef __F16C__
TEST(FloatToHalf, MatchesF16CInstructionOnRandomFloats) {
  std::mt19937 rng(7);
  for (int i = 0; i < 1000000; ++i) {
    const float f = F32FromBits(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToHalf(f), _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)) << f;
  }
}
#endif

TEST(Bf16ToFloat, IsTheTopHalfOfAnF32) {
  EXPECT_EQ(Bf16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(Bf16ToFloat(0xC040), -3.0f);
  EXPECT_EQ(Bf16ToFloat(0x7F80), INFINITY);
  EXPECT_EQ(BitsOf(Bf16ToFloat(0x0001)), 0x00010000u);  // subnormal
  EXPECT_TRUE(std::isnan(Bf16ToFloat(0x7FC0)));
}

// ---- Plain types ----------------------------------------------------------------------------

TEST(Dequantize, F32F16Bf16) {
  const float f32[3] = {1.5f, -2.0f, 1e-30f};
  float out[3];
  ASSERT_TRUE(Dequantize(DType::kF32, f32, out, 3).ok());
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[2], 1e-30f);
  const uint16_t f16[3] = {0x3E00, 0xC100, 0x0001};  // 1.5, -2.5, 2^-24
  ASSERT_TRUE(Dequantize(DType::kF16, f16, out, 3).ok());
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -2.5f);
  EXPECT_EQ(out[2], std::ldexp(1.0f, -24));
  const uint16_t bf16[3] = {0x3FC0, 0xC020, 0x0000};  // 1.5, -2.5, 0
  ASSERT_TRUE(Dequantize(DType::kBF16, bf16, out, 3).ok());
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -2.5f);
  EXPECT_EQ(out[2], 0.0f);
}

TEST(Dequantize, RejectsPartialBlocksAndUnsupportedTypes) {
  std::vector<uint8_t> block(34);
  float out[64];
  EXPECT_EQ(Dequantize(DType::kQ8_0, block.data(), out, 33).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(Dequantize(DType::kQ8_0, block.data(), out, -32).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(Dequantize(DType::kQ2_K, block.data(), out, 256).code(), ErrorCode::kUnimplemented);
  EXPECT_EQ(Dequantize(DType::kI32, block.data(), out, 1).code(), ErrorCode::kUnimplemented);
  EXPECT_TRUE(Dequantize(DType::kQ8_0, block.data(), out, 0).ok());
}

TEST(CanDequantize, ListsTheSupportedTypes) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                  DType::kQ5_1, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    EXPECT_TRUE(CanDequantize(t)) << DTypeName(t);
  }
  for (DType t : {DType::kQ2_K, DType::kQ3_K, DType::kQ8_K, DType::kI32, DType::kI64}) {
    EXPECT_FALSE(CanDequantize(t)) << DTypeName(t);
  }
}

// ---- Block formats: per-element reference formulas ------------------------------------------

float H(const uint8_t* p) { return HalfToFloat(static_cast<uint16_t>(p[0] | (p[1] << 8))); }
int Nibble(const uint8_t* qs, int j) {  // element j of a 32-block: low nibbles first
  return j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4;
}
int Bit(const uint8_t* bytes, int bit) { return (bytes[bit / 8] >> (bit % 8)) & 1; }

float RefQ8_0(const uint8_t* b, int j) { return H(b) * static_cast<int8_t>(b[2 + j]); }
float RefQ4_0(const uint8_t* b, int j) { return H(b) * (Nibble(b + 2, j) - 8); }
float RefQ4_1(const uint8_t* b, int j) { return H(b) * Nibble(b + 4, j) + H(b + 2); }
float RefQ5_0(const uint8_t* b, int j) {  // qh bit j is the 5th bit of element j
  return H(b) * ((Nibble(b + 6, j) | (Bit(b + 2, j) << 4)) - 16);
}
float RefQ5_1(const uint8_t* b, int j) {
  return H(b) * (Nibble(b + 8, j) | (Bit(b + 4, j) << 4)) + H(b + 2);
}

// K-quants: sub-block s (32 elements) has a 6-bit scale and min. Scales 0-3 and mins 0-3 are the
// low 6 bits of bytes 0-3 and 4-7; scales/mins 4-7 take their low 4 bits from the low/high nibble
// of bytes 8-11 and their top 2 bits from the top 2 bits of bytes 0-3 / 4-7.
int KScale(const uint8_t* q, int s) {
  return s < 4 ? q[s] & 63 : (q[s + 4] & 0xF) | ((q[s - 4] >> 6) << 4);
}
int KMin(const uint8_t* q, int s) { return s < 4 ? q[s + 4] & 63 : (q[s + 4] >> 4) | ((q[s] >> 6) << 4); }
// Within a 256 super-block element i is in chunk c = i/64 (bytes qs[32c..32c+31]); the first 32
// use the low nibbles, the next 32 the high nibbles.
int KNibble(const uint8_t* qs, int i) {
  const int c = i / 64, l = i % 32;
  return (i % 64) < 32 ? qs[32 * c + l] & 0xF : qs[32 * c + l] >> 4;
}
float RefQ4_K(const uint8_t* b, int i) {
  const int s = i / 32;
  return H(b) * KScale(b + 4, s) * KNibble(b + 16, i) - H(b + 2) * KMin(b + 4, s);
}
float RefQ5_K(const uint8_t* b, int i) {
  const int s = i / 32, l = i % 32;  // the 5th bit: bit s of qh[l]
  const int q = KNibble(b + 48, i) + 16 * ((b[16 + l] >> s) & 1);
  return H(b) * KScale(b + 4, s) * q - H(b + 2) * KMin(b + 4, s);
}
// Q6_K: half n = i/128; within it quarter k = (i%128)/32 and l = i%32. Low 4 bits: quarters 0/1
// are the low nibbles of ql[64n + l] / ql[64n + 32 + l], quarters 2/3 their high nibbles; high 2
// bits: bits 2k..2k+1 of qh[32n + l]; scale: int8 scales[8n + 2k + l/16]; d is the last 2 bytes.
float RefQ6_K(const uint8_t* b, int i) {
  const int n = i / 128, k = (i % 128) / 32, l = i % 32;
  const uint8_t qlb = b[64 * n + 32 * (k % 2) + l];
  const int lo = k < 2 ? qlb & 0xF : qlb >> 4;
  const int hi = (b[128 + 32 * n + l] >> (2 * k)) & 3;
  const int sc = static_cast<int8_t>(b[192 + 8 * n + 2 * k + l / 16]);
  return H(b + 208) * sc * ((lo | (hi << 4)) - 32);
}

struct BlockFormat {
  DType type;
  int elems;
  int bytes;
  float (*ref)(const uint8_t*, int);
  std::vector<int> half_offsets;  // where fp16 scales live (set to sane values in random blocks)
};

const std::vector<BlockFormat>& Formats() {
  static const std::vector<BlockFormat> f = {
      {DType::kQ4_0, 32, 18, RefQ4_0, {0}},          {DType::kQ4_1, 32, 20, RefQ4_1, {0, 2}},
      {DType::kQ5_0, 32, 22, RefQ5_0, {0}},          {DType::kQ5_1, 32, 24, RefQ5_1, {0, 2}},
      {DType::kQ8_0, 32, 34, RefQ8_0, {0}},          {DType::kQ4_K, 256, 144, RefQ4_K, {0, 2}},
      {DType::kQ5_K, 256, 176, RefQ5_K, {0, 2}},     {DType::kQ6_K, 256, 210, RefQ6_K, {208}},
  };
  return f;
}

// A deterministic byte pattern that sets every bit somewhere.
std::vector<uint8_t> Pattern(int n, int seed) {
  std::vector<uint8_t> b(n);
  for (int i = 0; i < n; ++i) b[i] = static_cast<uint8_t>((i * 37 + seed * 101 + (i >> 3)) & 0xFF);
  return b;
}

std::vector<float> DequantAll(DType t, const std::vector<uint8_t>& bytes, int n) {
  std::vector<float> out(n);
  EXPECT_TRUE(Dequantize(t, bytes.data(), out.data(), n).ok());
  return out;
}

// Hand-built blocks with power-of-two scales: every product is exact, so the values must be equal.
TEST(Dequantize, HandBuiltBlocksMatchTheElementFormulaExactly) {
  for (const BlockFormat& f : Formats()) {
    std::vector<uint8_t> b = Pattern(2 * f.bytes, static_cast<int>(f.type));
    for (int blk = 0; blk < 2; ++blk) {
      for (size_t k = 0; k < f.half_offsets.size(); ++k) {  // d = 1/2 or 1/4, min/dmin = 1/4 or -1
        const uint16_t h = k == 0 ? (blk ? kHalfQuarter : kHalfHalf)
                                  : (blk ? kHalfMinusOne : kHalfQuarter);
        PutU16(b, blk * f.bytes + f.half_offsets[k], h);
      }
    }
    const std::vector<float> got = DequantAll(f.type, b, 2 * f.elems);
    for (int i = 0; i < 2 * f.elems; ++i) {
      const float want = f.ref(b.data() + (i / f.elems) * f.bytes, i % f.elems);
      ASSERT_EQ(got[i], want) << DTypeName(f.type) << " element " << i;
    }
  }
}

// Random blocks with random (finite) fp16 scales; tolerance covers fused multiply-adds only.
TEST(Dequantize, RandomBlocksMatchTheElementFormula) {
  std::mt19937 rng(42);
  for (const BlockFormat& f : Formats()) {
    for (int rep = 0; rep < 50; ++rep) {
      std::vector<uint8_t> b(f.bytes);
      for (auto& x : b) x = static_cast<uint8_t>(rng());
      for (int off : f.half_offsets) PutU16(b, off, static_cast<uint16_t>(rng() % 0x7C00 | (rng() & 0x8000)));
      float scale_mag = 0;  // |d| + |min|: the error allowed for rounding / fused multiply-adds
      for (int off : f.half_offsets) scale_mag += std::fabs(H(b.data() + off));
      const std::vector<float> got = DequantAll(f.type, b, f.elems);
      for (int i = 0; i < f.elems; ++i) {
        const float want = f.ref(b.data(), i);
        ASSERT_NEAR(got[i], want, 4e-4f * scale_mag)
            << DTypeName(f.type) << " element " << i;
      }
    }
  }
}

// A few values worked out by hand from the byte layout (guards against the reference formulas and
// the implementation sharing a misreading of the format).
TEST(Dequantize, Q8_0ByHand) {
  std::vector<uint8_t> b(34, 0);
  PutU16(b, 0, kHalfHalf);
  b[2] = 0x80;   // q0 = -128
  b[33] = 0x7F;  // q31 = 127
  const auto y = DequantAll(DType::kQ8_0, b, 32);
  EXPECT_EQ(y[0], -64.0f);
  EXPECT_EQ(y[31], 63.5f);
  EXPECT_EQ(y[1], 0.0f);
}

TEST(Dequantize, Q4_0AndQ4_1ByHand) {
  std::vector<uint8_t> b(18, 0);
  PutU16(b, 0, kHalfTwo);
  b[2] = 0xF0;  // element 0 = low nibble 0 -> (0-8)*2; element 16 = high nibble 15 -> (15-8)*2
  auto y = DequantAll(DType::kQ4_0, b, 32);
  EXPECT_EQ(y[0], -16.0f);
  EXPECT_EQ(y[16], 14.0f);
  std::vector<uint8_t> c(20, 0);
  PutU16(c, 0, kHalfHalf);
  PutU16(c, 2, kHalfMinusOne);
  c[4 + 15] = 0x3A;  // element 15 = 10*0.5-1 = 4; element 31 = 3*0.5-1 = 0.5
  y = DequantAll(DType::kQ4_1, c, 32);
  EXPECT_EQ(y[15], 4.0f);
  EXPECT_EQ(y[31], 0.5f);
  EXPECT_EQ(y[0], -1.0f);
}

TEST(Dequantize, Q5_0AndQ5_1ByHand) {
  std::vector<uint8_t> b(22, 0);
  PutU16(b, 0, kHalfEighth);
  b[2] = 0x01;  // qh bit 0: element 0 gets 16 -> (16-16)/8 = 0
  b[5] = 0x80;  // qh bit 31: element 31 = ((qs[15]>>4) | 16) - 16
  b[6 + 15] = 0x70;  // element 15 = (0-16)/8 = -2; element 31 = (7|16)-16 = 7 -> 7/8
  auto y = DequantAll(DType::kQ5_0, b, 32);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[15], -2.0f);
  EXPECT_EQ(y[31], 0.875f);
  std::vector<uint8_t> c(24, 0);
  PutU16(c, 0, kHalfOne);
  PutU16(c, 2, kHalfTwo);
  c[4 + 2] = 0x01;  // qh bit 16: element 16 = (0|16)*1 + 2 = 18
  c[8] = 0x0F;      // element 0 = 15 + 2 = 17
  y = DequantAll(DType::kQ5_1, c, 32);
  EXPECT_EQ(y[0], 17.0f);
  EXPECT_EQ(y[16], 18.0f);
  EXPECT_EQ(y[1], 2.0f);
}

TEST(Dequantize, Q4_KAndQ5_KByHand) {
  std::vector<uint8_t> b(144, 0);
  PutU16(b, 0, kHalfHalf);     // d
  PutU16(b, 2, kHalfQuarter);  // dmin
  b[4 + 0] = 3;                // scale 0 = 3
  b[4 + 4] = 8 | 0x40;         // min 0 = 8; top bits 01 -> min 4 gets 16
  b[4 + 8] = 0x25;             // scale 4 = 5 (low nibble), min 4 = 2 | 16 = 18
  b[16 + 0] = 0x0F;            // element 0: q = 15 -> 0.5*3*15 - 0.25*8 = 20.5
  b[16 + 64] = 0x0A;           // element 128 (sub-block 4, chunk 2 low): 0.5*5*10 - 0.25*18 = 20.5
  auto y = DequantAll(DType::kQ4_K, b, 256);
  EXPECT_EQ(y[0], 20.5f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[128], 20.5f);
  EXPECT_EQ(y[129], -4.5f);
  std::vector<uint8_t> c(176, 0);
  PutU16(c, 0, kHalfOne);
  c[4 + 1] = 2;            // scale 1 = 2, min 1 = 0
  c[16 + 3] = 0x02;        // qh[3] bit 1: element 32 + 3 (sub-block 1) gets +16
  c[48 + 3] = 0x50;        // element 35 high nibble 5 -> (5 + 16) * 2 = 42
  y = DequantAll(DType::kQ5_K, c, 256);
  EXPECT_EQ(y[35], 42.0f);
  EXPECT_EQ(y[3], 0.0f);
}

TEST(Dequantize, Q6_KByHand) {
  std::vector<uint8_t> b(210, 0);
  PutU16(b, 208, kHalfHalf);
  b[192 + 0] = 2;                          // scales[0] = 2 (elements 0-15)
  b[192 + 15] = static_cast<uint8_t>(-3);  // scales[15] = -3 (half 1, quarter 3, l >= 16)
  b[0] = 0x05;                             // element 0: lo 5, hi 0 -> (5-32)*2*0.5 = -27
  b[64 + 32 + 20] = 0xF0;                  // element 128+96+20: lo = 15 (high nibble)
  b[128 + 32 + 20] = 0xC0;                 // hi bits 6-7 = 3 -> q = 63-32 = 31 -> 31*-3*0.5
  const auto y = DequantAll(DType::kQ6_K, b, 256);
  EXPECT_EQ(y[0], -27.0f);
  EXPECT_EQ(y[128 + 96 + 20], -46.5f);
  EXPECT_EQ(y[1], -32.0f);
}

}  // namespace
}  // namespace uniprefill
