// Linear-attention kernels on the CPU (AVX2/FMA).
//
// CausalConv1dSilu: the weights are transposed to [K, C] once per call, so each time step is a
// K-tap FMA over contiguous channels, then SiLU; rows (or, for few rows, channel blocks) are split
// over the pool. Memory-bound: x is read once and out written once.
//
// GatedDeltaRule: value heads over the pool. The columns of S (value dims) are independent in the
// recurrence (u[j], delta[j], the update of column j and o[j] only touch column j), so S is
// processed in tiles of Dk x kTileW columns that stay in L1 while a chunk of kChunk tokens runs
// over them. Each token costs one fused pass over the tile:
//   - the tile is kept as c * M with a scalar c, so the decay exp(g) multiplies c, not the tile;
//     M is renormalised (M <- c M, c = 1) inside the pass when c leaves [kMinScale, 1/kMinScale]
//     and at the call's last token, so `state` always holds S itself between calls;
//   - the pass that applies token t's update, M += k_t (delta_t / c)^T, also accumulates the next
//     token's p = M^T k_{t+1} and r = M^T q_{t+1}; then u = c p and o = c r + (k.q) delta.
// That is 3 FMAs per state element and token (the minimum: u, the update, o) with one load and one
// store, about the FMA peak of a core while the tile sits in L1. A chunked (WY) form needs ~1.4x
// these FMAs at Dk = Dv = 128, chunk 64 (K K^T, two triangular solves, Q K^T, three C x D x D
// products), so on a CPU it can only lose; it is not implemented.
#include "ops/cpu/cpu_linear_attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/buffer.h"
#include "ops/cpu/cpu_math.h"

namespace uniprefill::ops::cpu {
namespace {

constexpr int64_t kConvRows = 16;          // rows per conv task
constexpr int64_t kConvMinWidth = 256;     // fewest channels per conv task
constexpr int64_t kConvDirectMaxRows = 2;  // up to this many rows, no weight transpose
constexpr int kTileVecs = 2;               // AVX2 vectors per tile row
constexpr int64_t kTileW = 8 * kTileVecs;  // columns of S per tile
constexpr int64_t kChunk = 64;             // tokens run over one tile before moving to the next
constexpr int64_t kInPlaceMaxTokens = 4;   // shorter calls update S in place (no tile copies)
constexpr float kMinScale = 1e-6f;

UP_INLINE __m256 SiluVec(__m256 x) {
  const __m256 e = Exp(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

inline float SiluScalar(float x) { return x / (1.0f + std::exp(-x)); }

float Dot(const float* a, const float* b, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), a1);
  }
  float s = HorizontalSum(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// ---- Causal conv ------------------------------------------------------------------------------

// Decode-sized calls: the taps are read in place (weight [C, K] rows are contiguous per channel),
// which for one or two rows is cheaper than transposing them; channel blocks over the pool.
void ConvFewRows(ThreadPool& pool, TensorView out, TensorView x, TensorView weight,
                 const float* state) {
  const int64_t T = x.dim(0), C = x.dim(1), K = weight.dim(1);
  pool.ParallelFor(C, kConvMinWidth, [&](int64_t c0, int64_t c1, int) {
    std::vector<const float*> src(K);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t j = 0; j < K; ++j) {
        const int64_t tau = t - (K - 1) + j;
        src[j] = tau < 0 ? state + (K - 1 + tau) * C : x.row<float>(tau);
      }
      float* o = out.row<float>(t);
      for (int64_t c = c0; c < c1; ++c) {
        const float* w = weight.row<float>(c);
        float acc = w[0] * src[0][c];
        for (int64_t j = 1; j < K; ++j) acc = std::fma(w[j], src[j][c], acc);
        o[c] = acc;
      }
      int64_t c = c0;
      for (; c + 8 <= c1; c += 8) _mm256_storeu_ps(o + c, SiluVec(_mm256_loadu_ps(o + c)));
      for (; c < c1; ++c) o[c] = SiluScalar(o[c]);
    }
  });
}

// Prefill-sized calls: the taps transposed once, then K FMAs per 8 contiguous channels per row.
void ConvManyRows(ThreadPool& pool, TensorView out, TensorView x, TensorView weight,
                  const float* state) {
  const int64_t T = x.dim(0), C = x.dim(1), K = weight.dim(1);
  // The taps as wt f32 [K, C], so each time step is K FMAs over contiguous channels.
  std::vector<float> wt(K * C);
  pool.ParallelFor(C, 4096, [&](int64_t c0, int64_t c1, int) {
    for (int64_t c = c0; c < c1; ++c) {
      for (int64_t j = 0; j < K; ++j) wt[j * C + c] = weight.row<float>(c)[j];
    }
  });
  // Tiles of kConvRows rows x `width` channels: whole rows for long prefills (streaming), channel
  // blocks when there are too few rows to keep every thread busy.
  const int64_t row_tiles = (T + kConvRows - 1) / kConvRows;
  int64_t col_tiles = 1;
  while (row_tiles * col_tiles < 2 * pool.size() && C / (2 * col_tiles) >= kConvMinWidth) {
    col_tiles *= 2;
  }
  const int64_t width = ((C + col_tiles - 1) / col_tiles + 7) / 8 * 8;
  pool.ParallelFor(row_tiles * col_tiles, 1, [&](int64_t tile0, int64_t tile1, int) {
    std::vector<const float*> src(K);
    for (int64_t tile = tile0; tile < tile1; ++tile) {
      const int64_t t0 = tile / col_tiles * kConvRows, t1 = std::min(T, t0 + kConvRows);
      const int64_t c0 = tile % col_tiles * width, c1 = std::min(C, c0 + width);
      for (int64_t t = t0; t < t1; ++t) {
        // Inputs at time tau < 0 are the state's rows.
        for (int64_t j = 0; j < K; ++j) {
          const int64_t tau = t - (K - 1) + j;
          src[j] = tau < 0 ? state + (K - 1 + tau) * C : x.row<float>(tau);
        }
        float* o = out.row<float>(t);
        int64_t c = c0;
        for (; c + 8 <= c1; c += 8) {
          __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(&wt[c]), _mm256_loadu_ps(src[0] + c));
          for (int64_t j = 1; j < K; ++j) {
            acc =
                _mm256_fmadd_ps(_mm256_loadu_ps(&wt[j * C + c]), _mm256_loadu_ps(src[j] + c), acc);
          }
          _mm256_storeu_ps(o + c, SiluVec(acc));
        }
        for (; c < c1; ++c) {
          float acc = wt[c] * src[0][c];
          for (int64_t j = 1; j < K; ++j) acc = std::fma(wt[j * C + c], src[j][c], acc);
          o[c] = SiluScalar(acc);
        }
      }
    }
  });
}

