// Batched-rows kernels with the activation rows in the vector lanes ("lanes" kernels): 16 int16
// activation rows transposed so that one zmm holds the same pair of activations of every row,
// multiplied by one weight pair broadcast from memory (vpdpwssd {1to16}).
//
// Why: the multi-row kernels of cpu_quant_dot_i16.h keep one weight block in a register and pay,
// per activation row and 32-weight block, a multiply-add, an int -> float conversion and an FMA
// with the block scale (3 vector ops for 32 multiply-adds). A 16-request decode step spends a
// third of its time in the Q8_0 output head that way (docs/performance.md). With the rows in the
// lanes the block's 16 multiply-adds accumulate in int32 for all 16 rows at once and the
// conversion and the block-scale FMA are paid once per 16 rows: ~19 ops per 512 multiply-adds
// instead of ~48.
// Q8_0 reads the same activations as bytes instead (xb): x + 32768 split into a high and a low
// byte, so vpdpbusd multiplies the file's int8 quants as stored, one broadcast feeding two of them
// and no decode to int16: sum(w x) = 256 sum(w hi) + sum(w lo) - 32768 sum(w), exact in int32
// (1.22-1.25x the pairs on Gemma 3's head, tools/cpu/lanes_bytes_probe.cc).
// What is not here: K-quants (their sub-block scales and Q4_K's mins), int8 activations.
// Same arithmetic as the multi-row kernels (the block sums are exact in int32, only the f32
// summation order differs), on the same quantised rows (QuantizeRowI16Groups).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/cpu_isa.h"
#include "core/dtype.h"
#include "ops/cpu/cpu_quant_dot_i16.h"
#include "ops/ops.h"

namespace uniprefill::ops::cpu {

// Activation rows per lanes call: one zmm of int32 pairs.
inline constexpr int kI16Lanes = 16;

// Up to kI16Lanes int16 rows (I16Rows) transposed. Lanes past the call's rows are zero.
struct I16Lanes {
  const int32_t* xq;   // [n / 2, kI16Lanes]: lane r = row r's (xq[2k], xq[2k + 1]), low word first
  // [n / 4, 2, kI16Lanes]: for quad k, lane r = the low bytes of row r's xq[4k .. 4k + 3] + 32768
  // (first element in the lowest byte), then the same lanes of their high bytes.
  const uint32_t* xb;
  const float* scale;  // f32 [groups, kI16Lanes]: row r's scale of group g (kI16ScaleGroup)
};

// The storage behind an I16Lanes.
struct I16LanesBuffer {
  std::vector<int32_t> xq;
  std::vector<uint32_t> xb;
  std::vector<float> scale;
  I16Lanes View() const { return {xq.data(), xb.data(), scale.data()}; }
};

// The layouts of I16Lanes (bit flags): the int16 pairs (xq) and the bytes (xb).
enum I16LanesLayout : unsigned { kI16LanesPairs = 1u, kI16LanesBytes = 2u };
// The layout the lanes kernel of `type` reads: the bytes for Q8_0, the pairs for the others.
I16LanesLayout I16LanesLayoutOf(DType type);

// Rows 0 .. nx (nx <= kI16Lanes) of x (n a multiple of 32) into lanes, in the layouts of
// `layouts` (a union of I16LanesLayout; a layout not asked for is left empty) and the scales; the
// other lanes stay zero (their results are never read).
void TransposeRowsI16(const I16Rows& x, int nx, int64_t n, I16LanesBuffer* lanes,
                      unsigned layouts = kI16LanesPairs | kI16LanesBytes);

// out[r * os + o] = sum_i dequant(w row o)[i] * scale[r][i / kI16ScaleGroup] * xq[r][i] for
// o < nw weight rows (row o at w + o * row_bytes) and r < nlanes: nw weight rows of n elements
// (a multiple of 32) against the lanes of x. block_sums: the rows' Q8_0 block quant sums
// (int16 [nw, n / 32], AttachBlockQuantSums) for the Q8_0 kernel, or nullptr (it sums them
// itself; the outputs are the same bits); other types ignore it.
using QuantDotI16LanesFn = void (*)(const void* w, int64_t row_bytes, const int16_t* block_sums,
                                    int nw, const I16Lanes& x, int nlanes, int64_t n, float* out,
                                    int64_t os);

// The lanes kernel for `type` at `isa`, or nullptr: VNNI levels have Q8_0 and Q5_0 (the
// broadcast multiply-add is vpdpwssd's; AVX-512 without VNNI has no broadcast vpmaddwd).
// Defined in cpu_quant_dot_dispatch.cc.
QuantDotI16LanesFn FusedQuantDotI16Lanes(DType type, CpuIsa isa);
std::string_view FusedQuantDotI16LanesLevel(DType type, CpuIsa isa);

// The sums of every 32-quant block of a Q8_0 weight's rows: int16 [rows, n / 32] (each in
// [-4096, 4064]). The Q8_0 lanes kernel subtracts 32768 x that sum from each block's product; a
// table made once saves it a vpsadbw and a horizontal add per block and weight row (the head of a
// 16-request decode step: tools/cpu/lanes_bytes_probe.cc measured ~1.2x without the term).
std::vector<int16_t> BlockQuantSums(const uint8_t* q8_0_rows, int64_t rows, int64_t n);

// Fills w.block_quant_sums for its Q8_0 parts where `isa` has the Q8_0 lanes kernel and the
// weight runs int16 activations (2 bytes per 34-byte block); leaves it empty otherwise.
void AttachBlockQuantSums(LinearWeight& w, CpuIsa isa);

}  // namespace uniprefill::ops::cpu
