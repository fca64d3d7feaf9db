// ArgMax and Sample (cuda_sampling.h).
//
// Order. Every logit gets a 32-bit key, increasing with its value (NaN -> -inf, -0 -> +0 first, as
// the CPU treats them), and a 64-bit composite (key << 32 | ~id) whose descending order is the CPU
// sampler's ByLogitDesc (higher logit, then lower id). Every filter keeps a prefix of that order,
// so the kept set is a Cut: the elements up to and including (key, id).
//
// ArgMax: ArgMaxPartialKernel (grid chunks x rows, 256 threads) reduces a chunk of a row to its max
// composite and its (max, sum of exp(l - max)); ArgMaxFinalKernel (a warp per row) merges the
// chunks and writes the id and the raw log-softmax. The chunk count fills the GPU when rows are
// few.
//
// Sample: one thread-block cluster of 8 CTAs x 1024 threads per row (SampleKernel). CTA r holds ids
// [r * S, (r + 1) * S) of the row in shared memory (S = ceil(V / 8): 128 KB at V = 262144), so
// every later pass reads shared memory; cluster-wide sums go through distributed shared memory
// (each CTA publishes its partials, one cluster barrier, every CTA adds the 8 in rank order, so all
// CTAs take identical decisions and run the same barriers). The steps mirror Sampler::Distribution
// and Sampler::Sample:
//   max        the row's max composite: greedy rows and rows with an infinite max (the CPU's
//              degenerate softmax) take it and stop.
//   top-k      Crossing with unit weights: the k-th element of the order (exact).
//   top-p      Crossing with weights exp(l - max) and target top_p * total: the first element whose
//              cumulative mass reaches it (total over the top-k set when top-k cut).
//   min-p      a Cut at the smallest float >= max + log(min_p) (the CPU's l >= threshold, exact).
//   draw       sorted order (top-k cut or top-p on): Crossing with exp((l - max) / T) and target
//              u * total (strict: the CPU draws the first token with u < cumulative probability);
//              id order otherwise: IdSelect, a scan over ids.
// Crossing narrows a key interval (lo, hi] that holds the crossing element: each pass evaluates
// the cumulative mass at 8 thresholds (value-space splits, the first pass geometric below the max,
// key-space splits when values run out) and tightens the interval to its elements' min/max keys;
// once at most 4096 elements of the cut lie in it (or above lo: then the whole prefix from the top)
// they are compacted into rank 0's shared memory, sorted (bitonic) and walked with double-precision
// weights. An interval of one key whose ties exceed 4096 resolves the tie in id order (IdSelect).
// When a crossing compacted the whole prefix from the top, rank 0 finishes the remaining steps on
// its sorted candidates alone, as the CPU does (double weights, sums of probabilities in order),
// and the other CTAs exit.
// Precision: passes sum f32 exponentials (expf: <= 2 ulp) in double; only the final walks use
// double exp, so a crossing can differ from the CPU's where the cumulative probability is within
// ~1e-6 of the target (see the header).
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cub/block/block_scan.cuh>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_sampling.h"