// ---- Gated delta rule -------------------------------------------------------------------------

// One token of one value head, as the tile passes need it.
struct Token {
  const float* q;  // [Dk]
  const float* k;  // [Dk]
  const float* v;  // [Dv]
  float* out;      // [Dv]
  float decay;     // exp(g)
  float beta;
  float kq;  // k . q
};

// p += M^T k, r += M^T q over one tile (rows at m + i * ldm).
UP_INLINE void ReadPass(const float* m, int64_t ldm, int64_t dk, const float* k, const float* q,
                        __m256* p, __m256* r) {
  for (int64_t i = 0; i < dk; ++i) {
    const __m256 kb = _mm256_set1_ps(k[i]), qb = _mm256_set1_ps(q[i]);
    for (int v = 0; v < kTileVecs; ++v) {
      const __m256 mv = _mm256_loadu_ps(m + i * ldm + 8 * v);
      p[v] = _mm256_fmadd_ps(mv, kb, p[v]);
      r[v] = _mm256_fmadd_ps(mv, qb, r[v]);
    }
  }
}

// M <- (kFold ? s M : M) + k d^T; then, when kNext, p += M^T kn and r += M^T qn with the new M.
template <bool kFold, bool kNext>
UP_INLINE void UpdatePass(float* m, int64_t ldm, int64_t dk, const float* k, const __m256* d,
                          __m256 s, const float* kn, const float* qn, __m256* p, __m256* r) {
  for (int64_t i = 0; i < dk; ++i) {
    const __m256 kb = _mm256_set1_ps(k[i]);
    __m256 knb, qnb;
    if constexpr (kNext) {
      knb = _mm256_set1_ps(kn[i]);
      qnb = _mm256_set1_ps(qn[i]);
    }
    for (int v = 0; v < kTileVecs; ++v) {
      float* row = m + i * ldm + 8 * v;
      __m256 mv = _mm256_loadu_ps(row);
      if constexpr (kFold) mv = _mm256_mul_ps(mv, s);
      mv = _mm256_fmadd_ps(kb, d[v], mv);
      _mm256_storeu_ps(row, mv);
      if constexpr (kNext) {
        p[v] = _mm256_fmadd_ps(mv, knb, p[v]);
        r[v] = _mm256_fmadd_ps(mv, qnb, r[v]);
      }
    }
  }
}

