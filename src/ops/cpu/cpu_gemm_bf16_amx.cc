// cpu_gemm_bf16_amx.h, compiled with the AVX-512 BF16 and AMX flags (CMakeLists: *_amx.cc).
// Nothing here is inline in a header or a template of the engine's: no code compiled with these
// flags can be picked by the linker for a caller on a CPU without them.
#include "ops/cpu/cpu_gemm_bf16_amx.h"

#include "ops/cpu/cpu_amx_tile_config.h"
#include "ops/cpu/cpu_avx512_common.h"

namespace uniprefill::ops::cpu::amx {
namespace {

// Tile registers: C (f32 sums) 0..3, A (activation rows) 4..5, B (weight pairs) 6..7.
constexpr int kBytesPerTileRow = 64;

// 32 f32 -> 32 bf16 (round to nearest even) as one zmm of 16 pairs.
inline __m512i PairsBf16(const float* p) {
  const __m512 lo = _mm512_loadu_ps(p), hi = _mm512_loadu_ps(p + 16);
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
}

// out rows [0, nr) x cols [0, nc) from a 16 x 16 f32 tile stored at t (64-byte rows).
inline void CopyTile(const float* t, int nr, int nc, float* out, int64_t os) {
  const __mmask16 m = static_cast<__mmask16>((1u << nc) - 1u);
  for (int r = 0; r < nr; ++r) _mm512_mask_storeu_ps(out + r * os, m, _mm512_load_ps(t + 16 * r));
}

}  // namespace

void ConfigureTiles() {
  TileConfig cfg;
  for (int i = 0; i < 8; ++i) {
    cfg.rows[i] = 16;
    cfg.colsb[i] = kBytesPerTileRow;
  }
  LoadTileConfig(cfg);
}

void ReleaseTiles() { _tile_release(); }

void ConvertRowsBf16(const float* x, int64_t xs, int64_t rows, int64_t in, uint16_t* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < in; k += 32) {
      _mm512_storeu_si512(dst + r * in + k, PairsBf16(x + r * xs + k));
    }
  }
}

void PackPanelBf16(const float* w, int cols, int64_t in, uint16_t* panel) {
  const float* rows[kAmxPanelCols];
  for (int c = 0; c < cols; ++c) rows[c] = w + c * in;
  PackPanelRowsBf16(rows, cols, in, panel);
}

void PackPairsByRowsBf16(const float* const* rows, int n, int width, uint16_t* panels) {
  const int64_t n_pad = (n + 31) / 32 * 32;
  const int64_t panel_elems = PanelElements(n_pad);
  // [lo0, hi0, lo1, hi1, ...] from [lo0..lo15, hi0..hi15]: each 32-bit pair is (row 2kp, 2kp + 1).
  const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25,
                                              9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2,
                                              17, 1, 16, 0);
  for (int64_t r = 0; r < n_pad; r += 2) {
    const int64_t s = r / 32, kp = (r % 32) / 2;
    const float* r0 = r < n ? rows[r] : nullptr;
    const float* r1 = r + 1 < n ? rows[r + 1] : nullptr;
    for (int cb = 0; cb < width / 16; ++cb) {
      const __m512 lo = r0 ? _mm512_loadu_ps(r0 + 16 * cb) : _mm512_setzero_ps();
      const __m512 hi = r1 ? _mm512_loadu_ps(r1 + 16 * cb) : _mm512_setzero_ps();
      const __m512i both = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
      uint16_t* dst = panels + (cb / 2) * panel_elems + ((s * 2 + cb % 2) * 16 + kp) * 32;
      _mm512_storeu_si512(dst, _mm512_permutexvar_epi16(interleave, both));
    }
  }
}

void PackPanelRowsBf16(const float* const* rows, int cols, int64_t in, uint16_t* panel) {
  // Pair kp of column c for inputs 32s.. goes to 32-bit word ((s * 2 + c / 16) * 16 + kp) * 16 +
  // c % 16: a column's 16 pairs of one s are 64 bytes apart (one tile row each).
  uint32_t* words = reinterpret_cast<uint32_t*>(panel);
  const __m512i tile_rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7,
                                                                6, 5, 4, 3, 2, 1, 0),
                                               _mm512_set1_epi32(16));
  const int64_t steps = in / 32;
  for (int c = 0; c < kAmxPanelCols; ++c) {
    for (int64_t s = 0; s < steps; ++s) {
      uint32_t* base = words + ((s * 2 + c / 16) * 16) * 16 + c % 16;
      const __m512i pairs = c < cols ? PairsBf16(rows[c] + 32 * s) : _mm512_setzero_si512();
      _mm512_i32scatter_epi32(base, tile_rows, pairs, 4);
    }
  }
}

