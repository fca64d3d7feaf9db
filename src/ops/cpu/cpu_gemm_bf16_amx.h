// The AMX pieces of the bf16 prefill GEMM (cpu_linear_bf16.h): converting activation rows to bf16,
// packing weight columns into AMX's pair-interleaved tile layout, and the tile loop itself.
//
// Why AMX: one tdpbf16ps multiplies a 16 x 32 bf16 tile by a 32 x 16 one into 16 x 16 f32 sums,
// 8192 multiply-adds in one instruction; on the 2-core Xeon of 2026-12-03 this kernel ran 270-290
// GFLOP/s on one core for Gemma 3 270M's shapes (a 512-row chunk), against 116-122 for OpenBLAS
// sgemm on the f32 weight copies the default path has to keep.
// Layout: A is the activations, bf16 [rows, in] row-major, rows padded with zeros to a multiple of
// kAmxRowsBlock; B is a panel of kAmxPanelCols weight rows (output columns), bf16, as tdpbf16ps
// wants its second operand: for every 32 inputs s and every 16 columns j a 16 x 16 array of
// 32-bit pairs, pair (kp, c) = (w[16j + c][32s + 2kp], w[16j + c][32s + 2kp + 1]); C, f32 16 x 16,
// is stored straight into the output rows.
// Include only from baseline files that call these functions after ResolveCpuIsa granted
// kAmxBf16 (DetectCpuFeatures asked the OS for the tile state's permission); the definitions are
// compiled with the AMX flags and nothing else of the engine is.
// Non-goals: inputs that are not a multiple of 32 (the caller keeps its other paths there).
#pragma once

#include <cstdint>

namespace uniprefill::ops::cpu::amx {

// Output columns per panel (two 16-column B tiles) and activation rows per pass (two A tiles):
// the 2 x 2 C tiles, 2 A and 2 B tiles are the 8 tile registers.
inline constexpr int kAmxPanelCols = 32;
inline constexpr int kAmxRowsBlock = 32;

// bf16 elements of one panel of `in` inputs.
inline constexpr int64_t PanelElements(int64_t in) { return kAmxPanelCols * in; }

// Loads this thread's tile configuration (every tile 16 rows x 64 bytes); ReleaseTiles returns
// the tile state to its initial, empty form. Each thread that runs GemmPanel brackets it so.
void ConfigureTiles();
void ReleaseTiles();

// dst bf16 [rows, in] = x f32 [rows, in] (row stride xs) rounded to nearest even; in % 32 == 0.
void ConvertRowsBf16(const float* x, int64_t xs, int64_t rows, int64_t in, uint16_t* dst);

// panel (PanelElements(in) bf16, layout above) from w f32 [cols, in] (row-major), cols <= 32; the
// columns from `cols` to 32 are zero.
void PackPanelBf16(const float* w, int cols, int64_t in, uint16_t* panel);

// PackPanelBf16 from row pointers: column c is rows[c][0, in) (any strides, e.g. the keys of a
// paged cache's blocks; the same bytes as PackPanelBf16 of those rows), cols <= 32.
void PackPanelRowsBf16(const float* const* rows, int cols, int64_t in, uint16_t* panel);

// The panels of B = X [n, width] (rows[j] = row j of X, j < n) for a product P X (P [m, n]): the
// inputs are X's rows, paired (2kp, 2kp + 1) per 32 rows s, and the columns X's width in panels
// of 32: panel p (PanelElements(RoundUp(n, 32)) bf16 each, one after another) holds columns
// [32p, 32p + 32). Rows from n up to the multiple of 32 are zero. width % 32 == 0.
void PackPairsByRowsBf16(const float* const* rows, int n, int width, uint16_t* panels);

// out f32 [rows, cols] (row stride os) = a bf16 [rows, in] @ panel's columns^T, f32 sums; a has
// rows rounded up to kAmxRowsBlock (the padding rows are read, their results dropped); cols <= 32.
// Needs ConfigureTiles on this thread.
void GemmPanel(const uint16_t* a, int64_t rows, int64_t in, const uint16_t* panel, int cols,
               float* out, int64_t os);

// The few-rows layout (cpu_linear_bf16.h, batched decode): the weights are the first operand.
// Weight rows per pass: three 16-row A tiles against one B tile of 16 tokens into three C
// tiles; the B tile alternates between two registers. Why three, not four: a tile load waits
// until every tdpbf16ps reading the register it overwrites has finished, and with four C tiles
// one register had to take two A tiles a step, so each step's first load waited on the last
// product of the step before (the tile rate halved on the Xeon of 2026-12-03).
inline constexpr int kAmxWeightRowsBlock = 48;

// Inputs per weight chunk: the few-rows path dequantises 48 rows x 256 inputs (24 KB of bf16,
// inside L1) and runs its 8 tile steps before the next chunk, so the A tiles never come from L2
// (reading them from a 64 x 640 block in L2 was a third slower on the Xeon of 2026-12-03).
inline constexpr int64_t kAmxWeightChunk = 256;

// sums f32 [3][16 x 16] (tile i: weight rows [16i, 16i + 16) x 16 tokens, row-major) +=
// w bf16 [48, k] (row stride w_stride elements) @ the 16 tokens' pairs: the B tile of inputs
// [32s, 32s + 32) at x_tiles + s * x_step (bf16 elements; a panel of PackPanelRowsBf16 holds
// tokens 0..15 at offset 0 and 16..31 at offset 512, with x_step 1024); k % 32 == 0.
// The sums are tiles 0..2 while the call runs: `start` says where they come from, `store`
// whether they go back to `sums` after (else they stay in the tiles for the next call, which
// nothing between the two may touch). Needs ConfigureTiles on this thread.
enum class SumsStart { kZero, kInTiles, kFromMemory };
void AccumulateWeightRows48(const uint16_t* w, int64_t w_stride, int64_t k,
                            const uint16_t* x_tiles, int64_t x_step, float* sums,
                            SumsStart start, bool store);

// out[t * os + c] = sums (AccumulateWeightRows48's) of weight row c and token t, for c < n (<= 48)
// and t < tokens (<= 16).
void StoreTransposed(const float* sums, int n, int tokens, float* out, int64_t os);

}  // namespace uniprefill::ops::cpu::amx
