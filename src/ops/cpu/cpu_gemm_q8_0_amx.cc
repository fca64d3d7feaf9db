// cpu_gemm_q8_0_amx.h, compiled with the AMX flags (CMakeLists: *_amx.cc).
#include "ops/cpu/cpu_gemm_q8_0_amx.h"

#include <algorithm>

#include "ops/cpu/cpu_amx_tile_config.h"
#include "ops/cpu/cpu_avx512_common.h"

namespace uniprefill::ops::cpu::amx {
namespace {

constexpr int64_t kQ8BlockBytes = 34;  // f16 d, int8 qs[32]

// One block's product into C tile 0 (A 3, B 6) or 1 (A 4, B 7), zeroed first, and out to
// `c_out` (int32 [16 x 16]). GCC's tile intrinsics paste their register numbers into the asm,
// so they must be literals, not template arguments.
#define UP_Q8_BLOCK_PRODUCT(C, A, B)           \
  do {                                        \
    _tile_zero(C);                            \
    _tile_loadd(A, wb + 2, row_bytes);        \
    _tile_loadd(B, tiles + b * 512, 64);      \
    _tile_dpbssd(C, A, B);                    \
    _tile_stored(C, c[b % 2], 64);            \
  } while (0)

// acc[r] += c[r] (int32 sums of weight row r, 16 tokens) * d_r * the tokens' scales, where d_r is
// the f16 scale of row r's block at `w_block` (rows row_bytes apart).
inline void ScaleAndAdd(const int32_t* c, const uint8_t* w_block, const __m512i& row_offsets,
                        const float* token_scales, __m512* acc) {
  // Each row's 4 bytes from its block's start: the f16 scale and the first two values.
  const __m512i raw = _mm512_i32gather_epi32(row_offsets, w_block, 1);
  alignas(64) float d[kQ8TileRows];
  _mm512_store_ps(d, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(raw)));
  const __m512 xs = _mm512_loadu_ps(token_scales);
  for (int r = 0; r < kQ8TileRows; ++r) {
    const __m512 sums = _mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * r));
    acc[r] = _mm512_fmadd_ps(sums, _mm512_mul_ps(xs, _mm512_set1_ps(d[r])), acc[r]);
  }
}

}  // namespace

void ConfigureTilesQ8() {
  TileConfig cfg;
  for (int i = 0; i < 3; ++i) {  // C: 16 rows x 16 int32
    cfg.rows[i] = 16;
    cfg.colsb[i] = 64;
  }
  for (int i = 3; i < 6; ++i) {  // A: 16 weight rows x 32 int8 (one Q8_0 block)
    cfg.rows[i] = 16;
    cfg.colsb[i] = 32;
  }
  for (int i = 6; i < 8; ++i) {  // B: 8 rows of 16 tokens x 4 int8
    cfg.rows[i] = 8;
    cfg.colsb[i] = 64;
  }
  LoadTileConfig(cfg);
}

void QuantizeTokensQ8(const float* x, int64_t xs, int tokens, int64_t in, int8_t* tiles,
                      float* scales) {
  const int64_t blocks = in / 32;
  std::memset(tiles, 0, static_cast<size_t>(Q8TokenTileBytes(in)));
  std::memset(scales, 0, sizeof(float) * static_cast<size_t>(Q8TokenScales(in)));
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (int t = 0; t < tokens; ++t) {
    for (int64_t s = 0; s < blocks; ++s) {
      const float* p = x + t * xs + 32 * s;
      const __m512 lo = _mm512_loadu_ps(p), hi = _mm512_loadu_ps(p + 16);
      const float amax = _mm512_reduce_max_ps(
          _mm512_max_ps(_mm512_and_ps(lo, abs_mask), _mm512_and_ps(hi, abs_mask)));
      if (amax == 0.0f) continue;  // zeros already
      const float inv = 127.0f / amax;
      scales[s * 16 + t] = amax / 127.0f;
      const __m512 vinv = _mm512_set1_ps(inv);
      // Round to nearest even (MXCSR's default), |q| <= 127.
      const __m128i q_lo = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(lo, vinv)));
      const __m128i q_hi = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(hi, vinv)));
      alignas(16) int32_t words[8];  // inputs 4kq .. 4kq + 3 as one 32-bit word each
      _mm_store_si128(reinterpret_cast<__m128i*>(words), q_lo);
      _mm_store_si128(reinterpret_cast<__m128i*>(words + 4), q_hi);
      int8_t* tile = tiles + s * 512 + 4 * t;
      for (int kq = 0; kq < 8; ++kq) std::memcpy(tile + 64 * kq, &words[kq], 4);
    }
  }
}

void Q8RowsTimesTokens(const uint8_t* w, int64_t row_bytes, int64_t in, const int8_t* tiles,
                       const float* scales, const uint8_t* prefetch, int64_t prefetch_bytes,
                       float* out) {
  const int64_t blocks = in / 32;
  const __m512i row_offsets = _mm512_mullo_epi32(
      _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
      _mm512_set1_epi32(static_cast<int32_t>(row_bytes)));
  // The next rows' bytes, spread over this call's blocks.
  const int64_t lines = (prefetch_bytes + 63) / 64;
  const int64_t lines_per_block = (lines + blocks - 1) / blocks;
  __m512 acc[kQ8TileRows];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  alignas(64) int32_t c[2][16 * 16];
  // Block b's product goes to C tile b % 2 while block b - 1's sums are scaled on the vector
  // units, so the tile unit and the vector units overlap.
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* wb = w + b * kQ8BlockBytes;
    if (b % 2 == 0) {
      UP_Q8_BLOCK_PRODUCT(0, 3, 6);
    } else {
      UP_Q8_BLOCK_PRODUCT(1, 4, 7);
    }
    if (prefetch != nullptr) {
      for (int64_t l = b * lines_per_block; l < std::min(lines, (b + 1) * lines_per_block); ++l) {
        _mm_prefetch(reinterpret_cast<const char*>(prefetch + 64 * l), _MM_HINT_T0);
      }
    }
    if (b > 0) {
      ScaleAndAdd(c[(b - 1) % 2], wb - kQ8BlockBytes, row_offsets, scales + (b - 1) * 16, acc);
    }
  }
  ScaleAndAdd(c[(blocks - 1) % 2], w + (blocks - 1) * kQ8BlockBytes, row_offsets,
              scales + (blocks - 1) * 16, acc);
  for (int r = 0; r < kQ8TileRows; ++r) _mm512_store_ps(out + 16 * r, acc[r]);
}

}  // namespace uniprefill::ops::cpu::amx
