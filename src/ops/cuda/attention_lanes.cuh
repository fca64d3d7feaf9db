// Pieces shared by the SIMT attention kernels over paged K/V (paged_attention.cu: decode;
// cache_attention.cu: several query rows): bf16x8 <-> f32 conversion of one 16-byte vector,
// ex2.approx, and the merge of online-softmax states held by lanes that own the same 8 dims.
// Private to ops/cuda.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace uniprefill::ops::cuda::lanes {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegInf = -__builtin_huge_valf();

// 2^x (ex2.approx: relative error ~2^-22; ex2(-inf) = +0).
__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// 8 bf16 (one 16-byte vector) as f32.
__device__ __forceinline__ void Unpack8(const uint4 raw, float (&f)[8]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// 8 f32 as one 16-byte vector of bf16 (round to nearest even).
__device__ __forceinline__ uint4 Pack8(const float (&f)[8]) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    w[i] = *reinterpret_cast<const uint32_t*>(&v);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Lanes dl, dl + L, dl + 2L, ... of a warp own the same 8 dims of N items (query rows or heads),
// each with its own online-softmax state over the keys it saw: running max m (log2 units), sum l,
// accumulators acc. Merges them by xor shuffles; every lane ends with the merged state. A pair
// with no key on either side (both maxima -inf) stays empty.
template <int L, int N>
__device__ __forceinline__ void MergeLaneStates(float (&m)[N], float (&l)[N], float (&acc)[N][8]) {
#pragma unroll
  for (int o = L; o < 32; o <<= 1) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float om = __shfl_xor_sync(0xffffffffu, m[i], o);
      const float ol = __shfl_xor_sync(0xffffffffu, l[i], o);
      float oacc[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) oacc[e] = __shfl_xor_sync(0xffffffffu, acc[i][e], o);
      const float m_new = fmaxf(m[i], om);
      if (m_new != kNegInf) {
        const float ca = Exp2(m[i] - m_new), cb = Exp2(om - m_new);
        l[i] = l[i] * ca + ol * cb;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[i][e] = acc[i][e] * ca + oacc[e] * cb;
        m[i] = m_new;
      }
    }
  }
}

}  // namespace uniprefill::ops::cuda::lanes
