// Q8_0 weights times a few activation rows on AMX int8 tiles (tdpbssd), read straight from the
// stored blocks: the batched decode steps of --prefill-gemm bf16 (cpu_linear_bf16.h) for Q8_0
// weights, Gemma 3 270M's 178 MB output head above all.
//
// Why not the bf16 tiles there: converting every Q8_0 weight to bf16 each step (int8 -> f32 ->
// scaled -> bf16) was most of a 16-request decode step's linear time on the Xeon of 2026-12-03;
// a Q8_0 block's 32 int8 values are already a tile row of int8 (16 rows 680 bytes apart for a
// 640-input row), so the tiles load them in place and only the sums are scaled.
// Arithmetic: activations quantised per token and per 32 inputs to int8 (scale max|x| / 127,
// round to nearest), like llama.cpp's q8_0 x q8_0 dot; each block's exact int32 sum is scaled
// by the weight's and the activation's block scales and added in f32.
// Layout: B (the tokens' int8 values, for tdpbssd): per 32-input block s, 8 rows of 64 bytes,
// row kq holding 16 tokens' 4 bytes (inputs 32s + 4kq .. + 3), 512 bytes a block; the scales
// f32 [blocks][16 tokens].
// Include only from baseline files that call these after ResolveCpuIsa granted kAmxBf16 (the
// level checks AMX-TILE and AMX-BF16; AMX-INT8 comes with both on every CPU that has them, and
// DetectCpuFeatures asks for it too).
#pragma once

#include <cstdint>

namespace uniprefill::ops::cpu::amx {

// Tokens per B tile and weight rows per A tile.
inline constexpr int kQ8TileRows = 16;

// bytes of B tiles for `in` inputs, and f32 scales.
inline constexpr int64_t Q8TokenTileBytes(int64_t in) { return in / 32 * 512; }
inline constexpr int64_t Q8TokenScales(int64_t in) { return in / 32 * 16; }

// Loads this thread's int8 tile configuration (C 16 x 64 bytes, A 16 x 32, B 8 x 64); pair with
// ReleaseTiles (cpu_gemm_bf16_amx.h).
void ConfigureTilesQ8();

// tiles (Q8TokenTileBytes(in)) and scales (Q8TokenScales(in)) for tokens x f32 [tokens, in]
// (row stride xs), tokens <= 16 (the rest zero); in % 32 == 0.
void QuantizeTokensQ8(const float* x, int64_t xs, int tokens, int64_t in, int8_t* tiles,
                      float* scales);

// out f32 [16 rows][16 tokens] (64-byte aligned) = 16 Q8_0 weight rows (the first at w,
// row_bytes apart, `in` inputs each) times the tokens of QuantizeTokensQ8. All 16 rows are read:
// the caller pads a short tail. The prefetch_bytes from `prefetch` (the next rows; may be null)
// are asked for along the way. Needs ConfigureTilesQ8 on this thread.
void Q8RowsTimesTokens(const uint8_t* w, int64_t row_bytes, int64_t in, const int8_t* tiles,
                       const float* scales, const uint8_t* prefetch, int64_t prefetch_bytes,
                       float* out);

}  // namespace uniprefill::ops::cpu::amx
