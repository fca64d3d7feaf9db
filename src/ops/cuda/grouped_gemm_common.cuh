// What the two grouped bf16 GEMM kernels of the MoE (moe.cu's mma.sync kernel and
// sm90/grouped_gemm_wgmma.cu's wgmma kernel) share: the problem description, how a block finds
// its group and rows from device offsets (so the host never learns the counts), and the paired
// output store. Not a public op interface.
//
// The problem: C[r, n] = sum_k A[row(r), k] * B_g[n, k] for every row r of group g (rows
// offsets[g] .. offsets[g+1]), B_g = B + g * b_group_stride (row-major [N, K]), A rows optionally
// gathered through an index array. The m tiles of all groups form one list (tile_offsets, a prefix
// sum of ceil(rows_g / BM)); a launch covers an upper bound of it and a block past the real end
// exits.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace uniprefill::ops::cuda {

// Rows of an m tile in both kernels: tile_offsets (computed by moe.cu) count tiles of this size.
constexpr int kGroupedGemmTileRows = 128;

struct GroupedGemmArgs {
  const __nv_bfloat16* a = nullptr;
  int64_t lda = 0;
  const int32_t* a_rows = nullptr;  // gather: A row of output row r is a_rows[r]; null: r
  const __nv_bfloat16* b = nullptr;
  int64_t ldb = 0;
  int64_t b_group_stride = 0;  // elements between consecutive groups' B
  void* c = nullptr;
  int64_t ldc = 0;
  int n = 0, k = 0;
  // Groups: rows [offsets[g], offsets[g+1]) use B_g; m tiles [tile_offsets[g], tile_offsets[g+1]).
  // Null: one group of m rows.
  const int32_t* offsets = nullptr;
  const int32_t* tile_offsets = nullptr;
  int groups = 1;
  int m = 0;
  // Gated output (the wgmma kernel only): when > 0, B_g holds gate rows [0, gated_half) then up
  // rows [gated_half, 2 gated_half), and C[r, i] = SiLU(gate) * up for i < n = gated_half, each
  // factor rounded to bf16 first (as a bf16 GEMM followed by the gated activation kernel).
  int gated_half = 0;
};

// The rows an m tile (of bm rows) covers: group, first row of the group, the group's row count and
// the tile's index inside the group. False when the tile lies past the last group's tiles.
struct GroupTile {
  int group = 0, row_begin = 0, rows = 0, tile_in_group = 0;
};
__device__ __forceinline__ bool FindGroupTile(const GroupedGemmArgs& args, int m_tile, int bm,
                                              GroupTile* t) {
  if (args.offsets == nullptr) {
    *t = GroupTile{0, 0, args.m, m_tile};
    return m_tile * bm < args.m;
  }
  if (m_tile >= args.tile_offsets[args.groups]) return false;
  int lo = 0, hi = args.groups - 1;  // largest g with tile_offsets[g] <= m_tile
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (args.tile_offsets[mid] <= m_tile)
      lo = mid;
    else
      hi = mid - 1;
  }
  t->group = lo;
  t->row_begin = args.offsets[lo];
  t->rows = args.offsets[lo + 1] - t->row_begin;
  t->tile_in_group = m_tile - args.tile_offsets[lo];
  return true;
}

// Stores v0 at p[0] and, when `second`, v1 at p[1]; one paired store when `paired` (p aligned).
template <typename OutT>
__device__ __forceinline__ void StorePair(OutT* p, float v0, float v1, bool second,
                                          bool paired) {
  if constexpr (sizeof(OutT) == 4) {
    if (second && paired) {
      *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
      return;
    }
    p[0] = v0;
    if (second) p[1] = v1;
  } else {
    if (second && paired) {
      *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v0, v1);
      return;
    }
    p[0] = __float2bfloat16_rn(v0);
    if (second) p[1] = __float2bfloat16_rn(v1);
  }
}

}  // namespace uniprefill::ops::cuda
