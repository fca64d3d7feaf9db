// Helpers for the CUDA op tests: one shared GPU context, a skip line when there is no GPU, bf16
// host conversions and normalised errors. Every CUDA test starts with UP_CUDA_TEST_CONTEXT(ctx).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/device_context.h"
#include "testing/compare.h"  // RelativeL2Error and the other NaN-aware errors

namespace uniprefill::testing {

// The process-wide GPU context of the test binary (made once), or null with *why set.
inline DeviceContext* SharedCudaContext(std::string* why) {
  static std::string reason;
  static std::unique_ptr<DeviceContext> ctx = [] {
    Result<std::unique_ptr<DeviceContext>> r = DeviceContext::Cuda(0, 2);
    if (!r.ok()) {
      reason = r.status().message();
      return std::unique_ptr<DeviceContext>();
    }
    return std::move(r).value();
  }();
  if (why) *why = reason;
  return ctx.get();
}

// Round-to-nearest-even f32 -> bf16 bits, and back (NaN stays NaN).
inline uint16_t F32ToBf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float Bf16BitsToF32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = F32ToBf16Bits(v[i]);
  return out;
}
inline std::vector<float> FromBf16(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = Bf16BitsToF32(v[i]);
  return out;
}
// Random bf16-representable values in [lo, hi) (so the CPU reference sees the GPU's exact inputs).
inline std::vector<float> RandomBf16Values(std::mt19937& rng, size_t n, float lo = -1.0f,
                                           float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = Bf16BitsToF32(F32ToBf16Bits(dist(rng)));
  return v;
}

// Mean milliseconds of `runs` calls of fn on ctx's stream, timed with events after one warm-up
// call (the timing tests print it; timed tests never assert on it).
template <class Fn>
double MeanCudaMs(DeviceContext& ctx, int runs, const Fn& fn) {
  cudaStream_t stream = ctx.cuda().stream();
  fn();
  cudaEvent_t start, stop;
  UP_CUDA_CHECK(cudaEventCreate(&start));
  UP_CUDA_CHECK(cudaEventCreate(&stop));
  UP_CUDA_CHECK(cudaEventRecord(start, stream));
  for (int r = 0; r < runs; ++r) fn();
  UP_CUDA_CHECK(cudaEventRecord(stop, stream));
  UP_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  UP_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  UP_CUDA_CHECK(cudaEventDestroy(start));
  UP_CUDA_CHECK(cudaEventDestroy(stop));
  return ms / runs;
}

}  // namespace uniprefill::testing

// Binds `DeviceContext& name` to the shared GPU context, or skips the test with one clear line.
#define UP_CUDA_TEST_CONTEXT(name)                                                        \
  std::string _up_cuda_why;                                                               \
  ::uniprefill::DeviceContext* _up_cuda_ctx =                                             \
      ::uniprefill::testing::SharedCudaContext(&_up_cuda_why);                            \
  if (_up_cuda_ctx == nullptr) GTEST_SKIP() << "no GPU, CUDA test skipped: " << _up_cuda_why; \
  ::uniprefill::DeviceContext& name = *_up_cuda_ctx