namespace uniprefill::ops::cuda {
namespace {

namespace cg = cooperative_groups;
using u64 = unsigned long long;

constexpr float kInf = __builtin_huge_valf();

// ---- Order ----

__device__ __forceinline__ uint32_t Key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float ValueOf(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}
// NaN counts as -inf (never wins), -0 as +0 (equal logits tie by id).
__device__ __forceinline__ float Canonical(float f) {
  if (f != f) return -kInf;
  return f == 0.0f ? 0.0f : f;
}
__device__ __forceinline__ u64 Composite(uint32_t key, int id) {
  return (static_cast<u64>(key) << 32) | (0xffffffffu - static_cast<uint32_t>(id));
}
__device__ __forceinline__ int CompositeId(u64 c) {
  return static_cast<int>(0xffffffffu - static_cast<uint32_t>(c));
}
__device__ __forceinline__ uint32_t CompositeKey(u64 c) { return static_cast<uint32_t>(c >> 32); }

__device__ __forceinline__ u64 WarpMaxU64(u64 v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The engine's logprob (batch_engine.cc WithLogprobs): raw logit - (max + log(sum exp(l - max))).
__device__ __forceinline__ float LogProb(float raw, float m, double sum) {
  if (!isfinite(m)) return __int_as_float(0x7fc00000);
  const float log_z = m + static_cast<float>(log(sum));
  return raw - log_z;
}

// ---- ArgMax ----

constexpr int kArgMaxThreads = 256;
constexpr int64_t kArgMaxMinChunk = 4096;

struct ArgMaxPartial {
  u64 best;  // max composite
  float m;   // max logit
  float s;   // sum of exp(l - m)
};

// Merges a running (max, sum of exp(l - max)) with another.
__device__ __forceinline__ void MergeSoftmax(float& m, float& s, float om, float os) {
  const float mn = fmaxf(m, om);
  if (mn == -kInf) return;
  s = (m == -kInf ? 0.0f : s * expf(m - mn)) + (om == -kInf ? 0.0f : os * expf(om - mn));
  m = mn;
}

__global__ void __launch_bounds__(kArgMaxThreads)
    ArgMaxPartialKernel(const float* logits, int64_t row_stride, int64_t vocab, int64_t chunk_len,
                        ArgMaxPartial* part) {
  const int chunk = blockIdx.x, row = blockIdx.y;
  const float* x = logits + row * row_stride;
  const int64_t begin = chunk * chunk_len, end = min(vocab, begin + chunk_len);
  u64 best = 0;
  float m = -kInf, s = 0.0f;
#pragma unroll 4
  for (int64_t i = begin + threadIdx.x; i < end; i += kArgMaxThreads) {
    const float l = Canonical(__ldg(x + i));
    best = max(best, Composite(Key(l), static_cast<int>(i)));
    if (l > m) {
      s = (m == -kInf ? 0.0f : s * expf(m - l)) + 1.0f;
      m = l;
    } else if (l != -kInf) {
      s += expf(l - m);
    }
  }
  best = WarpMaxU64(best);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float om = __shfl_xor_sync(0xffffffffu, m, o), os = __shfl_xor_sync(0xffffffffu, s, o);
    MergeSoftmax(m, s, om, os);
  }
  __shared__ ArgMaxPartial warps[kArgMaxThreads / 32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) warps[warp] = {best, m, s};
  __syncthreads();
  if (threadIdx.x == 0) {
    ArgMaxPartial p = warps[0];
    for (int w = 1; w < kArgMaxThreads / 32; ++w) {
      p.best = max(p.best, warps[w].best);
      MergeSoftmax(p.m, p.s, warps[w].m, warps[w].s);
    }
    part[static_cast<int64_t>(row) * gridDim.x + chunk] = p;
  }
}

// One warp per row.
__global__ void ArgMaxFinalKernel(const ArgMaxPartial* part, int chunks, const float* logits,
                                  int64_t row_stride, int32_t* ids, float* logprobs) {
  const int row = blockIdx.x, lane = threadIdx.x;
  u64 best = 0;
  float m = -kInf, s = 0.0f;
  for (int c = lane; c < chunks; c += 32) {
    const ArgMaxPartial p = part[static_cast<int64_t>(row) * chunks + c];
    best = max(best, p.best);
    MergeSoftmax(m, s, p.m, p.s);
  }
  best = WarpMaxU64(best);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float om = __shfl_xor_sync(0xffffffffu, m, o), os = __shfl_xor_sync(0xffffffffu, s, o);
    MergeSoftmax(m, s, om, os);
  }
  if (lane == 0) {
    const int id = CompositeId(best);
    ids[row] = id;
    if (logprobs != nullptr) logprobs[row] = LogProb(logits[row * row_stride + id], m, s);
  }
}

// ---- Sample ----

constexpr int kCtas = 8;  // CTAs per row: one cluster
constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kCap = 4096;  // candidates rank 0 sorts and walks
constexpr int kCapItems = kCap / kThreads;
constexpr int kSplits = 8;        // thresholds per narrowing pass
constexpr int kValuePasses = 24;  // passes after which Crossing splits keys only
constexpr int kMaxPasses = 64;    // a safety net (key splits converge in ~11 passes)

using BlockScanD = cub::BlockScan<double, kThreads>;
using BlockScanI = cub::BlockScan<int, kThreads>;

// The kept prefix: elements with key > cut.key, or key == cut.key and id <= cut.id.
struct Cut {
  uint32_t key;
  int32_t id;
};
constexpr Cut kAll = {0u, INT_MAX};
__device__ __forceinline__ bool InCut(uint32_t k, int id, Cut c) {
  return k > c.key || (k == c.key && id <= c.id);
}
__device__ __forceinline__ bool Earlier(Cut a, Cut b) {
  return a.key > b.key || (a.key == b.key && a.id < b.id);
}

// Pass weights (f32): 1, or exp((l - m) * inv_t).
struct Weight {
  float m;
  float inv_t;
  bool unit;
};
__device__ __forceinline__ float PassWeight(const Weight& w, float l) {
  return w.unit ? 1.0f : expf((l - w.m) * w.inv_t);
}
// Walk weights (double, the CPU's expressions): 1 (t == 0), or exp((l - m) / t).
__device__ __forceinline__ double ExactWeight(u64 comp, double m, double t) {
  if (t == 0.0) return 1.0;
  return exp((static_cast<double>(ValueOf(CompositeKey(comp))) - m) / t);
}
__device__ __forceinline__ bool Reached(double f, double tau, bool strict) {
  return strict ? f > tau : f >= tau;
}

struct Found {
  uint32_t key;
  int32_t id;
  int32_t index;     // position among rank 0's sorted candidates (-1 for a tie resolution)
  int32_t from_top;  // the candidates are the whole prefix of the cut from the top
};

struct SampleShared {
  double xd[2][kSplits];  // published CTA partials, read by the whole cluster (phase-alternated)
  int xc[2][kSplits];
  uint32_t xk[2][2];  // published min / max keys
  u64 xu[2];
  double warp_m[kWarps][kSplits];
  float warp_c[kWarps][kSplits];
  uint32_t warp_k[kWarps][2];
  u64 warp_u[kWarps];
  double warp_d[kWarps];
  int warp_i[kWarps];
  double res_d[kSplits];  // cluster totals of the last exchange
  int res_c[kSplits];
  uint32_t res_k[2];
  u64 res_u;
  double sel_t, sel_before;
  int sel_target, sel_last, sel_warp;
  Found found;  // pushed into every CTA by the CTA that decides
  int pick;
  union {
    BlockScanD::TempStorage d;
    BlockScanI::TempStorage i;
  } scan;
};

struct RowArgs {
  const float* logits;
  int64_t row_stride;
  int vocab;
  int slice;  // elements per CTA
  const SamplingRow* rows;
  const float* uniforms;
  int32_t* ids;
  float* logprobs;
};

// Per-CTA state of one row; every field is identical across the cluster except the slice.
struct Ctx {
  SampleShared* sh;
  u64* cand;           // [kCap] (rank 0's is the one used)
  const float* slice;  // this CTA's logits, canonical
  int n_local;         // elements in this CTA
  int id_base;         // id of slice[0]
  int rank;
  int vocab;
  int phase;
  float m;  // the row's max
  uint32_t top_key;
  int top_id;
};

// Sums N (mass, count) pairs over the cluster: cluster totals land in sh.res_d / res_c. With
// kKeys, also the min / max of the keys passed (res_k). One cluster barrier. (Counts travel as
// floats within a warp: exact, a warp holds far fewer than 2^24 elements.)
template <int N, bool kKeys>
__device__ void ClusterSum(Ctx& c, double (&mass)[N], float (&count)[N], uint32_t kmin = 0,
                           uint32_t kmax = 0) {
  SampleShared& sh = *c.sh;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      mass[i] += __shfl_xor_sync(0xffffffffu, mass[i], o);
      count[i] += __shfl_xor_sync(0xffffffffu, count[i], o);
    }
    if (kKeys) {
      kmin = min(kmin, __shfl_xor_sync(0xffffffffu, kmin, o));
      kmax = max(kmax, __shfl_xor_sync(0xffffffffu, kmax, o));
    }
  }
  if (lane == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      sh.warp_m[warp][i] = mass[i];
      sh.warp_c[warp][i] = count[i];
    }
    sh.warp_k[warp][0] = kmin;
    sh.warp_k[warp][1] = kmax;
  }
  __syncthreads();
  const int t = threadIdx.x;
  if (t < N) {
    double s = 0.0;
    int n = 0;
    for (int w = 0; w < kWarps; ++w) {
      s += sh.warp_m[w][t];
      n += static_cast<int>(sh.warp_c[w][t]);
    }
    sh.xd[c.phase][t] = s;
    sh.xc[c.phase][t] = n;
  } else if (kKeys && t < N + 2) {
    uint32_t k = t == N ? 0xffffffffu : 0u;
    for (int w = 0; w < kWarps; ++w) {
      k = t == N ? min(k, sh.warp_k[w][0]) : max(k, sh.warp_k[w][1]);
    }
    sh.xk[c.phase][t - N] = k;
  }
  cg::this_cluster().sync();
  if (t < N) {
    double s = 0.0;
    int n = 0;
    for (int r = 0; r < kCtas; ++r) {
      const SampleShared* rs = cg::this_cluster().map_shared_rank(c.sh, r);
      s += rs->xd[c.phase][t];
      n += rs->xc[c.phase][t];
    }
    sh.res_d[t] = s;
    sh.res_c[t] = n;
  } else if (kKeys && t < N + 2) {
    uint32_t k = t == N ? 0xffffffffu : 0u;
    for (int r = 0; r < kCtas; ++r) {
      const SampleShared* rs = cg::this_cluster().map_shared_rank(c.sh, r);
      k = t == N ? min(k, rs->xk[c.phase][0]) : max(k, rs->xk[c.phase][1]);
    }
    sh.res_k[t - N] = k;
  }
  __syncthreads();
  c.phase ^= 1;
}

