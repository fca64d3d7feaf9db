// Multi-row Linear kernels on int8-quantised activations (AVX-512 VNNI vpdpbusd: 64 u8 x s8
// multiply-adds per instruction, twice vpdpwssd's 32).
//
// Why: the batched int16 rows (cpu_quant_dot_i16.h) spend most of their time on loads, the int16
// activations (2 bytes per value) and one multiply-add per 32 values; with int8 activations a zmm
// holds 64 of them and one vpdpbusd multiplies them by 64 weights.
// Format: each activation row is quantised once per call, one scale per kI8ScaleGroup (32)
// values (llama.cpp's q8_0 granularity): xq = round(x / scale), |xq| <= 127, scale = block max /
// 127. The kernels read xu = xq + 128 (vpdpbusd's unsigned operand) and the weights as signed
// bytes; the +128 is taken out per 64-weight unit of the weight row, shared by every activation
// row: sum(w * xq) = sum(w * xu) - 128 * sum(w), the last term one vpdpbusd of 128s by w.
// Accuracy: the activation rounding, at most scale / 2 = block max / 254 per value (the int16
// rows: group max / 65534). One scale per 32 values, not per 256 (q8_K): on the golden prompt 2
// the first-token logits moved 1.9 from fp32 with 256, 0.85 with 64 and 0.72 with 32, and only 32
// kept both the top-5 and the 32-token greedy continuation of fp32 (tests/model).
// Non-goals: one-row decode (the int16 matvec stays: its error is far smaller and that step is
// bound by the weights' memory); levels without VNNI (the int16 rows run there); rows whose
// length is not a multiple of 64 (the int16 rows run there).
#pragma once

#include <cstdint>
#include <string_view>

#include "core/cpu_isa.h"
#include "core/dtype.h"

namespace uniprefill::ops::cpu {

// Activations per scale: half of a kernel's 64-weight unit.
inline constexpr int64_t kI8ScaleGroup = 32;

// Activation rows per kernel call: the weights' decoding is shared by 8 rows and the 8 rows'
// accumulators fit the 32 zmm registers next to a decoded unit.
inline constexpr int kQuantDotI8Rows = 8;

// One activation row as the kernels read it, n a multiple of 64: xu[i] = round(x[i] / s[j]) + 128
// with s[j] = max|x| over block j = [32j, 32j + 32) / 127 (0 for an all-zero block); scale holds
// the block scales as the kernels' lanes want them: 16 floats per 64 values, s[2k] 8 times, then
// s[2k + 1] 8 times (scale[i / 4] is the scale of value i); bsum[j] = s[j] * the sum of xq over
// block j (the dequantised block sums: the mins of Q4_K need them).
void QuantizeRowI8Blocks(const float* x, int64_t n, uint8_t* xu, float* scale, float* bsum);

// The int8 activation rows of a multi-row call; row r's data start at r * (each stride).
struct I8Rows {
  const uint8_t* xu;  // uint8 [nx, xu_stride]: xq + 128
  int64_t xu_stride;
  const float* scale;  // f32 [nx, scale_stride]: one per 4 activations (lanes, as above)
  int64_t scale_stride;
  const float* bsum;  // f32 [nx, bsum_stride]: one per 32 activations
  int64_t bsum_stride;
};

// out[r * out_stride] = sum_i dequant(w)[i] * scale[r][i / 4] * (xu[r][i] - 128) for r < nx
// (1..kQuantDotI8Rows): one weight row of n elements (a multiple of 64).
using QuantDotI8RowsFn = void (*)(const void* w, const I8Rows& x, int nx, int64_t n, float* out,
                                  int64_t out_stride);

// The kernel for `type` at `isa` (a resolved level), or nullptr: the VNNI levels have Q8_0, Q5_0,
// Q4_K and Q6_K. Defined in cpu_quant_dot_dispatch.cc.
QuantDotI8RowsFn FusedQuantDotI8Rows(DType type, CpuIsa isa);
// The level whose variant FusedQuantDotI8Rows(type, isa) returns, or "" for none.
std::string_view FusedQuantDotI8RowsLevel(DType type, CpuIsa isa);

}  // namespace uniprefill::ops::cpu
