// CacheAttention (cuda_cache_attention.h): attention of arbitrary query rows over the paged pool.
//
// Work split. One CTA = (request, tile of up to `qt` query rows, kv head x chunk of `hc` query
// heads of its group), 8 warps. Its items are the (row, head) pairs of the tile, at most 32; items
// come in chunks of I (4, or 1 when the CTA has a single item), all sharing the CTA's kv head, so a
// chunk's items share every K/V row the warp loads. The warps are split into chunk groups of `wpc`
// warps (wpc a power of two, chunks * wpc <= 8): the wpc warps of a chunk take interleaved key
// steps and are merged through shared memory at the end. The host picks hc (a divisor of the
// group) and qt so that a CTA has up to 32 items, and shrinks both (hc first) while there are fewer
// CTAs than SMs: a decode batch then gets one CTA per (request, query head) whose 8 warps split
// the keys.
//
// Per warp (as in paged_attention.cu's decode kernel): sub-warps of L = next power of two >= D / 8
// lanes; lane dl of a sub-warp owns dims 8 dl .. 8 dl + 7 (lanes with 8 dl >= D hold zeros) of each
// item's q (pre-scaled by scale * log2 e, f32 registers), of the K / V rows it loads (one 16-byte
// vector each, or 8 element loads when the pool is not 16-byte aligned) and of its I accumulators.
// A step covers kC consecutive keys per sub-warp (32 / L sub-warps; kC = 8 for one item, 2 for
// four): table entry, coordinate, K and V of every key issued before use (a key past seq_len or on
// a negative / out-of-range page is not read at all); scores by 8 FMAs per item, summed over the
// sub-warp by xor shuffles; per-item mask (coordinate in [lo, hi] = [q_coord - window + 1,
// q_coord], formed in 64 bits and clamped once per item); online softmax in the exp2 domain (a
// masked key adds exactly 0, a row no item sees is replaced by zeros, so poison in an invisible
// slot cannot leak); 8 FMAs per item per key for P V. A step where no key is visible to any item of
// the warp skips its math (the loads were already issued: masking is rare except past the causal
// diagonal of a multi-row tile). Sub-warps merge by shuffles, the wpc warps of a chunk through
// shared memory; out is written as bf16 element by element (any alignment).
//
// Cost: every CTA streams all keys of its request once per kv head chunk (K and V, 4 D bytes per
// key), so a decode batch reads the pool about G / hc times (L2 absorbs the repeats), and a tile of
// rows re-reads the keys per tile: a long multi-row step over a long cache is bound by SIMT f32
// issue (FMAs plus the score shuffles; no tensor cores), about 4 D flops per (row, head, key).
// Measured on the H200 (CudaCacheAttentionTest.DISABLED_DecodeTimingVsPagedDecode, Hq 16 / Hkv 8,
// D 128): decode 8 x 8K keys 155 us (PagedDecodeAttention 131 us on the same pool); one request's
// 512-row step over 8K keys 2.7 ms, ~12 TFLOP/s of useful work.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "ops/cuda/attention_lanes.cuh"
#include "ops/cuda/cuda_cache_attention.h"

namespace uniprefill::ops::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxItems = 32;  // (row, head) items per CTA
constexpr int kMaxDim = 256;
using lanes::Exp2;
using lanes::kLog2e;
using lanes::kNegInf;
using lanes::Unpack8;

