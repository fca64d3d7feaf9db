// The sm_80+ warp-level primitives flash_attention.cu is built from, as thin inline-PTX wrappers:
// 16-byte cp.async (with zero fill), ldmatrix (.x4, plain and .trans), the bf16 tensor-core MMA
// m16n8k16 with f32 accumulators, ex2.approx and bf16x2 packing. Shared by the CUDA kernels
// (flash_attention.cu, linear_attention_delta_rule_tc.cu, paged_decode_tc.cuh); not a public op
// interface.
//
// Fragment layouts of mma.m16n8k16 (lane = 4 * g + t, g = lane / 4, t = lane % 4), which the
// kernel's index arithmetic relies on:
//   A (16 x 16, row-major) regs a0..a3: a0 = (row g, cols 2t, 2t+1), a1 = (row g+8, cols 2t, 2t+1),
//                                       a2 = (row g, cols 2t+8, 2t+9), a3 = (row g+8, cols 2t+8..9)
//   B (16 x 8, "col": column n contiguous in k) regs b0, b1: b0 = (k 2t, 2t+1; col g),
//                                                           b1 = (k 2t+8, 2t+9; col g)
//   C (16 x 8 f32) c0..c3: c0, c1 = (row g, cols 2t, 2t+1), c2, c3 = (row g+8, cols 2t, 2t+1)
// In each 32-bit register the lower-indexed element sits in the low 16 bits.
// ldmatrix.x4: lanes 8i..8i+7 give the row addresses of 8 x 8 matrix i, which lands in register i;
// without .trans lane (g, t) receives (row g, cols 2t, 2t+1) of each matrix, with .trans
// (rows 2t, 2t+1; col g).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace uniprefill::ops::cuda::flash {

__device__ __forceinline__ uint32_t SmemAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies 16 bytes global -> shared asynchronously; when !valid, writes 16 zero bytes instead (src
// is not read, but must still be a mapped address).
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddress(smem)),
               "l"(gmem), "r"(src_bytes)
               : "memory");
}
// Copies 4 bytes global -> shared asynchronously (.ca: the 16-byte .cg form takes no smaller size).
__device__ __forceinline__ void CpAsync4(void* smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(SmemAddress(smem)), "l"(gmem)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddress(smem)));
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddress(smem)));
}

// c += A B for one 16 x 8 x 16 tile (bf16 inputs, f32 accumulators).
__device__ __forceinline__ void MmaBf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 2^x (ex2.approx: relative error ~2^-22; ex2(-inf) = +0).
__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Two f32 -> one register of two bf16 (round to nearest even), lo in the low half.
__device__ __forceinline__ uint32_t PackBf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

}  // namespace uniprefill::ops::cuda::flash
