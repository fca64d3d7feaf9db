// LinearBf16 (cpu_linear_bf16.h): the threads and the weights' dequantisation around the AMX tile
// loop (cpu_gemm_bf16_amx.h). Baseline flags: only the amx:: functions run tile instructions.
#include "ops/cpu/cpu_linear_bf16.h"

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <cstring>
#include <vector>

#include <xmmintrin.h>

#include "io/dequant.h"
#include "ops/cpu/cpu_dequant_bf16_amx.h"
#include "ops/cpu/cpu_gemm_bf16_amx.h"
#include "ops/cpu/cpu_gemm_q8_0_amx.h"

namespace uniprefill::ops::cpu {
namespace {

// The stored row of output column o (parts stacked along `out`).
const uint8_t* WeightRow(const LinearWeight& w, int64_t o, DType* type) {
  for (const TensorView& p : w.parts) {
    if (o < p.dim(0)) {
      *type = p.dtype;
      return static_cast<const uint8_t*>(p.data) + o * DTypeBytes(p.dtype, p.stride[0]);
    }
    o -= p.dim(0);
  }
  assert(false && "column outside the weight");
  return nullptr;
}

// Panels packed together before the activation rows pass: 4 x 32 columns of 2048 inputs are 512
// KB of bf16, inside a core's L2 (2 MB on the Xeon of 2026-12-03) with a 32-row block of
// activations (128 KB), so the activations stream from memory once per 128 columns, not 32.
constexpr int64_t kPanelsPerGroup = 4;

// One stored weight row (output column): its bytes, type, and the bytes of kAmxWeightChunk
// inputs (chunks are whole blocks of every type: DTypeBytes is too slow to ask per chunk).
struct StoredRow {
  const uint8_t* data;
  DType type;
  int64_t chunk_bytes;
};

// rows[c] = output column c0 + c's stored row, c < n (parts stacked along `out`).
void BlockRows(const LinearWeight& w, int64_t c0, int n, StoredRow* rows) {
  int64_t first = 0;  // the part's first output column
  int c = 0;
  for (const TensorView& p : w.parts) {
    if (c == n) break;
    if (c0 + c < first + p.dim(0)) {
      const int64_t row_bytes = DTypeBytes(p.dtype, p.stride[0]);
      const int64_t chunk_bytes = DTypeBytes(p.dtype, amx::kAmxWeightChunk);
      const uint8_t* base = static_cast<const uint8_t*>(p.data);
      for (; c < n && c0 + c < first + p.dim(0); ++c) {
        rows[c] = {base + (c0 + c - first) * row_bytes, p.dtype, chunk_bytes};
      }
    }
    first += p.dim(0);
  }
  assert(c == n);
}

// dst bf16 [k] = inputs [k0, k0 + k) of `row` (vector decoders where the type has one); k0 a
// multiple of kAmxWeightChunk, k of the type's block.
void WeightRowBf16(const StoredRow& row, int64_t k0, int64_t k, std::vector<float>& scratch,
                   uint16_t* dst) {
  const uint8_t* src = row.data + k0 / amx::kAmxWeightChunk * row.chunk_bytes;
  if (amx::HasDequantRowBf16(row.type)) {
    amx::DequantRowBf16(row.type, src, k, dst);
    return;
  }
  scratch.resize(k);
  const Status s = Dequantize(row.type, src, scratch.data(), k);
  assert(s.ok());
  (void)s;
  amx::ConvertRowsBf16(scratch.data(), k, 1, k, dst);
}

// Asks for the bytes of inputs [k0, k0 + k) of `row` to come into L2: the same chunk of the next
// block's rows, one block (~32 KB of Q8_0) ahead; the chunks hop between rows, which the
// hardware's stream prefetchers do not follow.
void PrefetchChunk(const StoredRow& row, int64_t k0, int64_t k) {
  const uint8_t* p = row.data + k0 / amx::kAmxWeightChunk * row.chunk_bytes;
  const int64_t bytes = row.chunk_bytes * k / amx::kAmxWeightChunk;
  for (int64_t off = 0; off < bytes; off += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T1);
  }
}

// LinearBf16 for kBf16FewRowsMax rows or fewer (batched decode steps): the weights are the
// tiles' first operand (48 output columns dequantised to bf16 rows, 256 inputs at a time, which
// is already the A layout) and the activation rows, 16 at a time, the packed second, so no
// weight is ever repacked; each 48 x 16 block of sums is transposed into out.
void LinearBf16FewRows(DeviceContext& ctx, TensorView out, TensorView x, const LinearWeight& w) {
  const int64_t T = x.dim(0), in = w.in_features, cols = w.out_features;
  const int64_t token_panels = (T + amx::kAmxPanelCols - 1) / amx::kAmxPanelCols;
  // x as tdpbf16ps's second operand: bf16, token_panels panels of 32 rows (zeros past T).
  std::vector<uint16_t> x_panels(token_panels * amx::PanelElements(in));
  for (int64_t p = 0; p < token_panels; ++p) {
    const int n = static_cast<int>(std::min<int64_t>(amx::kAmxPanelCols, T - p * 32));
    const float* rows[amx::kAmxPanelCols];
    for (int c = 0; c < n; ++c) rows[c] = x.as<float>() + (p * 32 + c) * x.stride[0];
    amx::PackPanelRowsBf16(rows, n, in, x_panels.data() + p * amx::PanelElements(in));
  }
  const int64_t groups = (T + 15) / 16;  // 16 tokens a B tile
  const int64_t blocks = (cols + amx::kAmxWeightRowsBlock - 1) / amx::kAmxWeightRowsBlock;
  ctx.pool().ParallelFor(blocks, 1, [&](int64_t begin, int64_t end, int) {
    constexpr int64_t kChunk = amx::kAmxWeightChunk;
    std::vector<uint16_t> chunk(amx::kAmxWeightRowsBlock * kChunk);  // bf16 [48, 256]
    std::vector<float> scratch;
    // f32 [groups][3][16 x 16]; with one group the sums stay in the tiles between chunks.
    std::vector<float> sums(groups * amx::kAmxWeightRowsBlock * 16);
    amx::ConfigureTiles();
    StoredRow rows[amx::kAmxWeightRowsBlock], next[amx::kAmxWeightRowsBlock];
    for (int64_t b = begin; b < end; ++b) {
      const int64_t c0 = b * amx::kAmxWeightRowsBlock;
      const int n = static_cast<int>(std::min<int64_t>(amx::kAmxWeightRowsBlock, cols - c0));
      const int n_next = static_cast<int>(
          std::clamp<int64_t>(cols - c0 - amx::kAmxWeightRowsBlock, 0, amx::kAmxWeightRowsBlock));
      BlockRows(w, c0, n, rows);
      BlockRows(w, c0 + amx::kAmxWeightRowsBlock, n_next, next);
      std::fill(chunk.begin() + n * kChunk, chunk.end(), uint16_t{0});
      for (int64_t k0 = 0; k0 < in; k0 += kChunk) {
        const int64_t k = std::min(kChunk, in - k0);
        for (int c = 0; c < n; ++c) {
          if (c < n_next) PrefetchChunk(next[c], k0, k);
          WeightRowBf16(rows[c], k0, k, scratch, &chunk[c * kChunk]);
        }
        const bool last = k0 + k == in;
        const amx::SumsStart start = k0 == 0       ? amx::SumsStart::kZero
                                     : groups == 1 ? amx::SumsStart::kInTiles
                                                   : amx::SumsStart::kFromMemory;
        for (int64_t g = 0; g < groups; ++g) {
          // Token group g: the first or second B tile of its 32-token panel.
          const uint16_t* tiles = x_panels.data() + (g / 2) * amx::PanelElements(in) +
                                  (g % 2) * 512 + (k0 / 32) * 1024;
          amx::AccumulateWeightRows48(chunk.data(), kChunk, k, tiles, 1024,
                                      &sums[g * amx::kAmxWeightRowsBlock * 16],
                                      start, last || groups > 1);
        }
      }
      for (int64_t g = 0; g < groups; ++g) {
        const int nt = static_cast<int>(std::min<int64_t>(16, T - 16 * g));
        amx::StoreTransposed(&sums[g * amx::kAmxWeightRowsBlock * 16], n, nt,
                             out.as<float>() + 16 * g * out.stride[0] + c0, out.stride[0]);
      }
    }
    amx::ReleaseTiles();
  });
}

// Whether the few-rows product runs on int8 tiles straight from the stored Q8_0 blocks
// (cpu_gemm_q8_0_amx.h): one Q8_0 part, 16 rows or fewer (one B tile of tokens).
bool UseQ8Tiles(const LinearWeight& w, int64_t T) {
  return T <= amx::kQ8TileRows && w.parts.size() == 1 && w.parts[0].dtype == DType::kQ8_0;
}

// LinearBf16FewRows for UseQ8Tiles: 16 weight rows a tile product, the tokens quantised once.
void LinearQ8FewRows(DeviceContext& ctx, TensorView out, TensorView x, const LinearWeight& w) {
  const int64_t T = x.dim(0), in = w.in_features, cols = w.out_features;
  const TensorView& part = w.parts[0];
  const uint8_t* base = static_cast<const uint8_t*>(part.data);
  const int64_t row_bytes = DTypeBytes(DType::kQ8_0, part.stride[0]);
  std::vector<int8_t> tiles(amx::Q8TokenTileBytes(in));
  std::vector<float> scales(amx::Q8TokenScales(in));
  amx::QuantizeTokensQ8(x.as<float>(), x.stride[0], static_cast<int>(T), in, tiles.data(),
                        scales.data());
  constexpr int64_t kRows = amx::kQ8TileRows;
  const int64_t groups = (cols + kRows - 1) / kRows;
  ctx.pool().ParallelFor(groups, 1, [&](int64_t begin, int64_t end, int) {
    alignas(64) float sums[kRows * 16];  // f32 [16 weight rows][16 tokens]
    std::vector<uint8_t> tail;           // a last group of fewer than 16 rows, zero-padded
    amx::ConfigureTilesQ8();
    for (int64_t g = begin; g < end; ++g) {
      const int64_t c0 = g * kRows;
      const int n = static_cast<int>(std::min(kRows, cols - c0));
      const uint8_t* rows = base + c0 * row_bytes;
      if (n < kRows) {
        tail.assign(kRows * row_bytes, 0);
        std::memcpy(tail.data(), rows, n * row_bytes);
        rows = tail.data();
      }
      const int64_t ahead = g + 1 < end ? std::min(kRows, cols - c0 - kRows) * row_bytes : 0;
      amx::Q8RowsTimesTokens(rows, row_bytes, in, tiles.data(), scales.data(),
                             ahead > 0 ? base + (c0 + kRows) * row_bytes : nullptr, ahead, sums);
      amx::StoreTransposed(sums, n, static_cast<int>(T), out.as<float>() + c0, out.stride[0]);
    }
    amx::ReleaseTiles();
  });
}

}  // namespace