// The max of v over the cluster. One cluster barrier.
__device__ u64 ClusterMax(Ctx& c, u64 v) {
  SampleShared& sh = *c.sh;
  v = WarpMaxU64(v);
  if ((threadIdx.x & 31) == 0) sh.warp_u[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    u64 b = 0;
    for (int w = 0; w < kWarps; ++w) b = max(b, sh.warp_u[w]);
    sh.xu[c.phase] = b;
  }
  cg::this_cluster().sync();
  if (threadIdx.x == 0) {
    u64 b = 0;
    for (int r = 0; r < kCtas; ++r) {
      b = max(b, cg::this_cluster().map_shared_rank(c.sh, r)->xu[c.phase]);
    }
    sh.res_u = b;
  }
  __syncthreads();
  c.phase ^= 1;
  return sh.res_u;
}

// Copies this CTA's part of the row into shared memory (canonical values) and finds the row's max.
// 16-byte loads after a scalar head up to 16-byte alignment (rows of odd V start anywhere), four
// per thread in flight: 32 KB per SM.
__device__ void LoadRow(Ctx& c, const float* row, float* slice) {
  const float* src = row + c.id_base;
  const int n = c.n_local;
  const int head =
      min(n, static_cast<int>((16 - (reinterpret_cast<uintptr_t>(src) & 15)) & 15) / 4);
  u64 best = 0;
  const auto take = [&](int i, float raw) {
    const float l = Canonical(raw);
    slice[i] = l;
    best = max(best, Composite(Key(l), c.id_base + i));
  };
  for (int i = threadIdx.x; i < head; i += kThreads) take(i, __ldg(src + i));
  const int nvec = (n - head) / 4;
  const float4* vsrc = reinterpret_cast<const float4*>(src + head);
#pragma unroll 4
  for (int v = threadIdx.x; v < nvec; v += kThreads) {
    const float4 f = __ldg(vsrc + v);
    const int i = head + 4 * v;
    take(i, f.x);
    take(i + 1, f.y);
    take(i + 2, f.z);
    take(i + 3, f.w);
  }
  for (int i = head + 4 * nvec + threadIdx.x; i < n; i += kThreads) take(i, __ldg(src + i));
  best = ClusterMax(c, best);  // its __syncthreads also publishes the slice to the CTA
  c.top_key = CompositeKey(best);
  c.top_id = CompositeId(best);
  c.m = ValueOf(c.top_key);
}

// Pass-weight mass and count of the cut's elements.
__device__ void Mass(Ctx& c, Cut p, const Weight& w, double& mass, int& count) {
  double s[1] = {0.0};
  float n[1] = {0.0f};
  for (int i = threadIdx.x; i < c.n_local; i += kThreads) {
    const float l = c.slice[i];
    if (InCut(Key(l), c.id_base + i, p)) {
      s[0] += PassWeight(w, l);
      n[0] += 1.0f;
    }
  }
  ClusterSum<1, false>(c, s, n);
  mass = c.sh->res_d[0];
  count = c.sh->res_c[0];
}

