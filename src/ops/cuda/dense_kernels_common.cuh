// Shared pieces of the CUDA dense kernels (dense_norm.cu, dense_rope.cu, dense_elementwise.cu):
// 16-byte bf16 vector loads and stores as f32, warp and block sums, the row-tile launch shape and
// the alignment checks that pick a vectorised or a scalar kernel. Private to ops/cuda.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/tensor.h"

namespace uniprefill::ops::cuda::detail {

using bf16 = __nv_bfloat16;

constexpr int kBf16PerVec = 8;  // one 16-byte access

__device__ __forceinline__ float Bf16Lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float Bf16Hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
         (static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
}
__device__ __forceinline__ float RoundBf16(float f) {
  return __bfloat162float(__float2bfloat16_rn(f));
}

// 8 bf16 at p (16-byte aligned) as f32, and back (round to nearest even).
__device__ __forceinline__ void LoadBf16x8(const bf16* p, float (&f)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = Bf16Lo(w[i]);
    f[2 * i + 1] = Bf16Hi(w[i]);
  }
}
__device__ __forceinline__ void StoreBf16x8(bf16* p, const float (&f)[8]) {
  uint4 raw;
  raw.x = PackBf16(f[0], f[1]);
  raw.y = PackBf16(f[2], f[3]);
  raw.z = PackBf16(f[4], f[5]);
  raw.w = PackBf16(f[6], f[7]);
  *reinterpret_cast<uint4*>(p) = raw;
}

// W = 8: one 16-byte vector (p 16-byte aligned); W = 1: one element.
template <int W>
__device__ __forceinline__ void LoadBf16(const bf16* p, float (&f)[W]) {
  if constexpr (W == kBf16PerVec) {
    LoadBf16x8(p, f);
  } else {
    static_assert(W == 1);
    f[0] = __bfloat162float(*p);
  }
}
template <int W>
__device__ __forceinline__ void StoreBf16(bf16* p, const float (&f)[W]) {
  if constexpr (W == kBf16PerVec) {
    StoreBf16x8(p, f);
  } else {
    static_assert(W == 1);
    *p = __float2bfloat16_rn(f[0]);
  }
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// The sum over the block (blockDim.x a multiple of 32), returned to every thread. Uses one
// __syncthreads, so call it at most once per kernel and from every thread.
__device__ __forceinline__ float BlockSum(float v) {
  __shared__ float partial[32];
  v = WarpSum(v);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int n_warps = static_cast<int>(blockDim.x >> 5);
  return WarpSum(lane < n_warps ? partial[lane] : 0.0f);
}

// Row tiles for row-wise elementwise kernels: a block of kTileThreads threads covers
// kTileThreads >> log2_tpr rows with 2^log2_tpr threads per row (a power of two, so row and
// column come from shifts); each thread strides over its row's units (vectors or elements).
constexpr int kTileThreads = 256;
struct RowTile {
  int log2_tpr = 0;
  int64_t blocks = 0;
};
inline RowTile MakeRowTile(int64_t rows, int64_t units_per_row) {
  RowTile t;
  while (t.log2_tpr < 8 && (int64_t{1} << t.log2_tpr) < units_per_row) ++t.log2_tpr;
  const int64_t rows_per_block = kTileThreads >> t.log2_tpr;
  t.blocks = (rows + rows_per_block - 1) / rows_per_block;
  return t;
}
// This thread's row and first unit; false past the last row.
__device__ __forceinline__ bool TileRow(int log2_tpr, int64_t rows, int64_t* row, int64_t* unit) {
  *row = static_cast<int64_t>(blockIdx.x) * (kTileThreads >> log2_tpr) + (threadIdx.x >> log2_tpr);
  *unit = threadIdx.x & ((1u << log2_tpr) - 1);
  return *row < rows;
}

inline bool Aligned(const void* p, int bytes) {
  return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0;
}
// Whether every row (last dimension) of a bf16 view can be read in 16-byte vectors.
inline bool RowsVectorisable(const TensorView& v) {
  if (!Aligned(v.data, 16) || v.dim(-1) % kBf16PerVec != 0) return false;
  for (int d = 0; d + 1 < v.ndim; ++d) {
    if (v.shape[d] > 1 && v.stride[d] % kBf16PerVec != 0) return false;
  }
  return true;
}

}  // namespace uniprefill::ops::cuda::detail
