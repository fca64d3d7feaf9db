// Flash-style attention on the CPU, over keys held in one buffer (Attention) or in several runs
// read in place (AttentionPaged: a paged cache's blocks, no gather).
//
// Work item = (kv head, query tile, key split). A query tile holds kTileRows rows, a row being one
// (query, query head of this kv head's group) pair, so GQA heads share every K/V tile load. For
// each key tile of kKeyTile keys inside the tile's visible range (found by binary search on the
// ascending k_pos; tiles outside the causal/window range are never touched):
//   S = (scale * Q) K^T        (6x16 AVX2 or 12x16 AVX-512 micro-kernel on a packed K tile,
//                               cpu_gemm_tile.h, by the context's ISA level)
//   mask, online softmax update (running max m, sum l; O rescaled by alpha = exp(m_old - m_new))
//   O = alpha * O + P V        (micro-kernel reading V rows in place)
// With AttentionParams::bf16_tiles at the amx-bf16 level both products run on AMX bf16 tiles
// instead (KeyTileAmx: Q, K, P, V rounded to bf16, f32 sums, the softmax unchanged).
// Key tiles are those of one contiguous buffer whatever the runs; a tile spanning runs reads
// each part in place (results equal bit for bit). f16 keys and values (a CPU cache's default,
// kv/kv_rows.h) are widened to f32 a key tile at a time into the worker's buffers, so the
// kernels are the f32 ones and results equal an f32 cache holding the same (rounded) values.
// Memory is linear in context: besides the inputs and output, each worker holds one Q tile, one
// packed K tile, one S tile [rows, kKeyTile] and one O tile (O(tile) floats, independent of Tk),
// plus O(Tq) visible ranges; key splits (decode) add partial O tiles per split, again O(tile).
// Items are spread over the pool in zigzag order (first, last, second, ...) so the contiguous
// chunks the pool hands out carry equal causal work.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "kv/kv_rows.h"
#include "ops/cpu/cpu_gemm_bf16_amx.h"
#include "ops/cpu/cpu_gemm_tile.h"
#include "ops/cpu/cpu_math.h"
#include "ops/cpu/cpu_ops.h"

