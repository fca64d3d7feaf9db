// One token row's rotary embedding on bf16 heads in place, as ops/cpu/cpu_rope.cc: the angles
// (float)pos * inv_freq[i] in f32 and their cos/sin in f32 (sincosf, accurate to ~1 ulp over the
// whole range, positions up to 2^17 and beyond) computed once into shared memory, the rotation in
// f32, rounded to bf16. Shared by Rope (dense_rope.cu) and RopePagedKvAppend (rope_append.cu), so
// both round alike bit for bit. The paired variant moves two pairs per thread with 4-byte bf16x2
// accesses (needs rot_dims % 4 == 0 and even strides); the scalar one moves one pair per thread.
// Private to ops/cuda.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"
#include "ops/ops.h"

namespace uniprefill::ops::cuda::detail {

struct RopeArgs {
  __nv_bfloat16* x = nullptr;  // bf16 [T, H, D]
  int64_t stride_t = 0, stride_h = 0;
  int heads = 0;
  const int32_t* pos = nullptr;     // int32 [T]
  const float* inv_freq = nullptr;  // f32 [half]
  int half = 0;                     // rot_dims / 2
};

__device__ __forceinline__ void RopeRotate(float x0, float x1, float c, float s, float* y0,
                                           float* y1) {
  *y0 = x0 * c - x1 * s;
  *y1 = x1 * c + x0 * s;
}

// Row t of a.x rotated by the block's threads; cos_sin: f32 [2 * a.half] of shared memory.
// Ends with the block's rotations issued (no barrier after them).
template <RopeStyle kStyle, bool kPaired>
__device__ __forceinline__ void RopeRow(const RopeArgs& a, int64_t t, float* cos_sin) {
  float* cs = cos_sin;
  float* sn = cos_sin + a.half;
  const float p = static_cast<float>(a.pos[t]);
  for (int i = threadIdx.x; i < a.half; i += blockDim.x) {
    sincosf(p * a.inv_freq[i], &sn[i], &cs[i]);
  }
  __syncthreads();
  __nv_bfloat16* xt = a.x + t * a.stride_t;
  const int per_head = kPaired ? a.half / 2 : a.half;
  const int work = a.heads * per_head;
  for (int w = threadIdx.x; w < work; w += blockDim.x) {
    const int h = w / per_head, j = w - h * per_head;
    __nv_bfloat16* v = xt + h * a.stride_h;
    if constexpr (kPaired) {
      // Pairs i and i + 1 = 2j, 2j + 1.
      const int i = 2 * j;
      __nv_bfloat162* p0;
      __nv_bfloat162* p1;
      if constexpr (kStyle == RopeStyle::kNeox) {
        p0 = reinterpret_cast<__nv_bfloat162*>(v + i);           // x0 of pairs i, i + 1
        p1 = reinterpret_cast<__nv_bfloat162*>(v + a.half + i);  // x1 of pairs i, i + 1
        const float2 x0 = __bfloat1622float2(*p0), x1 = __bfloat1622float2(*p1);
        float2 y0, y1;
        RopeRotate(x0.x, x1.x, cs[i], sn[i], &y0.x, &y1.x);
        RopeRotate(x0.y, x1.y, cs[i + 1], sn[i + 1], &y0.y, &y1.y);
        *p0 = __floats2bfloat162_rn(y0.x, y0.y);
        *p1 = __floats2bfloat162_rn(y1.x, y1.y);
      } else {
        p0 = reinterpret_cast<__nv_bfloat162*>(v + 2 * i);      // pair i
        p1 = reinterpret_cast<__nv_bfloat162*>(v + 2 * i + 2);  // pair i + 1
        const float2 a0 = __bfloat1622float2(*p0), a1 = __bfloat1622float2(*p1);
        float2 b0, b1;
        RopeRotate(a0.x, a0.y, cs[i], sn[i], &b0.x, &b0.y);
        RopeRotate(a1.x, a1.y, cs[i + 1], sn[i + 1], &b1.x, &b1.y);
        *p0 = __floats2bfloat162_rn(b0.x, b0.y);
        *p1 = __floats2bfloat162_rn(b1.x, b1.y);
      }
    } else {
      const int i = j;
      __nv_bfloat16* e0 = kStyle == RopeStyle::kNeox ? v + i : v + 2 * i;
      __nv_bfloat16* e1 = kStyle == RopeStyle::kNeox ? v + a.half + i : v + 2 * i + 1;
      float y0, y1;
      RopeRotate(__bfloat162float(*e0), __bfloat162float(*e1), cs[i], sn[i], &y0, &y1);
      *e0 = __float2bfloat16_rn(y0);
      *e1 = __float2bfloat16_rn(y1);
    }
  }
}

// The arguments for x bf16 [T, H, D] (token and head strides free, last dim contiguous), pos
// int32 [T], inv_freq f32 [rot_dims / 2].
inline RopeArgs RopeArgsFor(const TensorView& x, const int32_t* pos, const float* inv_freq,
                            int rot_dims) {
  RopeArgs a;
  a.x = static_cast<__nv_bfloat16*>(x.data);
  a.stride_t = x.stride[0];
  a.stride_h = x.stride[1];
  a.heads = static_cast<int>(x.dim(1));
  a.pos = pos;
  a.inv_freq = inv_freq;
  a.half = rot_dims / 2;
  return a;
}

// Whether RopeRow's paired variant may run on a: bf16x2 accesses need 4-byte alignment of every
// pair start: an even element offset for the data pointer, both strides and half (Neox's second
// element) or 2i (Adjacent, always even).
inline bool RopePairedOk(const RopeArgs& a) {
  return a.half % 2 == 0 && reinterpret_cast<uintptr_t>(a.x) % 4 == 0 && a.stride_t % 2 == 0 &&
         (a.heads == 1 || a.stride_h % 2 == 0);
}

}  // namespace uniprefill::ops::cuda::detail