// Writes `f` into the `found` slot of every CTA of the cluster (call from one thread).
__device__ void PushFound(Ctx& c, const Found& f) {
  for (int r = 0; r < kCtas; ++r) cg::this_cluster().map_shared_rank(c.sh, r)->found = f;
}

// Thresholds strictly inside (k_lo, k_hi), non-increasing (k_hi - k_lo >= 2).
__device__ void Thresholds(uint32_t k_lo, uint32_t k_hi, float scale, bool first_pass,
                           bool keys_only, uint32_t (&kt)[kSplits]) {
  const float hv = ValueOf(k_hi), lv = ValueOf(k_lo);
  const bool lo_finite = k_lo != 0 && isfinite(lv);
  bool ok = !keys_only && isfinite(hv) && (lo_finite || first_pass);
  if (ok) {
#pragma unroll
    for (int j = 0; j < kSplits; ++j) {
      // Geometric below the max on the first pass (0.25 .. 4096 times the scale), else even.
      const double t = lo_finite ? hv - (j + 1) * (static_cast<double>(hv) - lv) / (kSplits + 1)
                                 : hv - static_cast<double>(scale) * ldexp(1.0, 2 * j - 2);
      const uint32_t k = min(max(Key(static_cast<float>(t)), k_lo + 1), k_hi - 1);
      kt[j] = k;
      if (j > 0 && k >= kt[j - 1]) ok = false;
    }
  }
  if (!ok) {
    const u64 span = k_hi - k_lo;
#pragma unroll
    for (int j = 0; j < kSplits; ++j) {
      const u64 step = max(1ull, (j + 1) * span / (kSplits + 1));
      kt[j] = static_cast<uint32_t>(k_hi - step);
    }
  }
}

// Rank 0: sorts its n candidates in descending composite order (bitonic, zero-padded to a power
// of two; zero sorts last since every element's composite is positive).
__device__ void SortCandidates(u64* cand, int n) {
  int npad = 2;
  while (npad < n) npad <<= 1;
  for (int i = n + threadIdx.x; i < npad; i += kThreads) cand[i] = 0;
  __syncthreads();
  for (int k = 2; k <= npad; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < npad; i += kThreads) {
        const int ixj = i ^ j;
        if (ixj > i) {
          const u64 a = cand[i], b = cand[ixj];
          const bool descending = (i & k) == 0;
          if (descending ? a < b : a > b) {
            cand[i] = b;
            cand[ixj] = a;
          }
        }
      }
      __syncthreads();
    }
  }
}

// Rank 0: the first index i < n where base + sum_{j <= i} v_j reaches tau, v_j = ExactWeight of
// candidate j (divided by the sum of the n weights when `normalise`, i.e. probabilities); -1 when
// none does.
__device__ int WalkFirst(Ctx& c, int n, double t, bool normalise, double base, double tau,
                         bool strict) {
  SampleShared& sh = *c.sh;
  const double m = c.m;
  double v[kCapItems];
  double sum = 0.0;
  const int i0 = threadIdx.x * kCapItems;
#pragma unroll
  for (int k = 0; k < kCapItems; ++k) {
    v[k] = i0 + k < n ? ExactWeight(c.cand[i0 + k], m, t) : 0.0;
    sum += v[k];
  }
  double excl, total;
  BlockScanD(sh.scan.d).ExclusiveSum(sum, excl, total);
  __syncthreads();
  if (normalise) {
    sum = 0.0;
#pragma unroll
    for (int k = 0; k < kCapItems; ++k) {
      v[k] /= total;
      sum += v[k];
    }
    BlockScanD(sh.scan.d).ExclusiveSum(sum, excl);
    __syncthreads();
  }
  if (threadIdx.x == 0) sh.pick = INT_MAX;
  __syncthreads();
  double cum = base + excl;
#pragma unroll
  for (int k = 0; k < kCapItems; ++k) {
    cum += v[k];
    if (i0 + k < n && Reached(cum, tau, strict)) {
      atomicMin(&sh.pick, i0 + k);
      break;
    }
  }
  __syncthreads();
  const int first = sh.pick;
  __syncthreads();
  return first == INT_MAX ? -1 : first;
}

// Rank 0: the last index i < n whose ExactWeight is positive, or -1.
__device__ int LastPositive(Ctx& c, int n, double t) {
  SampleShared& sh = *c.sh;
  if (threadIdx.x == 0) sh.pick = -1;
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += kThreads) {
    if (ExactWeight(c.cand[i], c.m, t) > 0.0) atomicMax(&sh.pick, i);
  }
  __syncthreads();
  const int last = sh.pick;
  __syncthreads();
  return last;
}

// Compacts the cut's elements with key in (k_lo, k_hi] into rank 0's candidates; returns their
// count (identical on every CTA). Two cluster barriers.
__device__ int Compact(Ctx& c, Cut p, uint32_t k_lo, uint32_t k_hi) {
  SampleShared& sh = *c.sh;
  int mine = 0;
  for (int i = threadIdx.x; i < c.n_local; i += kThreads) {
    const uint32_t k = Key(c.slice[i]);
    mine += k > k_lo && k <= k_hi && InCut(k, c.id_base + i, p);
  }
  int offset, total;
  BlockScanI(sh.scan.i).ExclusiveSum(mine, offset, total);
  if (threadIdx.x == 0) sh.xc[c.phase][0] = total;
  cg::this_cluster().sync();
  if (threadIdx.x == 0) {
    int base = 0, n = 0;
    for (int r = 0; r < kCtas; ++r) {
      const int t = cg::this_cluster().map_shared_rank(c.sh, r)->xc[c.phase][0];
      if (r < c.rank) base += t;
      n += t;
    }
    sh.res_c[0] = base;
    sh.res_c[1] = n;
  }
  __syncthreads();
  const int base = sh.res_c[0], n = sh.res_c[1];
  c.phase ^= 1;
  u64* dst = cg::this_cluster().map_shared_rank(c.cand, 0);
  int at = base + offset;
  for (int i = threadIdx.x; i < c.n_local; i += kThreads) {
    const uint32_t k = Key(c.slice[i]);
    const int id = c.id_base + i;
    if (k > k_lo && k <= k_hi && InCut(k, id, p)) dst[at++] = Composite(k, id);
  }
  cg::this_cluster().sync();
  return n;
}

