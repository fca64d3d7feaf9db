// The VNNI lanes kernels (QuantDotI16LanesFn, cpu_quant_lanes_i16.h). Included only by
// cpu_quant_dot_i16_avx512_vnni.cc after cpu_quant_rows_i16_avx512_kernels.h (its block decoders
// DecodeQ8_0 / DecodeQ5_0), so the code is compiled with the VNNI flags alone.
//
// Q8_0 runs LanesQ8_0Bytes (below: the quants as stored against the activations' bytes); Q5_0
// runs LanesBlocks32. Its loop: kLanesW weight rows at a time; per scale group (kI16ScaleGroup
// weights, <= 8 blocks) their blocks are decoded once to int16 pairs on the stack (L1), then per
// 32-weight block the 16 activation pairs of the 16 rows (16 zmm, loaded once per pass) and each
// weight row runs 16 vpdpwssd with its pairs broadcast from the stack: an exact int32 block sum
// per row (<= 32 * 128 * 32767 = 1.3e8, no overflow), then one conversion, one multiply (block
// scale times the rows' group scales) and one FMA per weight row and 16 rows.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "ops/cpu/cpu_quant_lanes_i16.h"

#if !defined(__AVX512VNNI__)
#error "the lanes kernels need vpdpwssd's broadcast operand (-mavx512vnni)"
#endif

namespace uniprefill::ops::cpu {
namespace {

// Weight rows per pass: 8 independent vpdpwssd chains (4 left the multiply-adds waiting on
// their latency); their int32 block sums and f32 totals (2 zmm each) sit next to half a block's
// 8 activation-pair registers within the 32 zmm.
constexpr int kLanesW = 8;

template <int kBlockBytes, __m512i (*Decode)(const uint8_t*)>
void LanesBlocks32(const void* w, int64_t row_bytes, const int16_t* /*block_sums: Q8_0's*/,
                   int nw, const I16Lanes& x, int nlanes, int64_t n, float* out, int64_t os) {
  constexpr int kGroupBlocks = static_cast<int>(kI16ScaleGroup / 32);
  const uint8_t* base = static_cast<const uint8_t*>(w);
  for (int o0 = 0; o0 < nw; o0 += kLanesW) {
    // Rows past nw repeat the last one (results dropped): the loops keep a fixed width.
    const uint8_t* rows[kLanesW];
    for (int j = 0; j < kLanesW; ++j) rows[j] = base + std::min(o0 + j, nw - 1) * row_bytes;
    __m512 total[kLanesW];
    for (int j = 0; j < kLanesW; ++j) total[j] = _mm512_setzero_ps();
    for (int64_t g0 = 0; g0 < n; g0 += kI16ScaleGroup) {
      const int nb = static_cast<int>(std::min(kI16ScaleGroup, n - g0) / 32);
      // int16 pairs [kLanesW, group] and f32 block scales [kLanesW, blocks] of this group.
      alignas(64) int32_t wq[kLanesW][kI16ScaleGroup / 2];
      alignas(64) float d[kLanesW][kGroupBlocks];
      for (int j = 0; j < kLanesW; ++j) {
        const uint8_t* b = rows[j] + (g0 / 32) * kBlockBytes;
        for (int k = 0; k < nb; ++k, b += kBlockBytes) {
          _mm512_store_si512(&wq[j][16 * k], Decode(b));
          d[j][k] = Half(b);
        }
      }
      const __m512 s = _mm512_loadu_ps(x.scale + (g0 / kI16ScaleGroup) * kI16Lanes);
      for (int k = 0; k < nb; ++k) {
        // The next pass's rows (past nw: the caller's next tile, the same thread's next rows):
        // the block decode above would otherwise wait on memory with nothing to overlap it.
        for (int j = 0; j < kLanesW; ++j) {
          const uint8_t* next = base + (o0 + kLanesW + j) * row_bytes + (g0 / 32 + k) * kBlockBytes;
          _mm_prefetch(reinterpret_cast<const char*>(next), _MM_HINT_T0);
        }
        const int32_t* xb = x.xq + (g0 / 2 + 16 * k) * kI16Lanes;
        __m512i sum[kLanesW];
        for (int j = 0; j < kLanesW; ++j) sum[j] = _mm512_setzero_si512();
        for (int h = 0; h < 16; h += 8) {  // half a block's pairs at a time: 8 registers
          __m512i xp[8];
          for (int p = 0; p < 8; ++p) xp[p] = _mm512_loadu_si512(xb + (h + p) * kI16Lanes);
          for (int p = 0; p < 8; ++p) {
            for (int j = 0; j < kLanesW; ++j) {
              sum[j] =
                  _mm512_dpwssd_epi32(sum[j], xp[p], _mm512_set1_epi32(wq[j][16 * k + h + p]));
            }
          }
        }
        for (int j = 0; j < kLanesW; ++j) {
          const __m512 ds = _mm512_mul_ps(_mm512_set1_ps(d[j][k]), s);
          total[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[j]), ds, total[j]);
        }
      }
    }
    for (int j = 0; j < kLanesW && o0 + j < nw; ++j) {
      alignas(64) float lane[kI16Lanes];
      _mm512_store_ps(lane, total[j]);
      for (int r = 0; r < nlanes; ++r) out[r * os + o0 + j] = lane[r];
    }
  }
}

// The sum of a Q8_0 block's 32 signed quants: vpsadbw of the quants biased to unsigned.
inline int BlockQuantSum(const uint8_t* quants) {
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(quants));
  const __m256i t = _mm256_sad_epu8(_mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80))),
                                    _mm256_setzero_si256());
  const __m128i u = _mm_add_epi64(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
  return static_cast<int>(_mm_cvtsi128_si64(_mm_add_epi64(u, _mm_unpackhi_epi64(u, u)))) -
         32 * 128;
}