// 8 consecutive bf16 as raw bits: one 16-byte load when aligned, else 8 element loads.
template <bool kVec>
__device__ __forceinline__ uint4 Load8(const bf16* p) {
  if constexpr (kVec) {
    return __ldg(reinterpret_cast<const uint4*>(p));
  } else {
    const unsigned short* u = reinterpret_cast<const unsigned short*>(p);
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      w[i] = static_cast<uint32_t>(__ldg(u + 2 * i)) |
             (static_cast<uint32_t>(__ldg(u + 2 * i + 1)) << 16);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

struct CacheArgs {
  const bf16* q;
  bf16* out;
  const bf16* kv;
  const int32_t* coord;
  const int32_t* q_start;
  const int32_t* q_len;
  const int32_t* q_coord;
  const int32_t* table;
  const int32_t* seq_lens;
  int64_t q_row, q_head, o_row, o_head;  // strides in elements
  int64_t blk_stride, v_off, kv_row;     // pool strides in elements
  int64_t coord_blk;                     // coord_pool row stride
  int num_blocks;
  int table_stride;
  int max_slots;  // max_blocks_per_seq * block_tokens, clamped to INT_MAX
  int d;
  int group;        // Hq / Hkv
  int hc;           // query heads per CTA (divides group)
  int head_chunks;  // group / hc
  int qt;           // query rows per CTA
  int q_tiles;      // tiles per request (grid.x = batch * q_tiles)
  int wpc;          // warps per item chunk
  int block_shift;  // log2(block_tokens)
  int window;
  float scale_log2;  // scale * log2(e)
};

// kC: keys per sub-warp per step; kMinCtas: CTAs per SM the registers must allow.
template <int L, int I, int kC, int kMinCtas, bool kVec>
__global__ void __launch_bounds__(kThreads, kMinCtas) CacheAttentionKernel(const CacheArgs a) {
  constexpr int kSub = 32 / L;               // sub-warps per warp
  constexpr int kWarpKeys = kSub * kC;       // keys per warp per step
  extern __shared__ float s_acc[];           // [kWarps][I][d] when wpc > 1
  __shared__ float s_m[kWarps][I];
  __shared__ float s_l[kWarps][I];

  const int b = blockIdx.x / a.q_tiles;
  const int tile = blockIdx.x % a.q_tiles;
  const int kvh = blockIdx.y / a.head_chunks;
  const int hchunk = blockIdx.y % a.head_chunks;
  const int qlen = a.q_len[b];
  const int row0 = tile * a.qt;
  if (row0 >= qlen) return;  // CTA-uniform
  const int rows = min(a.qt, qlen - row0);
  const int n_items = rows * a.hc;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int chunk = warp / a.wpc, kpart = warp % a.wpc;
  const int it0 = chunk * I;
  const int ni = max(0, min(I, n_items - it0));  // warp-uniform; 0: the warp only joins the merge
  const int sub = lane / L, dl = lane % L;
  const bool dim_ok = dl * 8 < a.d;
  const int qs = a.q_start[b];
  const int seq = max(0, min(a.seq_lens[b], a.max_slots));

  // The warp's items: visible coordinate range [lo, hi], scaled q dims. Item it of the CTA is
  // row qs + row0 + it / hc, query head kvh * group + hchunk * hc + it % hc.
  float q[I][8];
  int hi[I], lo[I];
#pragma unroll
  for (int i = 0; i < I; ++i) {
    hi[i] = INT_MIN;  // an absent item sees nothing (lo > hi)
    lo[i] = INT_MAX;
#pragma unroll
    for (int e = 0; e < 8; ++e) q[i][e] = 0.0f;
    if (i < ni) {
      const int it = it0 + i;
      const int64_t row = qs + row0 + it / a.hc;
      const int h = kvh * a.group + hchunk * a.hc + it % a.hc;
      const int qc = a.q_coord[row];
      // Visible iff c <= qc and (window == 0 or c > qc - window), i.e. c in [lo, hi]; the bound is
      // formed in 64 bits and clamped, so qc - window cannot wrap.
      hi[i] = qc;
      const long long first = static_cast<long long>(qc) - a.window + 1;
      lo[i] = a.window > 0 && first > INT_MIN ? static_cast<int>(first) : INT_MIN;
      if (dim_ok) {
        const bf16* src = a.q + row * a.q_row + h * a.q_head + dl * 8;
#pragma unroll
        for (int e = 0; e < 8; ++e) q[i][e] = __bfloat162float(src[e]) * a.scale_log2;
      }
    }
  }

  float acc[I][8];
  float m[I], l[I];
#pragma unroll
  for (int i = 0; i < I; ++i) {
    m[i] = kNegInf;
    l[i] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[i][e] = 0.0f;
  }

  const int bt_mask = (1 << a.block_shift) - 1;
  const int32_t* table = a.table + static_cast<int64_t>(b) * a.table_stride;
  const int64_t head_off = static_cast<int64_t>(kvh) * a.d + dl * 8;
  const int step = a.wpc * kWarpKeys;

  // Warp-uniform loop (the shuffles need all 32 lanes).
  for (int wbase = ni > 0 ? kpart * kWarpKeys : seq; wbase < seq; wbase += step) {
    const int base = wbase + sub * kC;
    uint4 kr[kC], vr[kC];
    int kc[kC];
    bool present[kC];
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const int j = base + c;
      const int blk = j < seq ? __ldg(table + (j >> a.block_shift)) : -1;
      present[c] = blk >= 0 && blk < a.num_blocks;
      kr[c] = make_uint4(0, 0, 0, 0);
      vr[c] = make_uint4(0, 0, 0, 0);
      kc[c] = 0;
      if (present[c]) {
        const int off = j & bt_mask;
        kc[c] = __ldg(a.coord + blk * a.coord_blk + off);
        if (dim_ok) {
          const bf16* row = a.kv + blk * a.blk_stride + off * a.kv_row + head_off;
          kr[c] = Load8<kVec>(row);
          vr[c] = Load8<kVec>(row + a.v_off);
        }
      }
    }
    bool vis[kC][I];
    bool any = false;
#pragma unroll
    for (int c = 0; c < kC; ++c) {
#pragma unroll
      for (int i = 0; i < I; ++i) {
        vis[c][i] = present[c] && kc[c] <= hi[i] && kc[c] >= lo[i];
        any |= vis[c][i];
      }
    }
    if (!__any_sync(0xffffffffu, any)) continue;

    float s[kC][I];
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      float kf[8];
      Unpack8(kr[c], kf);
#pragma unroll
      for (int i = 0; i < I; ++i) {
        float dsum = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) dsum = fmaf(q[i][e], kf[e], dsum);
        s[c][i] = dsum;
      }
    }
#pragma unroll
    for (int o = 1; o < L; o <<= 1) {
#pragma unroll
      for (int c = 0; c < kC; ++c) {
#pragma unroll
        for (int i = 0; i < I; ++i) s[c][i] += __shfl_xor_sync(0xffffffffu, s[c][i], o);
      }
    }

    // Online softmax per item: s becomes 2^(s - m) for visible keys, 0 otherwise.
#pragma unroll
    for (int i = 0; i < I; ++i) {
      float mx = kNegInf;
#pragma unroll
      for (int c = 0; c < kC; ++c) mx = vis[c][i] ? fmaxf(mx, s[c][i]) : mx;
      const float m_new = fmaxf(m[i], mx);
      if (m_new > m[i]) {
        const float corr = Exp2(m[i] - m_new);  // m[i] == -inf: 0 (acc and l are 0 anyway)
        l[i] *= corr;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[i][e] *= corr;
        m[i] = m_new;
      }
#pragma unroll
      for (int c = 0; c < kC; ++c) {
        s[c][i] = vis[c][i] ? Exp2(s[c][i] - m[i]) : 0.0f;  // vis implies m[i] finite
        l[i] += s[c][i];
      }
    }
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      bool used = false;
#pragma unroll
      for (int i = 0; i < I; ++i) used |= vis[c][i];
      float vf[8];
      Unpack8(used ? vr[c] : make_uint4(0, 0, 0, 0), vf);  // an unused row adds 0, even if NaN
#pragma unroll
      for (int i = 0; i < I; ++i) {
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[i][e] = fmaf(s[c][i], vf[e], acc[i][e]);
      }
    }
  }

  // Merge the sub-warps (lanes dl, dl + L, ... own the same dims).
  lanes::MergeLaneStates<L>(m, l, acc);

  if (a.wpc == 1) {
    // The warp alone holds its items: write them.
    if (sub == 0 && dim_ok) {
#pragma unroll
      for (int i = 0; i < I; ++i) {
        if (i >= ni) continue;
        const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        const int it = it0 + i;
        const int64_t row = qs + row0 + it / a.hc;
        const int h = kvh * a.group + hchunk * a.hc + it % a.hc;
        bf16* dst = a.out + row * a.o_row + h * a.o_head + dl * 8;
#pragma unroll
        for (int e = 0; e < 8; ++e) dst[e] = __float2bfloat16_rn(acc[i][e] * inv);
      }
    }
    return;
  }

  // Merge the wpc warps of each chunk through shared memory.
  if (sub == 0) {
#pragma unroll
    for (int i = 0; i < I; ++i) {
      if (dim_ok) {
#pragma unroll
        for (int e = 0; e < 8; ++e) s_acc[(warp * I + i) * a.d + dl * 8 + e] = acc[i][e];
      }
      if (dl == 0) {
        s_m[warp][i] = i < ni ? m[i] : kNegInf;
        s_l[warp][i] = i < ni ? l[i] : 0.0f;
      }
    }
  }
  __syncthreads();
  const int total = n_items * a.d;
  for (int idx = threadIdx.x; idx < total; idx += kThreads) {
    const int it = idx / a.d, e = idx % a.d;
    const int ch = it / I, i = it % I;
    const int w0 = ch * a.wpc;
    float mm = kNegInf;
    for (int w = w0; w < w0 + a.wpc; ++w) mm = fmaxf(mm, s_m[w][i]);
    float o = 0.0f, sum = 0.0f;
    if (mm != kNegInf) {
      for (int w = w0; w < w0 + a.wpc; ++w) {
        const float c = Exp2(s_m[w][i] - mm);
        sum += s_l[w][i] * c;
        o += s_acc[(w * I + i) * a.d + e] * c;
      }
    }
    const int r = it / a.hc, g = it % a.hc;
    const int64_t row = qs + row0 + r;
    const int h = kvh * a.group + hchunk * a.hc + g;
    a.out[row * a.o_row + h * a.o_head + e] = __float2bfloat16_rn(sum > 0.0f ? o / sum : 0.0f);
  }
}

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "CacheAttention: %s\n", what);
  std::abort();
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Largest divisor of n that is <= cap (>= 1).
int DivisorAtMost(int n, int cap) {
  for (int d = std::min(n, std::max(cap, 1)); d > 1; --d) {
    if (n % d == 0) return d;
  }
  return 1;
}

