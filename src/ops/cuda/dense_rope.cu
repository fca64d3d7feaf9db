// Rope on bf16 [T, H, D] in place, as ops/cpu/cpu_rope.cc: per token the angles
// (float)pos * inv_freq[i] in f32 and their cos/sin in f32 (sincosf, accurate to ~1 ulp over the
// whole range, positions up to 2^17 and beyond), computed once into shared memory and applied to
// every head; the rotation is f32, so the output differs from the CPU's only by bf16 rounding.
// One block per token. The paired variant moves two pairs per thread with 4-byte bf16x2 accesses
// (needs rot_dims % 4 == 0 and even strides); the scalar one moves one pair per thread.
#include <algorithm>
#include <cassert>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_dense_ops.h"
#include "ops/cuda/dense_kernels_common.cuh"

namespace uniprefill::ops::cuda {
namespace {

using detail::bf16;

constexpr int kRopeThreads = 256;

struct RopeArgs {
  bf16* x = nullptr;  // bf16 [T, H, D]
  int64_t stride_t = 0, stride_h = 0;
  int heads = 0;
  const int32_t* pos = nullptr;     // int32 [T]
  const float* inv_freq = nullptr;  // f32 [half]
  int half = 0;                     // rot_dims / 2
};

__device__ __forceinline__ void Rotate(float x0, float x1, float c, float s, float* y0, float* y1) {
  *y0 = x0 * c - x1 * s;
  *y1 = x1 * c + x0 * s;
}

template <RopeStyle kStyle, bool kPaired>
__global__ void __launch_bounds__(kRopeThreads) RopeKernel(RopeArgs a) {
  extern __shared__ float cos_sin[];  // f32 [2, half]: cos, then sin
  float* cs = cos_sin;
  float* sn = cos_sin + a.half;
  const int64_t t = blockIdx.x;
  const float p = static_cast<float>(a.pos[t]);
  for (int i = threadIdx.x; i < a.half; i += blockDim.x) {
    sincosf(p * a.inv_freq[i], &sn[i], &cs[i]);
  }
  __syncthreads();
  bf16* xt = a.x + t * a.stride_t;
  const int per_head = kPaired ? a.half / 2 : a.half;
  const int work = a.heads * per_head;
  for (int w = threadIdx.x; w < work; w += blockDim.x) {
    const int h = w / per_head, j = w - h * per_head;
    bf16* v = xt + h * a.stride_h;
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
        Rotate(x0.x, x1.x, cs[i], sn[i], &y0.x, &y1.x);
        Rotate(x0.y, x1.y, cs[i + 1], sn[i + 1], &y0.y, &y1.y);
        *p0 = __floats2bfloat162_rn(y0.x, y0.y);
        *p1 = __floats2bfloat162_rn(y1.x, y1.y);
      } else {
        p0 = reinterpret_cast<__nv_bfloat162*>(v + 2 * i);      // pair i
        p1 = reinterpret_cast<__nv_bfloat162*>(v + 2 * i + 2);  // pair i + 1
        const float2 a0 = __bfloat1622float2(*p0), a1 = __bfloat1622float2(*p1);
        float2 b0, b1;
        Rotate(a0.x, a0.y, cs[i], sn[i], &b0.x, &b0.y);
        Rotate(a1.x, a1.y, cs[i + 1], sn[i + 1], &b1.x, &b1.y);
        *p0 = __floats2bfloat162_rn(b0.x, b0.y);
        *p1 = __floats2bfloat162_rn(b1.x, b1.y);
      }
    } else {
      const int i = j;
      bf16* e0 = kStyle == RopeStyle::kNeox ? v + i : v + 2 * i;
      bf16* e1 = kStyle == RopeStyle::kNeox ? v + a.half + i : v + 2 * i + 1;
      float y0, y1;
      Rotate(__bfloat162float(*e0), __bfloat162float(*e1), cs[i], sn[i], &y0, &y1);
      *e0 = __float2bfloat16_rn(y0);
      *e1 = __float2bfloat16_rn(y1);
    }
  }
}

template <RopeStyle kStyle>
void LaunchRope(const RopeArgs& a, int64_t tokens, bool paired, cudaStream_t stream) {
  const int work = a.heads * (paired ? a.half / 2 : a.half);
  const int threads = std::min(kRopeThreads, std::max(32, (work + 31) / 32 * 32));
  const size_t smem = sizeof(float) * 2 * a.half;
  assert(tokens <= INT32_MAX);
  if (paired) {
    RopeKernel<kStyle, true><<<static_cast<unsigned>(tokens), threads, smem, stream>>>(a);
  } else {
    RopeKernel<kStyle, false><<<static_cast<unsigned>(tokens), threads, smem, stream>>>(a);
  }
  UP_CUDA_CHECK_LAUNCH();
}

}  // namespace

void Rope(DeviceContext& ctx, TensorView x, const int32_t* pos, const float* inv_freq, int rot_dims,
          RopeStyle style) {
  // x bf16 [T, H, D] (token and head strides free, last dim contiguous); pos int32 [T];
  // inv_freq f32 [rot_dims / 2].
  assert(x.device == Device::kCuda && x.dtype == DType::kBF16 && x.ndim == 3);
  assert(x.stride[2] == 1 && rot_dims % 2 == 0 && rot_dims <= x.dim(2));
  const int64_t T = x.dim(0);
  if (T == 0 || x.dim(1) == 0 || rot_dims == 0) return;
  RopeArgs a;
  a.x = x.as<bf16>();
  a.stride_t = x.stride[0];
  a.stride_h = x.stride[1];
  a.heads = static_cast<int>(x.dim(1));
  a.pos = pos;
  a.inv_freq = inv_freq;
  a.half = rot_dims / 2;
  // bf16x2 accesses need 4-byte alignment of every pair start: an even element offset for the
  // data pointer, both strides and half (Neox's second element) or 2i (Adjacent, always even).
  const bool paired = a.half % 2 == 0 && detail::Aligned(a.x, 4) && a.stride_t % 2 == 0 &&
                      (a.heads == 1 || a.stride_h % 2 == 0);
  if (style == RopeStyle::kNeox) {
    LaunchRope<RopeStyle::kNeox>(a, T, paired, ctx.cuda().stream());
  } else {
    LaunchRope<RopeStyle::kAdjacent>(a, T, paired, ctx.cuda().stream());
  }
}

}  // namespace uniprefill::ops::cuda