// Runs tokens tok[0..n) over one tile: columns [j0, j0 + width) of S = *c * M, M's rows at
// m + i * ldm (kTileW floats each; columns past `width` are zero padding). With fold_at_end the
// tile holds S itself (c = 1) afterwards.
void RunTile(float* m, int64_t ldm, int64_t dk, int64_t j0, int64_t width, const Token* tok,
             int64_t n, float* c_io, bool fold_at_end) {
  __m256 p[kTileVecs], r[kTileVecs], d[kTileVecs];
  for (int v = 0; v < kTileVecs; ++v) p[v] = r[v] = _mm256_setzero_ps();
  ReadPass(m, ldm, dk, tok[0].k, tok[0].q, p, r);
  float c = *c_io;
  alignas(32) float vbuf[kTileW] = {}, obuf[kTileW];
  const bool full = width == kTileW;
  for (int64_t t = 0; t < n; ++t) {
    const Token& x = tok[t];
    const float cn = c * x.decay;  // S after the decay is cn * M
    const float* vrow = x.v + j0;
    if (!full) std::memcpy(vbuf, vrow, width * sizeof(float));
    const __m256 cv = _mm256_set1_ps(cn), bv = _mm256_set1_ps(x.beta), kq = _mm256_set1_ps(x.kq);
    for (int v = 0; v < kTileVecs; ++v) {
      const __m256 vv = _mm256_loadu_ps(full ? vrow + 8 * v : vbuf + 8 * v);
      // delta = beta (v - u), u = S^T k = cn p; o = S_new^T q = cn r + (k.q) delta.
      d[v] = _mm256_mul_ps(bv, _mm256_fnmadd_ps(cv, p[v], vv));
      const __m256 o = _mm256_fmadd_ps(kq, d[v], _mm256_mul_ps(cv, r[v]));
      _mm256_storeu_ps(full ? x.out + j0 + 8 * v : obuf + 8 * v, o);
    }
    if (!full) std::memcpy(x.out + j0, obuf, width * sizeof(float));
    const bool next = t + 1 < n;
    const bool fold = (fold_at_end && !next) || !(cn >= kMinScale && cn <= 1.0f / kMinScale);
    const float* kn = next ? tok[t + 1].k : nullptr;
    const float* qn = next ? tok[t + 1].q : nullptr;
    for (int v = 0; v < kTileVecs; ++v) p[v] = r[v] = _mm256_setzero_ps();
    const __m256 s = _mm256_set1_ps(cn);
    if (fold) {
      // S_new = cn M + k delta^T, held with c = 1.
      c = 1.0f;
      if (next) {
        UpdatePass<true, true>(m, ldm, dk, x.k, d, s, kn, qn, p, r);
      } else {
        UpdatePass<true, false>(m, ldm, dk, x.k, d, s, kn, qn, p, r);
      }
    } else {
      // S_new = cn (M + k (delta / cn)^T).
      c = cn;
      const __m256 inv = _mm256_set1_ps(1.0f / cn);
      for (int v = 0; v < kTileVecs; ++v) d[v] = _mm256_mul_ps(d[v], inv);
      if (next) {
        UpdatePass<false, true>(m, ldm, dk, x.k, d, s, kn, qn, p, r);
      } else {
        UpdatePass<false, false>(m, ldm, dk, x.k, d, s, kn, qn, p, r);
      }
    }
  }
  *c_io = c;
}

// Short calls (decode) update S in place: copying tiles out and back would cost more than the
// L1 reuse saves.
bool UpdateInPlace(int64_t T, int64_t Dv) { return T <= kInPlaceMaxTokens && Dv % kTileW == 0; }