// The first element in ascending id order, among the cut's elements (with key == eq_key unless
// eq_key is 0), at which the cumulative pass weight reaches tau (tau * total when `fraction`).
// When none does (rounding), the last selected element with positive weight; failing that, the
// row's top. Identical result on every CTA.
__device__ int IdSelect(Ctx& c, Cut p, uint32_t eq_key, const Weight& w, double tau, bool fraction,
                        bool strict) {
  SampleShared& sh = *c.sh;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // Warp w owns 32-element chunks [c0, c1) of the slice (lanes read consecutive elements).
  const int nchunks = (c.n_local + 31) / 32, per_warp = (nchunks + kWarps - 1) / kWarps;
  const int c0 = warp * per_warp, c1 = min(nchunks, c0 + per_warp);
  double s = 0.0;
  int last = -1;
  for (int ch = c0; ch < c1; ++ch) {
    const int i = ch * 32 + lane;
    if (i >= c.n_local) continue;
    const float l = c.slice[i];
    const uint32_t k = Key(l);
    if (!InCut(k, c.id_base + i, p) || (eq_key != 0 && k != eq_key)) continue;
    const float wv = PassWeight(w, l);
    s += wv;
    if (wv > 0.0f) last = max(last, c.id_base + i);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    s += __shfl_xor_sync(0xffffffffu, s, o);
    last = max(last, __shfl_xor_sync(0xffffffffu, last, o));
  }
  if (lane == 0) {
    sh.warp_d[warp] = s;
    sh.warp_i[warp] = last;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double cs = 0.0;
    int cl = -1;
    for (int v = 0; v < kWarps; ++v) {
      cs += sh.warp_d[v];
      cl = max(cl, sh.warp_i[v]);
    }
    sh.xd[c.phase][0] = cs;
    sh.xc[c.phase][0] = cl;
  }
  cg::this_cluster().sync();
  if (threadIdx.x == 0) {
    double sums[kCtas], total = 0.0;
    int last_all = -1;
    for (int r = 0; r < kCtas; ++r) {
      const SampleShared* rs = cg::this_cluster().map_shared_rank(c.sh, r);
      sums[r] = rs->xd[c.phase][0];
      last_all = max(last_all, rs->xc[c.phase][0]);
      total += sums[r];
    }
    const double t = fraction ? tau * total : tau;
    int target = -1;
    double cum = 0.0, before = 0.0;
    if (Reached(total, t, strict)) {
      for (int r = 0; r < kCtas; ++r) {
        if (Reached(cum + sums[r], t, strict)) {
          target = r;
          before = cum;
          break;
        }
        cum += sums[r];
      }
    }
    sh.sel_t = t;
    sh.sel_before = before;
    sh.sel_target = target;
    sh.sel_last = last_all >= 0 ? last_all : c.top_id;
  }
  __syncthreads();
  c.phase ^= 1;
  const int target = sh.sel_target;
  if (target < 0) {
    const int id = sh.sel_last;
    cg::this_cluster().sync();  // keeps the barrier count uniform with the other branch
    return id;
  }
  if (c.rank == target) {
    const double t = sh.sel_t;
    if (threadIdx.x == 0) {
      double cum = sh.sel_before;
      int wsel = -1;
      double before_w = cum;
      for (int v = 0; v < kWarps; ++v) {
        if (Reached(cum + sh.warp_d[v], t, strict)) {
          wsel = v;
          before_w = cum;
          break;
        }
        cum += sh.warp_d[v];
      }
      sh.sel_warp = wsel;
      sh.sel_before = before_w;
      if (wsel < 0) {  // rounding: the CTA's last selected element with weight
        int cl = -1;
        for (int v = 0; v < kWarps; ++v) cl = max(cl, sh.warp_i[v]);
        PushFound(c, Found{0u, cl >= 0 ? cl : c.top_id, -1, 0});
      }
    }
    __syncthreads();
    if (warp == sh.sel_warp) {
      double cum = sh.sel_before;
      int res = -1;
      for (int ch = c0; ch < c1 && res < 0; ++ch) {
        const int i = ch * 32 + lane;
        double v = 0.0;
        bool sel = false;
        if (i < c.n_local) {
          const float l = c.slice[i];
          const uint32_t k = Key(l);
          sel = InCut(k, c.id_base + i, p) && (eq_key == 0 || k == eq_key);
          if (sel) v = PassWeight(w, l);
        }
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const double y = __shfl_up_sync(0xffffffffu, v, o);
          if (lane >= o) v += y;
        }
        const unsigned hit = __ballot_sync(0xffffffffu, sel && Reached(cum + v, t, strict));
        if (hit != 0) res = c.id_base + ch * 32 + __ffs(hit) - 1;
        cum += __shfl_sync(0xffffffffu, v, 31);
      }
      if (res < 0) res = sh.warp_i[warp] >= 0 ? sh.warp_i[warp] : c.top_id;
      if (lane == 0) PushFound(c, Found{0u, res, -1, 0});
    }
  }
  cg::this_cluster().sync();
  return sh.found.id;
}