bool CanRunLinearBf16(const LinearWeight& w, CpuIsa isa) {
  if (isa < CpuIsa::kAmxBf16 || w.parts.empty() || w.in_features % 32 != 0) return false;
  return std::all_of(w.parts.begin(), w.parts.end(),
                     [](const TensorView& p) { return CanDequantize(p.dtype); });
}

void LinearBf16(DeviceContext& ctx, TensorView out, TensorView x, const LinearWeight& w) {
  assert(CanRunLinearBf16(w, ctx.cpu_isa()));
  if (x.dim(0) <= kBf16FewRowsMax) {
    if (UseQ8Tiles(w, x.dim(0))) {
      LinearQ8FewRows(ctx, out, x, w);
    } else {
      LinearBf16FewRows(ctx, out, x, w);
    }
    return;
  }
  const int64_t T = x.dim(0), in = w.in_features, cols = w.out_features;
  const int64_t padded = (T + amx::kAmxRowsBlock - 1) / amx::kAmxRowsBlock * amx::kAmxRowsBlock;
  // a: bf16 [padded, in]; the padding rows are zero (their sums are computed and dropped).
  std::vector<uint16_t> a(padded * in);
  std::fill(a.begin() + T * in, a.end(), uint16_t{0});
  ctx.pool().ParallelFor(T, 16, [&](int64_t begin, int64_t end, int) {
    amx::ConvertRowsBf16(x.as<float>() + begin * x.stride[0], x.stride[0], end - begin, in,
                         a.data() + begin * in);
  });
  const int64_t panels = (cols + amx::kAmxPanelCols - 1) / amx::kAmxPanelCols;
  ctx.pool().ParallelFor(panels, 1, [&](int64_t begin, int64_t end, int) {
    std::vector<float> rows_f32(amx::kAmxPanelCols * in);  // f32 [32, in]
    // bf16, tile layout: kPanelsPerGroup panels side by side
    std::vector<uint16_t> group(kPanelsPerGroup * amx::PanelElements(in));
    amx::ConfigureTiles();
    for (int64_t g0 = begin; g0 < end; g0 += kPanelsPerGroup) {
      const int64_t g1 = std::min(end, g0 + kPanelsPerGroup);
      for (int64_t b = g0; b < g1; ++b) {
        const int64_t c0 = b * amx::kAmxPanelCols;
        const int n = static_cast<int>(std::min<int64_t>(amx::kAmxPanelCols, cols - c0));
        for (int c = 0; c < n; ++c) {
          DType type{};
          const uint8_t* row = WeightRow(w, c0 + c, &type);
          const Status s = Dequantize(type, row, rows_f32.data() + c * in, in);
          assert(s.ok());
          (void)s;
        }
        amx::PackPanelBf16(rows_f32.data(), n, in,
                           group.data() + (b - g0) * amx::PanelElements(in));
      }
      // Each block of activation rows comes from memory once per group and is reused from the
      // cache by the group's panels.
      for (int64_t t0 = 0; t0 < T; t0 += amx::kAmxRowsBlock) {
        const int64_t nt = std::min<int64_t>(amx::kAmxRowsBlock, T - t0);
        for (int64_t b = g0; b < g1; ++b) {
          const int64_t c0 = b * amx::kAmxPanelCols;
          const int n = static_cast<int>(std::min<int64_t>(amx::kAmxPanelCols, cols - c0));
          amx::GemmPanel(a.data() + t0 * in, nt, in,
                         group.data() + (b - g0) * amx::PanelElements(in), n,
                         out.as<float>() + t0 * out.stride[0] + c0, out.stride[0]);
        }
      }
    }
    amx::ReleaseTiles();
  });
}

}  // namespace uniprefill::ops::cpu
