// Random bf16 weights that the host and the device make bit-identically (benchmarks' random-weight
// models, model/model_presets.h): a CUDA model fills them on the device, a CPU model materialises
// the same values on the host, so the two can be compared on one random model.
//
// Element i of the stream `seed`: the (i + 1)-th output of splitmix64 seeded with `seed`, its top
// 24 bits as u in [0, 1) (exact), then scale * (2u - 1) and the bf16 conversion both rounded toward
// zero, so the value stays in [-scale, scale).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#endif

#include "core/host_device.h"

namespace uniprefill {

// The bf16 bit pattern of element i.
UP_HOST_DEVICE inline uint16_t RandomBf16Bits(uint64_t seed, uint64_t i, float scale) {
  uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const float u = static_cast<float>(z >> 40) * 0x1p-24f;
#if defined(__CUDA_ARCH__)
  return __bfloat16_as_ushort(__float2bfloat16_rz(__fmul_rz(scale, 2.0f * u - 1.0f)));
#else
  // 2u - 1 is exact in f32; the product of two f32 is exact in double, then rounded toward zero.
  const double exact = static_cast<double>(scale) * static_cast<double>(2.0f * u - 1.0f);
  float f = static_cast<float>(exact);
  if (std::fabs(static_cast<double>(f)) > std::fabs(exact)) f = std::nextafter(f, 0.0f);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);  // truncation = toward zero
#endif
}

}  // namespace uniprefill