template <int L, int I, int kC, int kMinCtas>
void LaunchWithVec(const CacheArgs& a, bool vec, dim3 grid, cudaStream_t stream) {
  const size_t smem = a.wpc > 1 ? sizeof(float) * kWarps * I * a.d : 0;
  if (vec) {
    CacheAttentionKernel<L, I, kC, kMinCtas, true><<<grid, kThreads, smem, stream>>>(a);
  } else {
    CacheAttentionKernel<L, I, kC, kMinCtas, false><<<grid, kThreads, smem, stream>>>(a);
  }
  UP_CUDA_CHECK_LAUNCH();
}

// One item: 8 keys per sub-warp step (loads in flight for decode). Four items: 2 keys per step, so
// the registers (<= 128) allow 2 CTAs (16 warps) per SM; on the H200 that ran a 512-row step over
// 8K keys 1.6x faster than 4 keys per step at 1 CTA per SM (2.7 vs 4.3 ms).
template <int L>
void LaunchWithItems(const CacheArgs& a, int items, bool vec, dim3 grid, cudaStream_t stream) {
  if (items == 1) {
    LaunchWithVec<L, 1, 8, 2>(a, vec, grid, stream);
  } else {
    LaunchWithVec<L, 4, 2, 2>(a, vec, grid, stream);
  }
}

}  // namespace

