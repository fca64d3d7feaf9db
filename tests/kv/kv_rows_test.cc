// StoreKvValues / LoadKvValues (kv/kv_rows.h), the f16 element type of the CPU caches, against
// the scalar f16 decoder of the GGUF loader (io/dequant.h): every stored half is the nearest f16
// to its input (ties to the even one), out-of-range inputs saturate at +-65504 instead of
// becoming infinite, loads widen exactly, and the vector body and the scalar tail agree (odd
// lengths). f32 is a plain copy.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "io/dequant.h"
#include "kv/kv_rows.h"

namespace uniprefill {
namespace {

// The f16 neighbours of h (toward zero and away from it), as floats; h is finite.
float Next(uint16_t h, int step) { return HalfToFloat(static_cast<uint16_t>(h + step)); }

TEST(KvRowsTest, F16StoresTheNearestHalfAndLoadsItExactly) {
  std::mt19937 rng(2026);
  std::vector<float> x;
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (int i = 0; i < 4001; ++i) {  // odd: the scalar tail runs too
    const float scale = std::ldexp(1.0f, static_cast<int>(rng() % 40) - 24);  // subnormals to 2^15
    x.push_back(unit(rng) * scale);
  }
  x.push_back(0.0f);
  x.push_back(-0.0f);
  x.push_back(1.0f + 1.0f / 2048);  // a tie between 1 and 1 + 2^-10: to the even (1)
  x.push_back(65504.0f);
  std::vector<uint16_t> h(x.size());
  StoreKvValues(h.data(), DType::kF16, x.data(), static_cast<int64_t>(x.size()));
  std::vector<float> back(x.size());
  LoadKvValues(back.data(), h.data(), DType::kF16, static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const float got = HalfToFloat(h[i]);
    ASSERT_EQ(back[i], got) << "load of element " << i;
    const float err = std::fabs(got - x[i]);
    // No other f16 is closer: the neighbours on both sides are at least as far.
    if ((h[i] & 0x7FFF) != 0) EXPECT_LE(err, std::fabs(Next(h[i], -1) - x[i])) << x[i];
    if ((h[i] & 0x7FFF) < 0x7BFF) EXPECT_LE(err, std::fabs(Next(h[i], 1) - x[i])) << x[i];
    EXPECT_EQ(std::signbit(got), std::signbit(x[i])) << x[i];
  }
  EXPECT_EQ(back[x.size() - 2], 1.0f);  // the tie went to the even mantissa
  EXPECT_EQ(back[x.size() - 1], 65504.0f);
}

TEST(KvRowsTest, F16SaturatesInsteadOfOverflowing) {
  const std::vector<float> x = {1e6f, -1e6f, 70000.0f, -65520.0f, 3.4e38f, 1.0f, 2.0f, 3.0f, 4.0f};
  std::vector<uint16_t> h(x.size());
  StoreKvValues(h.data(), DType::kF16, x.data(), static_cast<int64_t>(x.size()));
  std::vector<float> back(x.size());
  LoadKvValues(back.data(), h.data(), DType::kF16, static_cast<int64_t>(x.size()));
  const std::vector<float> want = {65504.0f, -65504.0f, 65504.0f, -65504.0f, 65504.0f,
                                   1.0f,     2.0f,      3.0f,     4.0f};
  EXPECT_EQ(back, want);
  // The scalar tail (one value) clamps the same way.
  uint16_t one = 0;
  const float big = -1e9f;
  StoreKvValues(&one, DType::kF16, &big, 1);
  EXPECT_EQ(HalfToFloat(one), -65504.0f);
}

TEST(KvRowsTest, F32IsACopy) {
  const std::vector<float> x = {1.5f, -2.25f, 1e30f, 3.0f};
  std::vector<float> stored(x.size()), back(x.size());
  StoreKvValues(stored.data(), DType::kF32, x.data(), 4);
  LoadKvValues(back.data(), stored.data(), DType::kF32, 4);
  EXPECT_EQ(stored, x);
  EXPECT_EQ(back, x);
  EXPECT_EQ(KvElementBytes(DType::kF32), 4);
  EXPECT_EQ(KvElementBytes(DType::kF16), 2);
}

}  // namespace
}  // namespace uniprefill