namespace uniprefill::ops::cpu {
namespace {

constexpr int kTileRows = 128;         // target rows (queries x group heads) per query tile
constexpr int kKeyTile = 128;          // keys per S tile
constexpr int64_t kMinSplitKeys = 1024;  // a key split (decode) covers at least this many keys
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Keys [begin, begin + count) of the problem's key index space: k, v (f32 or f16) [count, Hkv, D]
// rows in place (one run for Attention, one per cache block for AttentionPaged); never empty.
struct KeyRun {
  TensorView k, v;
  int64_t begin = 0, count = 0;
};

struct Problem {
  TensorView out, q;
  std::vector<KeyRun> runs;  // in key order, covering [0, tk)
  const GemmTileKernels* gemm = nullptr;  // the context's ISA level's tile kernels
  // AttentionParams::bf16_tiles at the amx-bf16 level, D a multiple of 32: query tiles of more
  // than kDotRowsMax rows run S = Q K^T and P V on AMX bf16 tiles (KeyTileAmx).
  bool amx = false;
  bool f16 = false;  // the runs hold f16 keys and values (widened a key tile at a time)
  int64_t tq = 0, tk = 0, hq = 0, hkv = 0, group = 0, d = 0;
  int64_t dp = 0;  // O tile row stride: d rounded up to kPanel
  int64_t queries_per_tile = 0, tiles = 0, splits = 1;
  float scale = 1.0f;
  std::vector<int64_t> lo, hi;  // visible key index range [lo, hi) of each query
};

// The part of a key tile that lies in one run: keys [j, j + n), rows k, v (kv head applied).
struct Segment {
  int64_t j = 0;
  int n = 0;
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t k_stride = 0, v_stride = 0;
};

// One worker's tile buffers (sizes depend only on the tile shape).
struct Workspace {
  std::vector<float> q, kpack, s, o, m, l, alpha;
  std::vector<float> ones;  // alpha for a key tile's second and later segments
  std::vector<int64_t> lo, hi;
  std::vector<Segment> segments;
  // AMX (p.amx): Q, P as bf16 rows (rows padded to 32, zero); the K tile's and V tile's panels;
  // P V before it is added to O; the tile's K and V row pointers.
  std::vector<uint16_t> q16, p16, kpanels, vpanels;
  std::vector<float> pv;
  std::vector<const float*> krows, vrows;
  // f16 keys / values: the key tile's rows of one kv head widened to f32 [kKeyTile, d]; the
  // segments then point here, so every kernel below reads f32 as from an f32 cache.
  std::vector<float> kwide, vwide;
  explicit Workspace(const Problem& p) {
    const int64_t rows = p.queries_per_tile * p.group;
    ones.assign(rows, 1.0f);
    if (p.f16) {  // TileSegments widens a tile's rows here (and gathers f32 ones, sized there)
      kwide.resize(kKeyTile * p.d);
      vwide.resize(kKeyTile * p.d);
    }
    segments.reserve(kKeyTile);
    q.resize(rows * p.d);
    kpack.resize(kKeyTile * p.d);
    s.resize(rows * kKeyTile);
    o.resize(rows * p.dp);
    m.resize(rows);
    l.resize(rows);
    alpha.resize(rows);
    lo.resize(rows);
    hi.resize(rows);
    if (p.amx) {
      const int64_t padded = RoundUp(rows, amx::kAmxRowsBlock);
      q16.assign(padded * p.d, 0);
      p16.assign(padded * kKeyTile, 0);
      kpanels.resize(kKeyTile / amx::kAmxPanelCols * amx::PanelElements(p.d));
      vpanels.resize(p.d / amx::kAmxPanelCols * amx::PanelElements(kKeyTile));
      pv.resize(rows * p.dp);
      krows.resize(kKeyTile);
      vrows.resize(kKeyTile);
    }
  }
};

// Online-softmax update of row r for S columns [a, b) of a key tile; columns outside become 0.
void SoftmaxRow(float* s, int nk, int64_t a, int64_t b, float* m, float* l, float* alpha) {
  if (a >= b) {
    std::fill(s, s + nk, 0.0f);
    *alpha = 1.0f;
    return;
  }
  float mx = kNegInf;
  for (int64_t c = a; c < b; ++c) mx = std::max(mx, s[c]);
  const float m_new = std::max(*m, mx);
  *alpha = std::exp(*m - m_new);  // 0 on the first visible tile (m = -inf)
  std::fill(s, s + a, 0.0f);
  std::fill(s + b, s + nk, 0.0f);
  __m256 sum8 = _mm256_setzero_ps();
  const __m256 mv = _mm256_set1_ps(m_new);
  int64_t c = a;
  for (; c + 8 <= b; c += 8) {
    const __m256 e = Exp(_mm256_sub_ps(_mm256_loadu_ps(s + c), mv));
    _mm256_storeu_ps(s + c, e);
    sum8 = _mm256_add_ps(sum8, e);
  }
  float sum = HorizontalSum(sum8);
  for (; c < b; ++c) {
    s[c] = std::exp(s[c] - m_new);
    sum += s[c];
  }
  *l = *l * *alpha + sum;
  *m = m_new;
}

void PrefetchRows(const float* base, int64_t stride, int n, int d) {
  for (int j = 0; j < n; ++j) {
    const char* row = reinterpret_cast<const char*>(base + j * stride);
    for (int64_t off = 0; off < static_cast<int64_t>(d) * 4; off += 64) {
      _mm_prefetch(row + off, _MM_HINT_T1);
    }
  }
}

// Widens n rows of d f16 values (row stride `stride` elements) to f32 rows of d.
void WidenRows(float* dst, const uint16_t* src, int64_t stride, int n, int d) {
  for (int i = 0; i < n; ++i) LoadKvValues(dst + int64_t{i} * d, src + i * stride, DType::kF16, d);
}

// The segments of key tile [j0, j0 + nk) for kv head kh, into ws.segments. f16 runs: their rows
// widened into ws.kwide / ws.vwide at the key's place in the tile, and f32 runs of a prefill's
// tile (`gather`: more than kDotRowsMax rows) spanning several runs copied there, so that the
// tile is then one segment of contiguous rows. Why: the P V kernel loads and stores the query
// tile's O once per segment, and a paged cache's 16-token blocks cut a 128-key tile into 8
// (Gemma 3 270M, 2 cores, a 16K prompt served alone in steps of 432: 35.0 s per segment, 33.1 s
// merged, 31.8 s over 128-token blocks). The sums are the same either way (a later segment
// rescales O by exactly 1), so paged results still equal contiguous ones bit for bit.
void TileSegments(const Problem& p, int64_t kh, int64_t j0, int nk, bool gather, Workspace& ws) {
  ws.segments.clear();
  auto run = std::upper_bound(p.runs.begin(), p.runs.end(), j0,
                              [](int64_t j, const KeyRun& r) { return j < r.begin; }) - 1;
  const bool copy_f32 = !p.f16 && gather && run->begin + run->count < j0 + nk;
  if (copy_f32 && ws.kwide.size() < static_cast<size_t>(kKeyTile * p.d)) {
    ws.kwide.resize(kKeyTile * p.d);
    ws.vwide.resize(kKeyTile * p.d);
  }
  for (int64_t j = j0; j < j0 + nk; ++run) {
    const int64_t off = j - run->begin;
    const int n = static_cast<int>(std::min(j0 + nk, run->begin + run->count) - j);
    if (copy_f32) {
      const float* k = run->k.as<float>() + kh * run->k.stride[1] + off * run->k.stride[0];
      const float* v = run->v.as<float>() + kh * run->v.stride[1] + off * run->v.stride[0];
      for (int i = 0; i < n; ++i) {
        std::copy_n(k + i * run->k.stride[0], p.d, ws.kwide.data() + (j - j0 + i) * p.d);
        std::copy_n(v + i * run->v.stride[0], p.d, ws.vwide.data() + (j - j0 + i) * p.d);
      }
    } else if (p.f16) {
      const int d = static_cast<int>(p.d);
      float* k = ws.kwide.data() + (j - j0) * p.d;
      float* v = ws.vwide.data() + (j - j0) * p.d;
      WidenRows(k, run->k.as<uint16_t>() + kh * run->k.stride[1] + off * run->k.stride[0],
                run->k.stride[0], n, d);
      WidenRows(v, run->v.as<uint16_t>() + kh * run->v.stride[1] + off * run->v.stride[0],
                run->v.stride[0], n, d);
    } else {
      ws.segments.push_back(
          {j, n, run->k.as<float>() + kh * run->k.stride[1] + off * run->k.stride[0],
           run->v.as<float>() + kh * run->v.stride[1] + off * run->v.stride[0], run->k.stride[0],
           run->v.stride[0]});
    }
    j += n;
  }
  if (p.f16 || copy_f32) {  // the tile's rows lie in order in kwide / vwide
    ws.segments.assign(1, Segment{j0, nk, ws.kwide.data(), ws.vwide.data(), p.d, p.d});
  }
}

// One key tile [j0, j0 + nk), its keys in ws.segments: scores, online softmax, O update for the
// rows of the query tile in ws. The tile is the same whatever the runs, and a segment adds its
// keys to S and O in the same order as one buffer would, so paged results equal contiguous ones
// bit for bit (the second and later segments rescale O by exactly 1).
void KeyTile(const Problem& p, Workspace& ws, int rows, int64_t j0, int nk) {
  const int d = static_cast<int>(p.d);
  // f32 [rows, kKeyTile] = Q [rows, d] K_tile^T
  if (rows <= kDotRowsMax) {
    // Decode: the PV kernel walks V a column panel at a time (a 1 KB stride for D = 256) with
    // too few rows to hide DRAM latency; prefetch the V tile into L2 while the scores run (f16:
    // the widened tile was just written, so it is in cache already).
    if (!p.f16) {
      for (const Segment& g : ws.segments) PrefetchRows(g.v, g.v_stride, g.n, d);
    }
    for (const Segment& g : ws.segments) {
      p.gemm->dot_rows(ws.s.data() + (g.j - j0), kKeyTile, ws.q.data(), d, g.k, g.k_stride, rows,
                       g.n, d);
    }
  } else {
    const int panels = static_cast<int>(RoundUp(nk, kPanel) / kPanel);
    if (ws.segments.size() == 1) {
      PackPanels(ws.kpack.data(), ws.segments[0].k, ws.segments[0].k_stride, nk, d);
    } else {
      PackPanelColumns(ws.kpack.data(), nullptr, 0, nk, panels * kPanel - nk, d);  // zero pad
      for (const Segment& g : ws.segments) {
        PackPanelColumns(ws.kpack.data(), g.k, g.k_stride, static_cast<int>(g.j - j0), g.n, d);
      }
    }
    p.gemm->gemm_packed(ws.s.data(), kKeyTile, ws.q.data(), d, ws.kpack.data(), rows, panels,
                        d);
  }
  for (int r = 0; r < rows; ++r) {
    const int64_t a = std::clamp<int64_t>(ws.lo[r] - j0, 0, nk);
    const int64_t b = std::clamp<int64_t>(ws.hi[r] - j0, 0, nk);
    SoftmaxRow(ws.s.data() + r * kKeyTile, nk, a, b, &ws.m[r], &ws.l[r], &ws.alpha[r]);
  }
  // O [rows, d] = alpha * O + P [rows, nk] V_tile [nk, d], a segment at a time
  for (const Segment& g : ws.segments) {
    const float* alpha = g.j == j0 ? ws.alpha.data() : ws.ones.data();
    p.gemm->gemm_accum_scaled(ws.o.data(), p.dp, alpha, ws.s.data() + (g.j - j0), kKeyTile, g.v,
                              g.v_stride, rows, d, g.n);
  }
}

// KeyTile on AMX bf16 tiles (p.amx, rows > kDotRowsMax): the K and V rows of the tile are packed
// to bf16 from their row pointers whatever the segments, so paged and contiguous keys give the
// same bits; S and P V are f32 sums of bf16 products (Q was rounded once per item in RunItem).
void KeyTileAmx(const Problem& p, Workspace& ws, int rows, int64_t j0, int nk) {
  const int d = static_cast<int>(p.d);
  for (const Segment& g : ws.segments) {
    for (int i = 0; i < g.n; ++i) {
      ws.krows[g.j - j0 + i] = g.k + i * g.k_stride;
      ws.vrows[g.j - j0 + i] = g.v + i * g.v_stride;
    }
  }
  const int nk_pad = static_cast<int>(RoundUp(nk, amx::kAmxPanelCols));
  // S f32 [rows, nk] = Q K^T, 32 keys per panel.
  for (int c0 = 0; c0 < nk; c0 += amx::kAmxPanelCols) {
    const int n = std::min(amx::kAmxPanelCols, nk - c0);
    uint16_t* panel = ws.kpanels.data() + (c0 / amx::kAmxPanelCols) * amx::PanelElements(d);
    amx::PackPanelRowsBf16(ws.krows.data() + c0, n, d, panel);
    amx::GemmPanel(ws.q16.data(), rows, d, panel, n, ws.s.data() + c0, kKeyTile);
  }
  for (int r = 0; r < rows; ++r) {
    const int64_t a = std::clamp<int64_t>(ws.lo[r] - j0, 0, nk);
    const int64_t b = std::clamp<int64_t>(ws.hi[r] - j0, 0, nk);
    float* srow = ws.s.data() + r * kKeyTile;
    SoftmaxRow(srow, nk, a, b, &ws.m[r], &ws.l[r], &ws.alpha[r]);
    std::fill(srow + nk, srow + nk_pad, 0.0f);  // the padding keys weigh nothing
  }
  // P V f32 [rows, d], P as bf16 [rows, nk_pad], V's columns in panels of 32.
  amx::ConvertRowsBf16(ws.s.data(), kKeyTile, rows, nk_pad, ws.p16.data());
  const int64_t p16_stride = nk_pad;  // ConvertRowsBf16 wrote rows of nk_pad values
  amx::PackPairsByRowsBf16(ws.vrows.data(), nk, d, ws.vpanels.data());
  for (int c0 = 0; c0 < d; c0 += amx::kAmxPanelCols) {
    amx::GemmPanel(ws.p16.data(), rows, p16_stride,
                   ws.vpanels.data() + (c0 / amx::kAmxPanelCols) * amx::PanelElements(nk_pad),
                   amx::kAmxPanelCols, ws.pv.data() + c0, p.dp);
  }
  for (int r = 0; r < rows; ++r) {
    float* o = ws.o.data() + r * p.dp;
    const float* pv = ws.pv.data() + r * p.dp;
    const float alpha = ws.alpha[r];
    for (int c = 0; c < d; ++c) o[c] = alpha * o[c] + pv[c];
  }
}

// Runs query tile `tile` of kv head kh over keys [j_begin, j_end); leaves m, l, O in ws.
void RunItem(const Problem& p, Workspace& ws, int64_t kh, int64_t tile, int64_t j_begin,
             int64_t j_end) {
  const int64_t i0 = tile * p.queries_per_tile;
  const int64_t nq = std::min(p.queries_per_tile, p.tq - i0);
  const int rows = static_cast<int>(nq * p.group);
  for (int64_t qi = 0; qi < nq; ++qi) {
    for (int64_t g = 0; g < p.group; ++g) {
      const int64_t r = qi * p.group + g;
      const float* src = p.q.as<float>() + (i0 + qi) * p.q.stride[0] + (kh * p.group + g) * p.q.stride[1];
      for (int64_t e = 0; e < p.d; ++e) ws.q[r * p.d + e] = src[e] * p.scale;
      ws.lo[r] = p.lo[i0 + qi];
      ws.hi[r] = p.hi[i0 + qi];
    }
  }
  std::fill(ws.m.begin(), ws.m.begin() + rows, kNegInf);
  std::fill(ws.l.begin(), ws.l.begin() + rows, 0.0f);
  std::fill(ws.o.begin(), ws.o.begin() + rows * p.dp, 0.0f);
  const bool amx = p.amx && rows > kDotRowsMax;
  if (amx) {
    amx::ConvertRowsBf16(ws.q.data(), p.d, rows, p.d, ws.q16.data());
    amx::ConfigureTiles();
  }
  for (int64_t j0 = j_begin; j0 < j_end; j0 += kKeyTile) {
    const int nk = static_cast<int>(std::min<int64_t>(kKeyTile, j_end - j0));
    TileSegments(p, kh, j0, nk, /*gather=*/rows > kDotRowsMax, ws);
    if (amx) {
      KeyTileAmx(p, ws, rows, j0, nk);
    } else {
      KeyTile(p, ws, rows, j0, nk);
    }
  }
  if (amx) amx::ReleaseTiles();
}

// Key index range visible to any query of the tile.
void TileRange(const Problem& p, int64_t tile, int64_t* lo, int64_t* hi) {
  const int64_t i0 = tile * p.queries_per_tile;
  const int64_t i1 = std::min(p.tq, i0 + p.queries_per_tile);
  *lo = p.tk;
  *hi = 0;
  for (int64_t i = i0; i < i1; ++i) {
    if (p.lo[i] >= p.hi[i]) continue;
    *lo = std::min(*lo, p.lo[i]);
    *hi = std::max(*hi, p.hi[i]);
  }
  if (*lo > *hi) *lo = *hi;
}

// Writes O / l of the tile to out (zeros for rows with no visible key).
void StoreTile(const Problem& p, const float* o, const float* l, int64_t kh, int64_t tile) {
  const int64_t i0 = tile * p.queries_per_tile;
  const int64_t nq = std::min(p.queries_per_tile, p.tq - i0);
  for (int64_t qi = 0; qi < nq; ++qi) {
    for (int64_t g = 0; g < p.group; ++g) {
      const int64_t r = qi * p.group + g;
      float* dst = p.out.as<float>() + (i0 + qi) * p.out.stride[0] +
                   (kh * p.group + g) * p.out.stride[1];
      const float inv = l[r] > 0 ? 1.0f / l[r] : 0.0f;
      for (int64_t e = 0; e < p.d; ++e) dst[e] = o[r * p.dp + e] * inv;
    }
  }
}

// runs: the keys in order, each k, v f32 [count, Hkv, D] (at least one run).
Problem MakeProblem(DeviceContext& ctx, TensorView out, TensorView q,
                    const std::vector<KvRun>& runs, const int32_t* q_pos, const int32_t* k_pos,
                    const AttentionParams& params) {
  Problem p;
  p.gemm = &GemmTiles(ctx.cpu_isa());
  p.out = out;
  p.amx = params.bf16_tiles && ctx.cpu_isa() >= CpuIsa::kAmxBf16 && q.dim(2) % 32 == 0;
  p.q = q;
  p.tq = q.dim(0);
  p.hq = q.dim(1);
  p.d = q.dim(2);
  p.hkv = runs.front().k.dim(1);
  p.f16 = runs.front().k.dtype == DType::kF16;
  for (const KvRun& r : runs) {
    assert(r.k.dim(1) == p.hkv && r.k.dim(2) == p.d && r.v.dim(0) == r.k.dim(0));
    assert(r.k.dtype == runs.front().k.dtype && r.v.dtype == r.k.dtype);
    assert(r.k.dtype == DType::kF32 || r.k.dtype == DType::kF16);
    if (r.k.dim(0) > 0) p.runs.push_back({r.k, r.v, p.tk, r.k.dim(0)});
    p.tk += r.k.dim(0);
  }
  assert(p.hq % p.hkv == 0 && out.dim(0) == p.tq);
  p.group = p.hq / p.hkv;
  p.dp = RoundUp(p.d, kPanel);
  p.scale = params.scale;
  p.queries_per_tile = std::max<int64_t>(1, kTileRows / p.group);
  p.tiles = (p.tq + p.queries_per_tile - 1) / p.queries_per_tile;
  p.lo.resize(p.tq);
  p.hi.resize(p.tq);
  for (int64_t i = 0; i < p.tq; ++i) {
    const int64_t qp = q_pos[i];
    p.hi[i] = std::upper_bound(k_pos, k_pos + p.tk, qp) - k_pos;
    p.lo[i] = 0;
    if (params.window > 0) {
      const int64_t first = qp - params.window + 1;  // k_pos > qp - W
      p.lo[i] = std::lower_bound(k_pos, k_pos + p.tk, first,
                                 [](int32_t a, int64_t b) { return a < b; }) - k_pos;
    }
    p.lo[i] = std::min(p.lo[i], p.hi[i]);
  }
  // Few items (decode, short chunks): split the keys so every thread has work.
  const int64_t items = p.hkv * p.tiles;
  const int64_t want = 2 * ctx.threads();
  p.splits = 1;
  if (ctx.threads() > 1 && items < want) {
    p.splits = std::clamp<int64_t>(p.tk / kMinSplitKeys, 1, (want + items - 1) / items);
  }
  return p;
}

int64_t Zigzag(int64_t z, int64_t n) { return z % 2 == 0 ? z / 2 : n - 1 - z / 2; }

void RunUnsplit(DeviceContext& ctx, const Problem& p) {
  ctx.pool().ParallelFor(p.hkv * p.tiles, 1, [&](int64_t begin, int64_t end, int) {
    Workspace ws(p);
    for (int64_t idx = begin; idx < end; ++idx) {
      const int64_t kh = idx % p.hkv, tile = Zigzag(idx / p.hkv, p.tiles);
      int64_t lo, hi;
      TileRange(p, tile, &lo, &hi);
      RunItem(p, ws, kh, tile, lo, hi);
      StoreTile(p, ws.o.data(), ws.l.data(), kh, tile);
    }
  });
}

// Flash-decoding: each (kv head, tile, split) item writes a partial (m, l, O); then the splits of
// each tile are merged with weights exp(m_s - max m).
void RunSplit(DeviceContext& ctx, const Problem& p) {
  const int64_t rows = p.queries_per_tile * p.group;
  const int64_t items = p.hkv * p.tiles * p.splits;
  std::vector<float> part_o(items * rows * p.dp), part_m(items * rows), part_l(items * rows);
  ctx.pool().ParallelFor(items, 1, [&](int64_t begin, int64_t end, int) {
    Workspace ws(p);
    for (int64_t idx = begin; idx < end; ++idx) {
      const int64_t split = idx % p.splits, ht = idx / p.splits;
      const int64_t kh = ht % p.hkv, tile = ht / p.hkv;
      int64_t lo, hi;
      TileRange(p, tile, &lo, &hi);
      const int64_t per = RoundUp((hi - lo + p.splits - 1) / p.splits, kKeyTile);
      const int64_t j0 = std::min(hi, lo + split * per), j1 = std::min(hi, j0 + per);
      RunItem(p, ws, kh, tile, j0, j1);
      std::copy(ws.o.begin(), ws.o.begin() + rows * p.dp, part_o.begin() + idx * rows * p.dp);
      std::copy(ws.m.begin(), ws.m.begin() + rows, part_m.begin() + idx * rows);
      std::copy(ws.l.begin(), ws.l.begin() + rows, part_l.begin() + idx * rows);
    }
  });
  std::vector<float> o(rows * p.dp), l(rows);
  for (int64_t ht = 0; ht < p.hkv * p.tiles; ++ht) {
    std::fill(o.begin(), o.end(), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      float mx = kNegInf;
      for (int64_t s = 0; s < p.splits; ++s) mx = std::max(mx, part_m[(ht * p.splits + s) * rows + r]);
      l[r] = 0;
      if (mx == kNegInf) continue;
      for (int64_t s = 0; s < p.splits; ++s) {
        const int64_t idx = ht * p.splits + s;
        const float w = std::exp(part_m[idx * rows + r] - mx);
        l[r] += w * part_l[idx * rows + r];
        const float* po = part_o.data() + (idx * rows + r) * p.dp;
        for (int64_t e = 0; e < p.d; ++e) o[r * p.dp + e] += w * po[e];
      }
    }
    StoreTile(p, o.data(), l.data(), ht % p.hkv, ht / p.hkv);
  }
}

// Problems too small to keep the threads busy on their own (decode requests of short contexts:
// one item each) run together in RunSmallBatch; the others as one AttentionPaged call each.
bool Small(DeviceContext& ctx, const Problem& p) {
  return p.splits == 1 && p.hkv * p.tiles < 2 * ctx.threads();
}

// The small problems' items, (problem, kv head, tile) in problem order, on one pass of the pool:
// the same RunItem / StoreTile as RunUnsplit, so the results are the same bit for bit. A worker
// rebuilds its workspace only when a problem's tile shape differs from the last one.
void RunSmallBatch(DeviceContext& ctx, const std::vector<Problem>& problems) {
  struct Item {
    int64_t problem, kh, tile;
  };
  std::vector<Item> items;
  for (int64_t i = 0; i < static_cast<int64_t>(problems.size()); ++i) {
    const Problem& p = problems[i];
    if (!Small(ctx, p)) continue;
    for (int64_t idx = 0; idx < p.hkv * p.tiles; ++idx) {
      items.push_back({i, idx % p.hkv, Zigzag(idx / p.hkv, p.tiles)});
    }
  }
  ctx.pool().ParallelFor(static_cast<int64_t>(items.size()), 1,
                         [&](int64_t begin, int64_t end, int) {
                           std::optional<Workspace> ws;  // for the last problem's shape
                           const Problem* shape = nullptr;
                           for (int64_t i = begin; i < end; ++i) {
                             const Problem& p = problems[items[i].problem];
                             if (shape == nullptr || shape->group != p.group || shape->d != p.d ||
                                 shape->queries_per_tile != p.queries_per_tile ||
                                 shape->amx != p.amx) {
                               ws.emplace(p);
                               shape = &p;
                             }
                             int64_t lo, hi;
                             TileRange(p, items[i].tile, &lo, &hi);
                             RunItem(p, *ws, items[i].kh, items[i].tile, lo, hi);
                             StoreTile(p, ws->o.data(), ws->l.data(), items[i].kh, items[i].tile);
                           }
                         });
}

}  // namespace

void AttentionPagedBatch(DeviceContext& ctx, const std::vector<PagedAttentionSeq>& seqs,
                         const AttentionParams& params) {
  std::vector<Problem> problems;
  problems.reserve(seqs.size());
  for (const PagedAttentionSeq& s : seqs) {
    assert(s.runs != nullptr && !s.runs->empty());
    problems.push_back(MakeProblem(ctx, s.out, s.q, *s.runs, s.q_pos, s.k_pos, params));
  }
  RunSmallBatch(ctx, problems);
  for (const Problem& p : problems) {
    if (Small(ctx, p)) continue;
    if (p.splits > 1) {
      RunSplit(ctx, p);
    } else {
      RunUnsplit(ctx, p);
    }
  }
}

void AttentionPaged(DeviceContext& ctx, TensorView out, TensorView q,
                    const std::vector<KvRun>& runs, const int32_t* q_pos, const int32_t* k_pos,
                    const AttentionParams& params) {
  assert(!runs.empty());
  const Problem p = MakeProblem(ctx, out, q, runs, q_pos, k_pos, params);
  if (p.splits > 1) {
    RunSplit(ctx, p);
  } else {
    RunUnsplit(ctx, p);
  }
}

void Attention(DeviceContext& ctx, TensorView out, TensorView q, TensorView k, TensorView v,
               const int32_t* q_pos, const int32_t* k_pos, const AttentionParams& params) {
  cpu::AttentionPaged(ctx, out, q, {KvRun{k, v}}, q_pos, k_pos, params);
}

}  // namespace uniprefill::ops::cpu