void CacheAttention(DeviceContext& ctx, TensorView out, TensorView q, TensorView kv_pool,
                    TensorView coord_pool, const CacheAttentionBatch& batch,
                    const AttentionParams& params) {
  char msg[400];
  if (kv_pool.dtype != DType::kBF16 || kv_pool.device != Device::kCuda || kv_pool.ndim != 4 ||
      kv_pool.dim(1) != 2 || kv_pool.stride[3] != 1) {
    std::snprintf(msg, sizeof(msg),
                  "kv_pool must be a bf16 [num_blocks, 2, block_tokens, Hkv * D] CUDA view with a "
                  "contiguous last dim (got %s)",
                  kv_pool.ShapeString().c_str());
    Fail(msg);
  }
  if (coord_pool.dtype != DType::kI32 || coord_pool.device != Device::kCuda ||
      coord_pool.ndim != 2 || coord_pool.stride[1] != 1 || coord_pool.dim(0) < kv_pool.dim(0) ||
      coord_pool.dim(1) != kv_pool.dim(2)) {
    std::snprintf(msg, sizeof(msg),
                  "coord_pool must be an int32 [num_blocks, block_tokens] CUDA view matching "
                  "kv_pool %s (got %s)",
                  kv_pool.ShapeString().c_str(), coord_pool.ShapeString().c_str());
    Fail(msg);
  }
  for (const TensorView* t : {&q, &out}) {
    if (t->dtype != DType::kBF16 || t->device != Device::kCuda || t->ndim != 3 ||
        t->stride[2] != 1) {
      std::snprintf(msg, sizeof(msg),
                    "q and out must be bf16 [Tq, Hq, D] CUDA views with a contiguous last dim "
                    "(got %s and %s)",
                    q.ShapeString().c_str(), out.ShapeString().c_str());
      Fail(msg);
    }
  }
  const int64_t tq = q.dim(0), hq = q.dim(1), d = q.dim(2);
  const int64_t kv_dim = kv_pool.dim(3);
  const int64_t hkv = d > 0 ? kv_dim / d : 0;
  const int64_t block_tokens = kv_pool.dim(2);
  if (out.dim(0) != tq || out.dim(1) != hq || out.dim(2) != d || hkv <= 0 || hkv * d != kv_dim ||
      hq % hkv != 0) {
    std::snprintf(msg, sizeof(msg),
                  "shapes do not agree: q %s, out %s, kv_pool %s (want q, out [Tq, Hq, D], "
                  "kv_pool [num_blocks, 2, block_tokens, Hkv * D], Hq a multiple of Hkv)",
                  q.ShapeString().c_str(), out.ShapeString().c_str(),
                  kv_pool.ShapeString().c_str());
    Fail(msg);
  }
  if (d <= 0 || d % 8 != 0 || d > kMaxDim) {
    std::snprintf(msg, sizeof(msg), "head dim %lld is not a multiple of 8 in 8..256",
                  static_cast<long long>(d));
    Fail(msg);
  }
  if (block_tokens <= 0 || (block_tokens & (block_tokens - 1)) != 0 || block_tokens > (1 << 20)) {
    std::snprintf(msg, sizeof(msg), "block_tokens must be a power of two (got %lld)",
                  static_cast<long long>(block_tokens));
    Fail(msg);
  }
  if (!(params.scale > 0.0f) || params.window < 0) {
    std::snprintf(msg, sizeof(msg), "needs scale > 0 and window >= 0 (got %g, %d)", params.scale,
                  params.window);
    Fail(msg);
  }
  if (batch.batch < 0 || batch.max_q_len < 0 || batch.max_seq_len < 0 ||
      batch.max_blocks_per_seq < 0 ||
      static_cast<int64_t>(batch.max_blocks_per_seq) * block_tokens < batch.max_seq_len) {
    std::snprintf(msg, sizeof(msg),
                  "bad batch sizes: batch %d, max_q_len %d, max_seq_len %d, max_blocks_per_seq %d "
                  "of %lld tokens",
                  batch.batch, batch.max_q_len, batch.max_seq_len, batch.max_blocks_per_seq,
                  static_cast<long long>(block_tokens));
    Fail(msg);
  }
  if (kv_pool.dim(0) * block_tokens > INT32_MAX) Fail("pool has more than 2^31 slots");
  if (batch.batch == 0 || batch.max_q_len == 0 || hq == 0 || tq == 0) return;

  const int group = static_cast<int>(hq / hkv);
  const int sms = std::max(1, ctx.cuda().sm_count());
  // Heads per CTA (a divisor of the group) and rows per tile: up to kMaxItems items per CTA,
  // shrunk (heads first) while the grid would leave SMs idle.
  int hc = DivisorAtMost(group, kMaxItems);
  int qt = std::max(1, std::min(batch.max_q_len, kMaxItems / hc));
  const auto ctas = [&] {
    const int64_t tiles = (batch.max_q_len + qt - 1) / qt;
    return static_cast<int64_t>(batch.batch) * tiles * hkv * (group / hc);
  };
  while (ctas() < sms) {
    if (hc > 1) {
      hc = DivisorAtMost(group, hc / 2);
    } else if (qt > 1) {
      qt = (qt + 1) / 2;
    } else {
      break;
    }
  }
  const int items = hc * qt;
  const int per_chunk = items == 1 ? 1 : 4;
  const int chunks = (items + per_chunk - 1) / per_chunk;
  int wpc = 1;
  while (wpc * 2 * chunks <= kWarps) wpc *= 2;

  const int q_tiles = (batch.max_q_len + qt - 1) / qt;
  const int64_t grid_x = static_cast<int64_t>(batch.batch) * q_tiles;
  const int64_t grid_y = hkv * (group / hc);
  if (grid_x > INT32_MAX || grid_y > 65535) Fail("too many requests, query tiles or heads");

  CacheArgs a{};
  a.q = q.as<const bf16>();
  a.out = out.as<bf16>();
  a.kv = kv_pool.as<const bf16>();
  a.coord = coord_pool.as<const int32_t>();
  a.q_start = batch.q_start;
  a.q_len = batch.q_len;
  a.q_coord = batch.q_coord;
  a.table = batch.block_tables;
  a.seq_lens = batch.seq_lens;
  a.q_row = q.stride[0];
  a.q_head = q.stride[1];
  a.o_row = out.stride[0];
  a.o_head = out.stride[1];
  a.blk_stride = kv_pool.stride[0];
  a.v_off = kv_pool.stride[1];
  a.kv_row = kv_pool.stride[2];
  a.coord_blk = coord_pool.stride[0];
  a.num_blocks = static_cast<int>(kv_pool.dim(0));
  a.table_stride = batch.max_blocks_per_seq;
  a.max_slots = static_cast<int>(
      std::min<int64_t>(static_cast<int64_t>(batch.max_blocks_per_seq) * block_tokens, INT32_MAX));
  a.d = static_cast<int>(d);
  a.group = group;
  a.hc = hc;
  a.head_chunks = group / hc;
  a.qt = qt;
  a.q_tiles = q_tiles;
  a.wpc = wpc;
  a.block_shift = __builtin_ctzll(static_cast<unsigned long long>(block_tokens));
  a.window = params.window;
  a.scale_log2 = params.scale * kLog2e;

  const bool vec = Aligned16(kv_pool.data) && kv_pool.stride[0] % 8 == 0 &&
                   kv_pool.stride[1] % 8 == 0 && kv_pool.stride[2] % 8 == 0;
  const dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y));
  cudaStream_t stream = ctx.cuda().stream();
  const int vecs = static_cast<int>(d / 8);
  if (vecs <= 1) {
    LaunchWithItems<1>(a, per_chunk, vec, grid, stream);
  } else if (vecs <= 2) {
    LaunchWithItems<2>(a, per_chunk, vec, grid, stream);
  } else if (vecs <= 4) {
    LaunchWithItems<4>(a, per_chunk, vec, grid, stream);
  } else if (vecs <= 8) {
    LaunchWithItems<8>(a, per_chunk, vec, grid, stream);
  } else if (vecs <= 16) {
    LaunchWithItems<16>(a, per_chunk, vec, grid, stream);
  } else {
    LaunchWithItems<32>(a, per_chunk, vec, grid, stream);
  }
}

}  // namespace uniprefill::ops::cuda