void GemmPanel(const uint16_t* a, int64_t rows, int64_t in, const uint16_t* panel, int cols,
               float* out, int64_t os) {
  const int64_t steps = in / 32;
  const int64_t a_stride = in * 2;  // bytes per activation row
  alignas(64) float c_tiles[4][16 * 16];
  for (int64_t t0 = 0; t0 < rows; t0 += kAmxRowsBlock) {
    const uint16_t* a0 = a + t0 * in;
    const uint16_t* a1 = a0 + 16 * in;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t s = 0; s < steps; ++s) {
      _tile_loadd(4, a0 + 32 * s, a_stride);
      _tile_loadd(5, a1 + 32 * s, a_stride);
      _tile_loadd(6, panel + (s * 2) * 512, kBytesPerTileRow);
      _tile_loadd(7, panel + (s * 2 + 1) * 512, kBytesPerTileRow);
      _tile_dpbf16ps(0, 4, 6);  // rows t0.., columns 0..15
      _tile_dpbf16ps(1, 4, 7);  // rows t0.., columns 16..31
      _tile_dpbf16ps(2, 5, 6);  // rows t0 + 16.., columns 0..15
      _tile_dpbf16ps(3, 5, 7);  // rows t0 + 16.., columns 16..31
    }
    float* o = out + t0 * os;
    const int64_t os_bytes = os * 4;
    if (t0 + kAmxRowsBlock <= rows && cols == kAmxPanelCols) {
      _tile_stored(0, o, os_bytes);
      _tile_stored(1, o + 16, os_bytes);
      _tile_stored(2, o + 16 * os, os_bytes);
      _tile_stored(3, o + 16 * os + 16, os_bytes);
      continue;
    }
    _tile_stored(0, c_tiles[0], kBytesPerTileRow);
    _tile_stored(1, c_tiles[1], kBytesPerTileRow);
    _tile_stored(2, c_tiles[2], kBytesPerTileRow);
    _tile_stored(3, c_tiles[3], kBytesPerTileRow);
    for (int i = 0; i < 4; ++i) {
      const int64_t r0 = t0 + (i / 2) * 16;
      const int c0 = (i % 2) * 16;
      const int nr = static_cast<int>(rows - r0 < 16 ? rows - r0 : 16);
      const int nc = cols - c0 < 16 ? cols - c0 : 16;
      if (nr > 0 && nc > 0) CopyTile(c_tiles[i], nr, nc, out + r0 * os + c0, os);
    }
  }
}

// One 32-input step of AccumulateWeightRows48: the 16 tokens' pairs into tile B, then each 16
// weight rows into 3, 4, 5 and their product into C tile 0, 1, 2 as soon as they are in. A macro
// because GCC's tile intrinsics paste their register numbers into the asm: literals only.
#define UP_WEIGHT_ROWS48_STEP(B, step)                            \
  do {                                                            \
    _tile_loadd(B, x_tiles + (step) * x_step, kBytesPerTileRow);  \
    _tile_loadd(3, w + 32 * (step), w_bytes);                     \
    _tile_dpbf16ps(0, 3, B);                                      \
    _tile_loadd(4, w16 + 32 * (step), w_bytes);                   \
    _tile_dpbf16ps(1, 4, B);                                      \
    _tile_loadd(5, w32 + 32 * (step), w_bytes);                   \
    _tile_dpbf16ps(2, 5, B);                                      \
  } while (0)

void AccumulateWeightRows48(const uint16_t* w, int64_t w_stride, int64_t k,
                            const uint16_t* x_tiles, int64_t x_step, float* sums,
                            SumsStart start, bool store) {
  const int64_t steps = k / 32;
  const int64_t w_bytes = w_stride * 2;  // bytes per weight row
  const uint16_t* w16 = w + 16 * w_stride;
  const uint16_t* w32 = w + 32 * w_stride;
  if (start == SumsStart::kFromMemory) {
    _tile_loadd(0, sums, kBytesPerTileRow);
    _tile_loadd(1, sums + 256, kBytesPerTileRow);
    _tile_loadd(2, sums + 512, kBytesPerTileRow);
  } else if (start == SumsStart::kZero) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
  }
  // Tiles 3, 4 and 5 take the weight rows, 6 and 7 the tokens of even and odd steps: every load
  // overwrites a register whose last reader was issued three products earlier.
  int64_t s = 0;
  for (; s + 2 <= steps; s += 2) {
    UP_WEIGHT_ROWS48_STEP(6, s);
    UP_WEIGHT_ROWS48_STEP(7, s + 1);
  }
  if (s < steps) UP_WEIGHT_ROWS48_STEP(6, s);
  if (store) {
    _tile_stored(0, sums, kBytesPerTileRow);
    _tile_stored(1, sums + 256, kBytesPerTileRow);
    _tile_stored(2, sums + 512, kBytesPerTileRow);
  }
}

void StoreTransposed(const float* sums, int n, int tokens, float* out, int64_t os) {
  // Weight row c of token t sits at sums[16c + t] (tiles of 16 rows one after another).
  const __m512i rows = _mm512_mullo_epi32(
      _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), _mm512_set1_epi32(16));
  for (int t = 0; t < tokens; ++t) {
    for (int c0 = 0; c0 < n; c0 += 16) {
      const __mmask16 m = static_cast<__mmask16>(n - c0 >= 16 ? 0xffffu : (1u << (n - c0)) - 1u);
      _mm512_mask_storeu_ps(out + t * os + c0, m,
                            _mm512_i32gather_ps(rows, sums + 16 * c0 + t, 4));
    }
  }
}

#undef UP_WEIGHT_ROWS48_STEP

}  // namespace uniprefill::ops::cpu::amx