// All T tokens of value head h (key head kh) on its state S f32 [Dk, Dv]. `scratch` holds
// n_tiles * Dk * kTileW floats (nullptr when updating in place).
void DeltaRuleHead(TensorView out, TensorView q, TensorView k, TensorView v, TensorView g,
                   TensorView beta, int64_t h, int64_t kh, float* S, float* scratch,
                   std::vector<Token>& tok) {
  const int64_t T = q.dim(0), Dk = q.dim(2), Dv = v.dim(2);
  const int64_t n_tiles = (Dv + kTileW - 1) / kTileW;
  const bool in_place = scratch == nullptr;
  if (!in_place) {
    for (int64_t tile = 0; tile < n_tiles; ++tile) {
      const int64_t j0 = tile * kTileW, w = std::min(kTileW, Dv - j0);
      float* m = scratch + tile * Dk * kTileW;
      for (int64_t i = 0; i < Dk; ++i) {
        std::memcpy(m + i * kTileW, S + i * Dv + j0, w * sizeof(float));
        std::fill(m + i * kTileW + w, m + (i + 1) * kTileW, 0.0f);
      }
    }
  }
  std::vector<float> c(n_tiles, 1.0f);
  for (int64_t t0 = 0; t0 < T; t0 += kChunk) {
    const int64_t n = std::min(kChunk, T - t0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = t0 + i;
      Token& x = tok[i];
      x.q = q.as<float>() + t * q.stride[0] + kh * q.stride[1];
      x.k = k.as<float>() + t * k.stride[0] + kh * k.stride[1];
      x.v = v.as<float>() + t * v.stride[0] + h * v.stride[1];
      x.out = out.as<float>() + t * out.stride[0] + h * out.stride[1];
      x.decay = std::exp(g.row<float>(t)[h]);
      x.beta = beta.row<float>(t)[h];
      x.kq = Dot(x.k, x.q, Dk);
    }
    const bool last = t0 + n == T;
    for (int64_t tile = 0; tile < n_tiles; ++tile) {
      const int64_t j0 = tile * kTileW, w = std::min(kTileW, Dv - j0);
      if (in_place) {
        RunTile(S + j0, Dv, Dk, j0, w, tok.data(), n, &c[tile], last);
      } else {
        RunTile(scratch + tile * Dk * kTileW, kTileW, Dk, j0, w, tok.data(), n, &c[tile], last);
      }
    }
  }
  if (!in_place) {
    for (int64_t tile = 0; tile < n_tiles; ++tile) {
      const int64_t j0 = tile * kTileW, w = std::min(kTileW, Dv - j0);
      const float* m = scratch + tile * Dk * kTileW;
      for (int64_t i = 0; i < Dk; ++i)
        std::memcpy(S + i * Dv + j0, m + i * kTileW, w * sizeof(float));
    }
  }
}

}  // namespace

void CausalConv1dSilu(DeviceContext& ctx, TensorView out, TensorView x, TensorView weight,
                      float* state) {
  const int64_t T = x.dim(0), C = x.dim(1), K = weight.dim(1);
  assert(weight.dim(0) == C && out.dim(0) == T && out.dim(1) == C && K >= 1);
  assert(out.data != x.data);
  if (T == 0) return;
  ThreadPool& pool = ctx.pool();
  if (T <= kConvDirectMaxRows) {
    ConvFewRows(pool, out, x, weight, state);
  } else {
    ConvManyRows(pool, out, x, weight, state);
  }
  // New state row j is the input at T - (K-1) + j; when that is an old state row (T + j > j),
  // ascending j never reads a row already overwritten.
  for (int64_t j = 0; j < K - 1; ++j) {
    const int64_t tau = T - (K - 1) + j;
    std::memmove(state + j * C, tau < 0 ? state + (K - 1 + tau) * C : x.row<float>(tau),
                 C * sizeof(float));
  }
}

void L2NormalizeHeads(DeviceContext& ctx, TensorView x, float eps, float scale) {
  const bool heads = x.ndim == 3;
  const int64_t T = x.dim(0), H = heads ? x.dim(1) : 1, D = x.dim(-1);
  const int64_t head_stride = heads ? x.stride[1] : 0;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, H * D));
  ctx.pool().ParallelFor(T, grain, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        float* r = x.as<float>() + t * x.stride[0] + h * head_stride;
        const float f = scale / std::sqrt(Dot(r, r, D) + eps);
        for (int64_t d = 0; d < D; ++d) r[d] *= f;
      }
    }
  });
}

void GatedDeltaRule(DeviceContext& ctx, TensorView out, TensorView q, TensorView k, TensorView v,
                    TensorView g, TensorView beta, float* state) {
  const int64_t T = q.dim(0), Hk = q.dim(1), Dk = q.dim(2), Hv = v.dim(1), Dv = v.dim(2);
  assert(k.dim(0) == T && k.dim(1) == Hk && k.dim(2) == Dk && v.dim(0) == T);
  assert(out.dim(0) == T && out.dim(1) == Hv && out.dim(2) == Dv);
  assert(g.dim(0) == T && g.dim(1) == Hv && beta.dim(0) == T && beta.dim(1) == Hv);
  assert(Hk > 0 && Hv % Hk == 0);
  if (T == 0) return;
  const int64_t group = Hv / Hk;
  const int64_t n_tiles = (Dv + kTileW - 1) / kTileW;
  ctx.pool().ParallelFor(Hv, 1, [&](int64_t h0, int64_t h1, int) {
    const bool in_place = UpdateInPlace(T, Dv);
    Buffer scratch(in_place ? 0 : sizeof(float) * n_tiles * Dk * kTileW);
    std::vector<Token> tok(std::min(kChunk, T));
    for (int64_t h = h0; h < h1; ++h) {
      DeltaRuleHead(out, q, k, v, g, beta, h, h / group, state + h * Dk * Dv,
                    in_place ? nullptr : scratch.as<float>(), tok);
    }
  });
}

}  // namespace uniprefill::ops::cpu