// The first element of the cut's order at which the cumulative weight reaches tau (strict: exceeds
// it), for pass weights `w` (threshold spacing `scale`) and walk weights with t (0: unit).
// p_mass / p_count: the cut's pass-weight total and size. When tau is not reached even by the
// total (rounding), the last element with weight. Identical result on every CTA.
__device__ Found Crossing(Ctx& c, Cut p, const Weight& w, float scale, double t, double tau,
                          bool strict, double p_mass, int p_count) {
  SampleShared& sh = *c.sh;
  if (Reached(0.0, tau, strict)) return Found{c.top_key, c.top_id, -1, 0};  // the first element
  if (!Reached(p_mass, tau, strict)) {
    tau = p_mass;
    strict = false;
  }
  // Invariants: the cumulative weight above k_hi (mass_hi, over cnt_hi elements) has not reached
  // tau, the one above k_lo (over cnt_lo elements) has; no element has a key above top_key.
  uint32_t k_lo = 0, k_hi = c.top_key;
  double mass_hi = 0.0;
  int cnt_hi = 0, cnt_lo = p_count;
  bool ties = false;
  for (int pass = 0;; ++pass) {
    if (cnt_lo <= kCap) {  // the whole prefix fits: take it from the top
      k_hi = c.top_key;
      mass_hi = 0.0;
      cnt_hi = 0;
      break;
    }
    if (cnt_lo - cnt_hi <= kCap) break;
    if (k_hi - k_lo <= 1 || pass >= kMaxPasses) {
      ties = true;
      break;
    }
    uint32_t kt[kSplits];
    Thresholds(k_lo, k_hi, scale, pass == 0, pass >= kValuePasses, kt);
    double acc[kSplits];
    float cnt[kSplits];
#pragma unroll
    for (int j = 0; j < kSplits; ++j) {
      acc[j] = 0.0;
      cnt[j] = 0.0f;
    }
    uint32_t kmin = 0xffffffffu, kmax = 0u;
    for (int i = threadIdx.x; i < c.n_local; i += kThreads) {
      const float l = c.slice[i];
      const uint32_t k = Key(l);
      if (k <= k_lo || k > k_hi || !InCut(k, c.id_base + i, p)) continue;
      const float wv = PassWeight(w, l);
      kmin = min(kmin, k);
      kmax = max(kmax, k);
#pragma unroll
      for (int j = 0; j < kSplits; ++j) {
        if (k > kt[j]) {
          acc[j] += wv;
          cnt[j] += 1.0f;
        }
      }
    }
    ClusterSum<kSplits, true>(c, acc, cnt, kmin, kmax);
    int jr = kSplits;
    for (int j = 0; j < kSplits; ++j) {
      if (Reached(mass_hi + sh.res_d[j], tau, strict)) {
        jr = j;
        break;
      }
    }
    const uint32_t in_min = sh.res_k[0], in_max = sh.res_k[1];
    if (jr < kSplits) {
      const int new_cnt_lo = cnt_hi + sh.res_c[jr];
      if (jr > 0) {
        mass_hi += sh.res_d[jr - 1];
        cnt_hi += sh.res_c[jr - 1];
        k_hi = kt[jr - 1];
      }
      k_lo = kt[jr];
      cnt_lo = new_cnt_lo;
    } else {
      mass_hi += sh.res_d[kSplits - 1];
      cnt_hi += sh.res_c[kSplits - 1];
      k_hi = kt[kSplits - 1];
    }
    // No element of the old interval lies above in_max or at / below in_min - 1: tighten.
    if (in_max > k_lo) k_hi = min(k_hi, in_max);
    if (in_min - 1 < k_hi) k_lo = max(k_lo, in_min - 1);
  }

  if (ties) {
    // Every remaining candidate has key k_hi: equal weights, taken in id order.
    const double wt = PassWeight(w, ValueOf(k_hi));
    const int count = cnt_lo - cnt_hi;
    const double need = (tau - mass_hi) / wt;
    long long n = count;
    if (need >= 0.0 && need < static_cast<double>(count)) {
      n = strict ? static_cast<long long>(floor(need)) + 1 : static_cast<long long>(ceil(need));
    }
    n = min(max(n, 1ll), static_cast<long long>(count));
    const Weight unit{0.0f, 0.0f, true};
    const int id = IdSelect(c, p, k_hi, unit, static_cast<double>(n), false, false);
    return Found{k_hi, id, -1, 0};
  }

  const int n = Compact(c, p, k_lo, k_hi);
  if (c.rank == 0) {
    SortCandidates(c.cand, n);
    int i = WalkFirst(c, n, t, false, mass_hi, tau, strict);
    if (i < 0) i = LastPositive(c, n, t);
    if (i < 0) i = n - 1;
    if (threadIdx.x == 0) {
      const u64 comp = c.cand[i];
      PushFound(c, Found{CompositeKey(comp), CompositeId(comp), i, cnt_hi == 0 ? 1 : 0});
    }
  }
  cg::this_cluster().sync();
  return sh.found;
}