// Q8_0 on the byte lanes (I16Lanes::xb): per 32-weight block and weight row, 8 broadcasts of 4
// quants, each multiplied by the 16 rows' low and high bytes (vpdpbusd: unsigned activation bytes
// by signed quants), then sum = 256 hi + lo - 32768 sum(q): the pairs kernel's exact block sum,
// with the same f32 steps after it, so the outputs are LanesBlocks32's bit for bit. Four weight
// rows a pass (eight spilled registers and ran slower: tools/cpu/lanes_bytes_probe.cc). sum(q)
// comes from the load-time table where there is one (AttachBlockQuantSums), else from vpsadbw.
constexpr int kBytesW = 4;

void LanesQ8_0Bytes(const void* w, int64_t row_bytes, const int16_t* block_sums, int nw,
                    const I16Lanes& x, int nlanes, int64_t n, float* out, int64_t os) {
  constexpr int kBlockBytes = 34;
  const uint8_t* base = static_cast<const uint8_t*>(w);
  const int64_t blocks = n / 32;
  for (int o0 = 0; o0 < nw; o0 += kBytesW) {
    // Rows past nw repeat the last one (results dropped): the loops keep a fixed width.
    const uint8_t* rows[kBytesW];
    const int16_t* sums[kBytesW];
    for (int j = 0; j < kBytesW; ++j) {
      const int o = std::min(o0 + j, nw - 1);
      rows[j] = base + o * row_bytes;
      sums[j] = block_sums != nullptr ? block_sums + o * blocks : nullptr;
    }
    __m512 total[kBytesW];
    for (int j = 0; j < kBytesW; ++j) total[j] = _mm512_setzero_ps();
    for (int64_t g0 = 0; g0 < n; g0 += kI16ScaleGroup) {
      const int nb = static_cast<int>(std::min(kI16ScaleGroup, n - g0) / 32);
      const __m512 s = _mm512_loadu_ps(x.scale + (g0 / kI16ScaleGroup) * kI16Lanes);
      for (int k = 0; k < nb; ++k) {
        const int64_t block = g0 / 32 + k;
        // The next pass's rows (past nw: the caller's next tile, the same thread's next rows).
        for (int j = 0; j < kBytesW; ++j) {
          const uint8_t* next = base + (o0 + kBytesW + j) * row_bytes + block * kBlockBytes;
          _mm_prefetch(reinterpret_cast<const char*>(next), _MM_HINT_T0);
        }
        __m512i lo[kBytesW], hi[kBytesW];
        for (int j = 0; j < kBytesW; ++j) lo[j] = hi[j] = _mm512_setzero_si512();
        const uint32_t* xb = x.xb + block * 8 * 2 * kI16Lanes;  // 8 quads of 2 x 16 lanes
        for (int p = 0; p < 8; ++p) {
          const __m512i xl = _mm512_loadu_si512(xb + (2 * p) * kI16Lanes);
          const __m512i xh = _mm512_loadu_si512(xb + (2 * p + 1) * kI16Lanes);
          for (int j = 0; j < kBytesW; ++j) {
            int32_t quad;
            std::memcpy(&quad, rows[j] + block * kBlockBytes + 2 + 4 * p, sizeof(quad));
            const __m512i wq = _mm512_set1_epi32(quad);
            lo[j] = _mm512_dpbusd_epi32(lo[j], xl, wq);
            hi[j] = _mm512_dpbusd_epi32(hi[j], xh, wq);
          }
        }
        for (int j = 0; j < kBytesW; ++j) {
          const uint8_t* b = rows[j] + block * kBlockBytes;
          const int quant_sum = block_sums != nullptr ? sums[j][block] : BlockQuantSum(b + 2);
          const __m512i sum =
              _mm512_sub_epi32(_mm512_add_epi32(_mm512_slli_epi32(hi[j], 8), lo[j]),
                               _mm512_set1_epi32(quant_sum * 32768));
          const __m512 ds = _mm512_mul_ps(_mm512_set1_ps(Half(b)), s);
          total[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), ds, total[j]);
        }
      }
    }
    for (int j = 0; j < kBytesW && o0 + j < nw; ++j) {
      alignas(64) float lane[kI16Lanes];
      _mm512_store_ps(lane, total[j]);
      for (int r = 0; r < nlanes; ++r) out[r * os + o0 + j] = lane[r];
    }
  }
}

// This file's lanes kernel for `type`, or nullptr.
QuantDotI16LanesFn LookupI16LanesKernel(DType type) {
  switch (type) {
    case DType::kQ8_0:
      return &LanesQ8_0Bytes;
    case DType::kQ5_0:
      return &LanesBlocks32<22, DecodeQ5_0>;
    default:
      return nullptr;
  }
}

}  // namespace
}  // namespace uniprefill::ops::cpu
