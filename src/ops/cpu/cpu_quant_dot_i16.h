// Decode matvec kernels with int16-quantised activations (AVX2 vpmaddwd; AVX-512 variants).
//
// Why: on this Zen 1 class of CPU the f32 fused kernels (cpu_quant_dot.h) are bound by the
// int -> float conversion of every weight, not by memory. Quantising the single activation row
// once per call to int16 (x ~= scale * xq, |xq| <= 32767, one scale per row) lets the weights stay
// integers: vpmaddwd does 16 multiply-adds per instruction and only one conversion per 32-weight
// block remains. Measured 2-3x faster per weight than the f32 kernels (docs/kernels.md).
// Accuracy: the only error is the activation rounding, at most scale / 2 = max|x| / 65534 per
// element, ~1e-5 relative to max|x| (vs int8 activations in llama.cpp, ~4e-3), far below the
// quantisation error of the weights themselves; tests bound it against the f32 reference.
// Several activation rows (a decode step of several requests, prefill chunks) use the multi-row
// kernels below: the weights are decoded once for up to kQuantDotI16Rows rows, and each group of
// kI16ScaleGroup activations has its own scale. Why groups: these rows feed every layer of a
// prefill, and a row's few outlier channels would otherwise set the step for all of its values
// (measured on the golden prompts: per-row scales put the first-token logits ~3x further from
// fp32, past the tests' bounds; docs/kernels.md).
// Non-goals: K-quant types on AVX2 (future work).
#pragma once

#include <cstdint>
#include <string_view>

#include "core/cpu_isa.h"
#include "core/dtype.h"

namespace uniprefill::ops::cpu {

// xq[i] = round(x[i] / scale) with scale = max|x| / 32767 (0 when x is all zeros).
void QuantizeRowI16(const float* x, int64_t n, int16_t* xq, float* scale);

// Returns sum_i dequant(w)[i] * xq[i] for one weight row of n elements (a multiple of 32); the
// caller multiplies by the activation scale.
using QuantDotI16Fn = float (*)(const void* w, const int16_t* xq, int64_t n);

// Activations per scale of the multi-row kernels: one K-quant super-block (its int32 sums are
// converted once), eight 32-blocks; a row of n (a multiple of 32) has ceil(n / 256) groups, the
// last one shorter when n is not a multiple of 256 (Gemma 3's 640: only 32-block types there).
inline constexpr int64_t kI16ScaleGroup = 256;

// One activation row as the multi-row kernels read it: xq[i] = round(x[i] / scale[g]) with
// scale[g] = max|x| over group g / 32767, and bsum[j] = scale[g] * sum of xq[32j, 32j + 32) (the
// dequantised block sums: the mins of Q4_K need them).
void QuantizeRowI16Groups(const float* x, int64_t n, int16_t* xq, float* scale, float* bsum);

// 8 rows: the weight decoding (K-quants: ~5 instructions per 32 weights) is shared by 8 rows'
// multiply-adds; the accumulators still fit the 32 zmm registers.
inline constexpr int kQuantDotI16Rows = 8;

// The int16 activation rows of a multi-row call; row r's data start at r * (each stride).
struct I16Rows {
  const int16_t* xq;  // int16 [nx, xq_stride]
  int64_t xq_stride;
  const float* scale;  // f32 [nx, scale_stride]: one per kI16ScaleGroup activations
  int64_t scale_stride;
  const float* bsum;  // f32 [nx, bsum_stride]: one per 32 activations
  int64_t bsum_stride;
};

// out[r * out_stride] = sum_i dequant(w)[i] * scale[r][i / 128] * xq[r][i] for
// r < nx (1..kQuantDotI16Rows): one weight row of n elements against nx int16 rows.
using QuantDotI16RowsFn = void (*)(const void* w, const I16Rows& x, int nx, int64_t n,
                                   float* out, int64_t out_stride);

// The kernel for `type` at `isa` (a resolved level), or nullptr: AVX2 has Q8_0, Q5_0 and Q4_1;
// AVX-512 (and VNNI, with vpdpwssd) adds Q4_K and Q6_K. Defined in cpu_quant_dot_dispatch.cc.
QuantDotI16Fn FusedQuantDotI16(DType type, CpuIsa isa);
// The level whose variant FusedQuantDotI16(type, isa) returns, or "" for none.
std::string_view FusedQuantDotI16Level(DType type, CpuIsa isa);

// The multi-row kernel for `type` at `isa`, or nullptr (AVX-512 levels have Q8_0, Q5_0, Q4_K and
// Q6_K; LinearInt16Rows runs the other types' parts on the f32-activation kernels).
QuantDotI16RowsFn FusedQuantDotI16Rows(DType type, CpuIsa isa);
std::string_view FusedQuantDotI16RowsLevel(DType type, CpuIsa isa);

}  // namespace uniprefill::ops::cpu