// Rank 0 alone, when its candidates are the sorted prefix of the cut from the top and the first
// n_keep of them are kept: the remaining filters and the draw, as the CPU runs them.
__device__ int FinishInSmem(Ctx& c, int n_keep, bool top_p_pending, const SamplingRow& rp,
                            float u) {
  SampleShared& sh = *c.sh;
  if (top_p_pending && n_keep > 1) {
    const int i = WalkFirst(c, n_keep, 1.0, true, 0.0, static_cast<double>(rp.top_p), false);
    if (i >= 0) n_keep = i + 1;
  }
  if (rp.min_p > 0.0f && n_keep > 1) {
    const double thr = static_cast<double>(c.m) + log(static_cast<double>(rp.min_p));
    if (threadIdx.x == 0) sh.pick = n_keep;
    __syncthreads();
    for (int i = threadIdx.x; i < n_keep; i += kThreads) {
      if (static_cast<double>(ValueOf(CompositeKey(c.cand[i]))) < thr) atomicMin(&sh.pick, i);
    }
    __syncthreads();
    n_keep = max(sh.pick, 1);
    __syncthreads();
  }
  if (n_keep == 1) return CompositeId(c.cand[0]);
  const double t = rp.temperature;
  int i = WalkFirst(c, n_keep, t, true, 0.0, static_cast<double>(u), true);
  if (i < 0) i = LastPositive(c, n_keep, t);
  if (i < 0) i = 0;
  return CompositeId(c.cand[i]);
}

// The sampled token of a non-greedy row with a finite max; -1 on CTAs other than rank 0 when rank
// 0 finishes alone (those CTAs must then exit without another cluster barrier).
__device__ int SampleRow(Ctx& c, const SamplingRow& rp, float u, double z1) {
  const bool k_cut = rp.top_k > 0 && rp.top_k < c.vocab;
  const int size_k = k_cut ? rp.top_k : c.vocab;
  const bool top_p_on = rp.top_p < 1.0f && size_k > 1;
  const Weight w1{c.m, 1.0f, false};
  Cut cut = kAll;
  bool sorted = false;
  if (k_cut) {
    sorted = true;
    const Weight unit{0.0f, 0.0f, true};
    const Found f = Crossing(c, kAll, unit, 1.0f, 0.0, static_cast<double>(rp.top_k), false,
                             static_cast<double>(c.vocab), c.vocab);
    cut = {f.key, f.id};
    if (f.from_top) return c.rank == 0 ? FinishInSmem(c, f.index + 1, top_p_on, rp, u) : -1;
  }
  if (top_p_on) {
    sorted = true;
    double z = z1;
    int count = c.vocab;
    if (k_cut) Mass(c, cut, w1, z, count);
    const Found f =
        Crossing(c, cut, w1, 1.0f, 1.0, static_cast<double>(rp.top_p) * z, false, z, count);
    cut = {f.key, f.id};
    if (f.from_top) return c.rank == 0 ? FinishInSmem(c, f.index + 1, false, rp, u) : -1;
  }
  const bool more_than_one =
      cut.key == 0 ? c.vocab > 1 : !(cut.key == c.top_key && cut.id == c.top_id);
  if (rp.min_p > 0.0f && more_than_one) {
    // The CPU keeps l >= max + log(min_p) (in double): l >= the smallest float >= that.
    const double thr = static_cast<double>(c.m) + log(static_cast<double>(rp.min_p));
    const Cut min_cut{Key(Canonical(__double2float_ru(thr))), INT_MAX};
    if (Earlier(min_cut, cut)) cut = min_cut;
  }
  const Weight wt{c.m, 1.0f / rp.temperature, false};
  int token;
  if (sorted) {
    double z;
    int count;
    Mass(c, cut, wt, z, count);
    token = Crossing(c, cut, wt, rp.temperature, static_cast<double>(rp.temperature),
                     static_cast<double>(u) * z, true, z, count)
                .id;
  } else {
    token = IdSelect(c, cut, 0u, wt, static_cast<double>(u), true, true);
  }
  return token;
}

__global__ void __cluster_dims__(kCtas, 1, 1) __launch_bounds__(kThreads, 1)
    SampleKernel(const RowArgs a) {
  extern __shared__ __align__(16) unsigned char dyn[];
  __shared__ SampleShared sh;
  const int row = blockIdx.y;
  Ctx c;
  c.sh = &sh;
  c.cand = reinterpret_cast<u64*>(dyn);
  float* slice = reinterpret_cast<float*>(dyn + kCap * sizeof(u64));
  c.slice = slice;
  c.rank = static_cast<int>(cg::this_cluster().block_rank());
  c.vocab = a.vocab;
  c.id_base = c.rank * a.slice;
  c.n_local = max(0, min(a.slice, a.vocab - c.id_base));
  c.phase = 0;
  const float* logits = a.logits + row * a.row_stride;
  LoadRow(c, logits, slice);

  const SamplingRow rp = a.rows[row];
  const float u = a.uniforms[row];
  const bool finite_max = isfinite(c.m);
  // The CPU: temperature <= 0 is greedy; an infinite max makes its softmax degenerate (the first
  // maximal token takes everything); top_k == 1 keeps only that token.
  const bool greedy = !(rp.temperature > 0.0f) || !finite_max || rp.top_k == 1;
  const bool top_p_full_row =
      rp.top_p < 1.0f && !(rp.top_k > 0 && rp.top_k < a.vocab) && a.vocab > 1;
  double z1 = 0.0;
  if (a.logprobs != nullptr || (!greedy && top_p_full_row)) {
    int count;
    Mass(c, kAll, Weight{c.m, 1.0f, false}, z1, count);
  }
  int token = c.top_id;
  if (!greedy) token = SampleRow(c, rp, u, z1);
  if (c.rank == 0 && threadIdx.x == 0) {
    a.ids[row] = token;
    if (a.logprobs != nullptr) a.logprobs[row] = LogProb(logits[token], c.m, z1);
  }
  // Every remote read above precedes a cluster barrier except in the greedy path's exchanges:
  // no CTA may exit while another still reads its shared memory.
  if (greedy) cg::this_cluster().sync();
}

[[noreturn]] void Fail(const char* op, const char* what) {
  std::fprintf(stderr, "%s: %s\n", op, what);
  std::abort();
}

