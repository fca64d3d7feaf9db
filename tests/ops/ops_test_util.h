// Helpers for the op tests: random inputs, random quantised weight blocks, normalised errors.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "io/dequant.h"
#include "testing/compare.h"

namespace uniprefill::ops::testing {

inline std::vector<float> RandomFloats(std::mt19937& rng, int64_t n, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Byte offsets of the fp16 scale fields inside one block of a quantised type.
inline std::vector<int> ScaleOffsets(DType t) {
  switch (t) {
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ8_0: return {0};
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K: return {0, 2};
    case DType::kQ6_K: return {208};
    default: return {};
  }
}

// `rows` rows of `cols` elements of type t: random quant bytes with sane fp16 scales written in
// (so dequantised values are O(1)), or random values for the float types.
inline std::vector<uint8_t> RandomWeights(std::mt19937& rng, DType t, int64_t rows, int64_t cols) {
  const int64_t bytes = DTypeBytes(t, rows * cols);
  std::vector<uint8_t> w(bytes);
  if (t == DType::kF32) {
    const std::vector<float> f = RandomFloats(rng, rows * cols);
    std::memcpy(w.data(), f.data(), bytes);
    return w;
  }
  if (t == DType::kF16 || t == DType::kBF16) {
    const std::vector<float> f = RandomFloats(rng, rows * cols);
    for (int64_t i = 0; i < rows * cols; ++i) {
      uint16_t h;
      if (t == DType::kF16) {
        h = FloatToHalf(f[i]);
      } else {
        uint32_t u;
        std::memcpy(&u, &f[i], 4);
        h = static_cast<uint16_t>(u >> 16);
      }
      std::memcpy(w.data() + 2 * i, &h, 2);
    }
    return w;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : w) b = static_cast<uint8_t>(byte(rng));
  const auto info = GetDTypeInfo(static_cast<uint32_t>(t));
  const bool k_quant = info->block_elems == 256;
  std::uniform_real_distribution<float> scale(0.002f, 0.03f);
  for (int64_t blk = 0; blk < bytes / info->block_bytes; ++blk) {
    for (int off : ScaleOffsets(t)) {
      // K-quant sub-block scales are up to 63 (Q4_K/Q5_K) or 127 (Q6_K): keep d smaller there.
      const float s = scale(rng) * (k_quant ? 0.05f : 1.0f) * (byte(rng) & 1 ? 1 : -1);
      const uint16_t h = FloatToHalf(off == 2 ? std::fabs(s) : s);
      std::memcpy(w.data() + blk * info->block_bytes + off, &h, 2);
    }
  }
  return w;
}

// max |a - b| / max(rms(b), floor), infinite on NaN or Inf (the one helper, testing/compare.h).
using ::uniprefill::testing::MaxErrorOverRms;

}  // namespace uniprefill::ops::testing