void CheckLogits(const char* op, const TensorView& logits) {
  char msg[256];
  if (logits.dtype != DType::kF32 || logits.device != Device::kCuda || logits.ndim != 2 ||
      logits.stride[1] != 1 || logits.dim(1) < 1 || logits.dim(1) > INT32_MAX ||
      logits.dim(0) > 65535) {
    std::snprintf(msg, sizeof(msg),
                  "logits must be an f32 [B, V] CUDA view with a contiguous last dim, 1 <= V < "
                  "2^31 and B <= 65535 (got %s, device %d, last stride %lld)",
                  logits.ShapeString().c_str(), static_cast<int>(logits.device),
                  static_cast<long long>(logits.stride[1]));
    Fail(op, msg);
  }
}

int64_t ArgMaxChunks(DeviceContext& ctx, int rows, int64_t vocab) {
  const int64_t target = 2 * static_cast<int64_t>(ctx.cuda().sm_count());
  const int64_t by_size = (vocab + kArgMaxMinChunk - 1) / kArgMaxMinChunk;
  const int64_t want = (target + std::max(rows, 1) - 1) / std::max(rows, 1);
  return std::max<int64_t>(1, std::min(want, by_size));
}

int SliceLength(int64_t vocab) { return static_cast<int>((vocab + kCtas - 1) / kCtas); }
size_t SampleDynamicSmem(int64_t vocab) {
  return kCap * sizeof(u64) + sizeof(float) * static_cast<size_t>(SliceLength(vocab));
}
size_t SampleSmemLimit(DeviceContext& ctx) {
  cudaFuncAttributes attr{};
  UP_CUDA_CHECK(cudaFuncGetAttributes(&attr, SampleKernel));
  const size_t optin = ctx.cuda().properties().sharedMemPerBlockOptin;
  return optin > attr.sharedSizeBytes ? optin - attr.sharedSizeBytes : 0;
}

}  // namespace

size_t ArgMaxScratchBytes(DeviceContext& ctx, int rows, int64_t vocab) {
  if (rows <= 0 || vocab <= 0) return 0;
  return sizeof(ArgMaxPartial) * static_cast<size_t>(rows) * ArgMaxChunks(ctx, rows, vocab);
}

void ArgMax(DeviceContext& ctx, int32_t* ids, float* logprobs, TensorView logits, void* scratch,
            size_t scratch_bytes) {
  constexpr const char* kOp = "ArgMax";
  CheckLogits(kOp, logits);
  const int rows = static_cast<int>(logits.dim(0));
  const int64_t vocab = logits.dim(1);
  if (rows == 0) return;
  const int64_t chunks = ArgMaxChunks(ctx, rows, vocab);
  const size_t need = ArgMaxScratchBytes(ctx, rows, vocab);
  if (scratch == nullptr || scratch_bytes < need ||
      reinterpret_cast<uintptr_t>(scratch) % alignof(ArgMaxPartial) != 0) {
    char msg[160];
    std::snprintf(msg, sizeof(msg),
                  "scratch of %zu bytes is too small or misaligned (need %zu: ArgMaxScratchBytes)",
                  scratch_bytes, need);
    Fail(kOp, msg);
  }
  const int64_t chunk_len = (vocab + chunks - 1) / chunks;
  auto* part = static_cast<ArgMaxPartial*>(scratch);
  cudaStream_t stream = ctx.cuda().stream();
  ArgMaxPartialKernel<<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(rows)),
                        kArgMaxThreads, 0, stream>>>(logits.as<const float>(), logits.stride[0],
                                                     vocab, chunk_len, part);
  UP_CUDA_CHECK_LAUNCH();
  ArgMaxFinalKernel<<<static_cast<unsigned>(rows), 32, 0, stream>>>(
      part, static_cast<int>(chunks), logits.as<const float>(), logits.stride[0], ids, logprobs);
  UP_CUDA_CHECK_LAUNCH();
}

int64_t MaxSampleVocab(DeviceContext& ctx) {
  const size_t limit = SampleSmemLimit(ctx);
  if (limit <= kCap * sizeof(u64)) return 0;
  return static_cast<int64_t>((limit - kCap * sizeof(u64)) / sizeof(float)) * kCtas;
}

void Sample(DeviceContext& ctx, int32_t* ids, float* logprobs, TensorView logits,
            const SamplingRow* rows, const float* uniforms) {
  constexpr const char* kOp = "Sample";
  CheckLogits(kOp, logits);
  const int64_t batch = logits.dim(0), vocab = logits.dim(1);
  if (batch == 0) return;
  const size_t smem = SampleDynamicSmem(vocab);
  if (smem > SampleSmemLimit(ctx)) {
    char msg[200];
    std::snprintf(msg, sizeof(msg),
                  "vocabulary of %lld does not fit the shared memory of one 8-CTA cluster (at "
                  "most %lld on this device: MaxSampleVocab)",
                  static_cast<long long>(vocab), static_cast<long long>(MaxSampleVocab(ctx)));
    Fail(kOp, msg);
  }
  UP_CUDA_CHECK(cudaFuncSetAttribute(SampleKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  RowArgs a;
  a.logits = logits.as<const float>();
  a.row_stride = logits.stride[0];
  a.vocab = static_cast<int>(vocab);
  a.slice = SliceLength(vocab);
  a.rows = rows;
  a.uniforms = uniforms;
  a.ids = ids;
  a.logprobs = logprobs;
  SampleKernel<<<dim3(kCtas, static_cast<unsigned>(batch)), kThreads, smem, ctx.cuda().stream()>>>(
      a);
  UP_CUDA_CHECK_LAUNCH();
}

}  // namespace uniprefill::ops::cuda
