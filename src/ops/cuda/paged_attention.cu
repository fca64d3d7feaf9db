// PagedKvAppend and PagedDecodeAttention (cuda_paged_attention.h).
//
// PagedDecodeAttention has two kernels: the tensor-core one (paged_decode_tc.cuh, the default)
// and the CUDA-core one below (DecodeAttentionKernel::kCudaCores), kept as a second judge in the
// tests and as the measured baseline of the first. Both share the split-K plan and the merge
// (SplitReduceKernel) of this file.
//
// CUDA-core kernel (flash-decoding). One CTA = (split, kv head x head chunk, request), 4 warps; its
// G (1, 2, 4 or 8) query heads share every K/V row it loads, so GQA reads each row once per group.
// A warp is cut into sub-warps of L = D / 8 lanes; lane i of a sub-warp owns dims 8i .. 8i + 7 of
// q (pre-scaled by scale * log2 e), of the K and V rows it loads (one 16-byte vector each) and of
// its G running outputs. A warp streams kC consecutive keys per sub-warp per step (warp-uniform
// loop, so the shuffles always see 32 lanes):
//   loads    block id (table), position, K and V vectors of the step's keys, issued before use;
//   scores   8 FMAs per head per key, summed over the sub-warp's L lanes by xor shuffles;
//   mask     a key past the split or seq_len, on a released page (table entry < 0), or whose
//            position fails the causal / window test scores -inf and adds exactly 0 (its K/V are
//            still read when the page exists: masking is rare in decode, and skipping would
//            serialise the loads);
//   softmax  online in the exp2 domain, once per step per head; the accumulators are rescaled only
//            when the running max grows; a head that has seen no visible key keeps max -inf and is
//            guarded, so no inf - inf NaN appears;
//   P V      8 FMAs per head per key into the lane's f32 accumulators.
// Sub-warps merge by shuffles, the 4 warps through shared memory. With one split the CTA writes
// out (bf16); otherwise it writes its normalised partial output and log2-sum-exp (f32) to the
// scratch, and SplitReduceKernel merges the splits of each (request, head).
//
// Splits (ChooseSplits, host): when batch * Hkv * head chunks CTAs would not fill the GPU, the
// keys are cut into splits of keys_per_split consecutive slots (>= 256, a multiple of 64), up to
// 256 splits, sized from max_seq_len. The CUDA-core kernel aims at 4 CTAs per SM; the tensor-core
// one counts the CTAs shared memory lets an SM hold (TcCtasPerSm) and picks the split count whose
// CTAs fill whole waves (TcSplits). CTAs whose range starts past seq_lens[b] write an empty
// partial (lse -inf). Bandwidth: a (request, kv head) reads 2 * D * 2 bytes per key, e.g. 128K
// keys at D = 128 and 8 kv heads is 512 MB, ~0.11 ms at the H200's 4.8 TB/s.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "ops/cuda/attention_lanes.cuh"
#include "ops/cuda/cuda_paged_attention.h"
#include "ops/cuda/paged_append_row.cuh"
#include "ops/cuda/paged_decode_common.cuh"
#include "ops/cuda/paged_decode_tc.cuh"

namespace uniprefill::ops::cuda {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kMaxGroup = 8;  // query heads per CUDA-core CTA; larger groups take several chunks
constexpr int kTargetCtasPerSm = 4;  // CUDA-core kernel (16 warps per SM)
constexpr int kMinKeysPerSplit = 256;
constexpr int kSplitAlign = 64;
constexpr int kMaxSplits = 256;
constexpr size_t kScratchAlign = 256;
using lanes::Exp2;
using lanes::kLog2e;
using lanes::kNegInf;
using lanes::Pack8;
using lanes::Unpack8;
using paged::DecodeArgs;
using paged::kTableTile;


template <int D, int G>
struct DecodeShape {
  static constexpr int kL = D / 8;      // lanes per key (one 16-byte vector each)
  static constexpr int kSub = 32 / kL;  // sub-warps per warp
  // Keys per sub-warp per step: enough loads in flight, within the register budget
  // (q and accumulators take 16 * G registers per lane).
  static constexpr int kC = G >= 8 ? 2 : (G >= 4 ? 4 : 8);
  static constexpr int kWarpKeys = kSub * kC;          // keys per warp per step
  static constexpr int kCtaKeys = kWarps * kWarpKeys;  // keys per CTA per step
  static_assert(D % 64 == 0 && kL <= 32 && 32 % kL == 0);
};

template <int D, int G>
__global__ void __launch_bounds__(kThreads) PagedDecodeKernel(const DecodeArgs a) {
  using S = DecodeShape<D, G>;
  __shared__ float s_acc[kWarps][G][D];
  __shared__ float s_m[kWarps][G];
  __shared__ float s_l[kWarps][G];

  const int split = blockIdx.x;
  const int kvh = blockIdx.y / a.head_chunks;
  const int chunk = blockIdx.y % a.head_chunks;
  const int b = blockIdx.z;
  const int h0 = kvh * a.group + chunk * G;
  const int ng = min(G, a.group - chunk * G);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int sub = lane / S::kL, dl = lane % S::kL;

  const int seq = a.seq_lens[b];
  const int qp = a.q_pos[b];
  const int k_begin = split * a.keys_per_split;
  const int k_end = min(seq, k_begin + a.keys_per_split);

  float q[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (g < ng) {
      const bf16* row = a.q + b * a.q_row + (h0 + g) * a.q_head + dl * 8;
      Unpack8(*reinterpret_cast<const uint4*>(row), q[g]);
#pragma unroll
      for (int e = 0; e < 8; ++e) q[g][e] *= a.scale_log2;
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) q[g][e] = 0.0f;
    }
  }
  float acc[G][8];
  float m[G], l[G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = kNegInf;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[g][e] = 0.0f;
  }

  // Visible iff p <= qp and (window == 0 or p > qp - window); 64-bit so qp - window cannot wrap.
  const long long after = a.window > 0 ? static_cast<long long>(qp) - a.window : -(1LL << 40);
  const int bt_mask = (1 << a.block_shift) - 1;
  const int32_t* table = a.table + static_cast<int64_t>(b) * a.table_stride;
  const int64_t head_off = static_cast<int64_t>(kvh) * D + dl * 8;

  // The split's block-table entries are staged in shared memory a tile at a time, so a step's
  // K / V / position loads wait on one global round trip, not two (table, then rows): decode is
  // latency-bound at a few CTAs per SM (measured in docs/gpu_performance.md, decode section).
  __shared__ int32_t s_table[kTableTile + 1];
  const int tile_keys = kTableTile << a.block_shift;  // a multiple of kCtaKeys
  for (int tile = k_begin; tile < k_end; tile += tile_keys) {
    const int tile_end = min(k_end, tile + tile_keys);
    const int p0 = tile >> a.block_shift;
    const int pages = ((tile_end - 1) >> a.block_shift) - p0 + 1;  // <= kTableTile + 1
    __syncthreads();  // the previous tile's readers are done
    for (int i = threadIdx.x; i < pages; i += kThreads) s_table[i] = __ldg(table + p0 + i);
    __syncthreads();
    // Warp-uniform loop: every lane runs the same iterations (the shuffles need all 32).
    for (int wbase = tile + warp * S::kWarpKeys; wbase < tile_end; wbase += S::kCtaKeys) {
      const int base = wbase + sub * S::kC;
      uint4 kr[S::kC], vr[S::kC];
      bool vis[S::kC];
#pragma unroll
      for (int c = 0; c < S::kC; ++c) {
        const int j = base + c;
        const int blk = j < tile_end ? s_table[(j >> a.block_shift) - p0] : -1;
        const bool present = blk >= 0 && blk < a.num_blocks;
        kr[c] = make_uint4(0, 0, 0, 0);
        vr[c] = make_uint4(0, 0, 0, 0);
        int p = 0;
        if (present) {
          const int off = j & bt_mask;
          p = __ldg(a.pos + blk * a.pos_blk + off);
          const bf16* row = a.kv + blk * a.blk_stride + off * a.kv_row + head_off;
          kr[c] = __ldg(reinterpret_cast<const uint4*>(row));
          vr[c] = __ldg(reinterpret_cast<const uint4*>(row + a.v_off));
        }
        vis[c] = present && p <= qp && p > after;
      }

      float s[S::kC][G];
#pragma unroll
      for (int c = 0; c < S::kC; ++c) {
        float kf[8];
        Unpack8(kr[c], kf);
#pragma unroll
        for (int g = 0; g < G; ++g) {
          float d = 0.0f;
#pragma unroll
          for (int e = 0; e < 8; ++e) d = fmaf(q[g][e], kf[e], d);
          s[c][g] = d;
        }
      }
#pragma unroll
      for (int o = 1; o < S::kL; o <<= 1) {
#pragma unroll
        for (int c = 0; c < S::kC; ++c) {
#pragma unroll
          for (int g = 0; g < G; ++g) s[c][g] += __shfl_xor_sync(0xffffffffu, s[c][g], o);
        }
      }

      // Online softmax: s becomes the probabilities 2^(s - m) (0 for masked keys).
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float mx = kNegInf;
#pragma unroll
        for (int c = 0; c < S::kC; ++c) mx = vis[c] ? fmaxf(mx, s[c][g]) : mx;
        const float m_new = fmaxf(m[g], mx);
        if (m_new > m[g]) {
          const float corr = Exp2(m[g] - m_new);  // m[g] == -inf: 0 (acc and l are 0 anyway)
          l[g] *= corr;
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[g][e] *= corr;
          m[g] = m_new;
        }
#pragma unroll
        for (int c = 0; c < S::kC; ++c) {
          s[c][g] = vis[c] ? Exp2(s[c][g] - m[g]) : 0.0f;  // vis implies m[g] finite
          l[g] += s[c][g];
        }
      }
#pragma unroll
      for (int c = 0; c < S::kC; ++c) {
        float vf[8];
        Unpack8(vis[c] ? vr[c] : make_uint4(0, 0, 0, 0), vf);  // a masked row adds 0, even if NaN
#pragma unroll
        for (int g = 0; g < G; ++g) {
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[g][e] = fmaf(s[c][g], vf[e], acc[g][e]);
        }
      }
    }
  }

  // Merge the sub-warps of the warp (lanes dl, dl + L, dl + 2L, ... own the same dims).
  lanes::MergeLaneStates<S::kL>(m, l, acc);
  if (sub == 0) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
#pragma unroll
      for (int e = 0; e < 8; ++e) s_acc[warp][g][dl * 8 + e] = acc[g][e];
      if (dl == 0) {
        s_m[warp][g] = m[g];
        s_l[warp][g] = l[g];
      }
    }
  }
  __syncthreads();

  // Merge the warps; one thread per (head, 8 dims).
  constexpr int kVecs = D / 8;
  for (int idx = threadIdx.x; idx < G * kVecs; idx += kThreads) {
    const int g = idx / kVecs, d8 = idx % kVecs;
    if (g >= ng) continue;
    float mm = kNegInf;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mm = fmaxf(mm, s_m[w][g]);
    float o[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    float sum = 0.0f;
    if (mm != kNegInf) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float c = Exp2(s_m[w][g] - mm);
        sum += s_l[w][g] * c;
#pragma unroll
        for (int e = 0; e < 8; ++e) o[e] += s_acc[w][g][d8 * 8 + e] * c;
      }
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) o[e] *= inv;
    const int h = h0 + g;
    if (a.splits == 1) {
      bf16* dst = a.out + b * a.o_row + h * a.o_head + d8 * 8;
      *reinterpret_cast<uint4*>(dst) = Pack8(o);
    } else {
      const int64_t slot = (static_cast<int64_t>(b) * a.hq + h) * a.splits + split;
      float4* dst = reinterpret_cast<float4*>(a.part_o + slot * D + d8 * 8);
      dst[0] = make_float4(o[0], o[1], o[2], o[3]);
      dst[1] = make_float4(o[4], o[5], o[6], o[7]);
      if (d8 == 0) a.part_lse[slot] = sum > 0.0f ? mm + __log2f(sum) : kNegInf;
    }
  }
}

// Merges the splits of one (head, request): out = sum_s 2^(lse_s - M) o_s / sum_s 2^(lse_s - M).
// One thread per dim (blockDim.x == D, a multiple of 32). The first warp finds M and the weights
// with one load per lane and split (a single thread walking the splits' log-sum-exps took ~10 us
// of an H200 decode layer: two serial passes of dependent global loads); the weights' sum stays
// serial in split order, so the output's bits are those of the serial form.
__global__ void SplitReduceKernel(bf16* out, int64_t o_row, int64_t o_head, const float* part_o,
                                  const float* part_lse, const int32_t* seq_lens, int hq, int d,
                                  int splits, int keys_per_split) {
  __shared__ float s_w[kMaxSplits];
  __shared__ float s_sum;
  const int h = blockIdx.x, b = blockIdx.y;
  const int seq = seq_lens[b];
  const int used = seq <= 0 ? 0 : min(splits, (seq + keys_per_split - 1) / keys_per_split);
  const int64_t slot0 = (static_cast<int64_t>(b) * hq + h) * splits;
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    float mm = kNegInf;
    for (int s = lane; s < used; s += 32) mm = fmaxf(mm, part_lse[slot0 + s]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mm = fmaxf(mm, __shfl_xor_sync(0xffffffffu, mm, o));
    for (int s = lane; s < used; s += 32) {
      s_w[s] = mm == kNegInf ? 0.0f : Exp2(part_lse[slot0 + s] - mm);
    }
    __syncwarp();
    if (lane == 0) {
      float sum = 0.0f;
      for (int s = 0; s < used; ++s) sum += s_w[s];
      s_sum = sum;
    }
  }
  __syncthreads();
  const int i = threadIdx.x;
  float o = 0.0f;
  for (int s = 0; s < used; ++s) {
    if (s_w[s] != 0.0f) o += s_w[s] * part_o[(slot0 + s) * d + i];
  }
  const float sum = s_sum;
  out[b * o_row + h * o_head + i] = __float2bfloat16_rn(sum > 0.0f ? o / sum : 0.0f);
}

__global__ void AppendKernel(detail::AppendArgs a) { detail::AppendRow(a, blockIdx.x); }

[[noreturn]] void Fail(const char* op, const char* what) {
  std::fprintf(stderr, "%s: %s\n", op, what);
  std::abort();
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Checks the pool views shared by both ops: kv_pool bf16 [num_blocks, 2, block_tokens, kv_dim]
// with a contiguous last dim, pos_pool int32 [num_blocks, block_tokens] (at least as many blocks).
void CheckPool(const char* op, const TensorView& kv_pool, const TensorView& pos_pool) {
  char msg[320];
  if (kv_pool.dtype != DType::kBF16 || kv_pool.device != Device::kCuda || kv_pool.ndim != 4 ||
      kv_pool.dim(1) != 2 || kv_pool.stride[3] != 1) {
    std::snprintf(msg, sizeof(msg),
                  "kv_pool must be a bf16 [num_blocks, 2, block_tokens, Hkv * D] CUDA view with a "
                  "contiguous last dim (got %s, device %d, last stride %lld)",
                  kv_pool.ShapeString().c_str(), static_cast<int>(kv_pool.device),
                  static_cast<long long>(kv_pool.stride[3]));
    Fail(op, msg);
  }
  if (pos_pool.dtype != DType::kI32 || pos_pool.device != Device::kCuda || pos_pool.ndim != 2 ||
      pos_pool.stride[1] != 1 || pos_pool.dim(0) < kv_pool.dim(0) ||
      pos_pool.dim(1) != kv_pool.dim(2)) {
    std::snprintf(msg, sizeof(msg),
                  "pos_pool must be an int32 [num_blocks, block_tokens] CUDA view matching kv_pool "
                  "%s (got %s)",
                  kv_pool.ShapeString().c_str(), pos_pool.ShapeString().c_str());
    Fail(op, msg);
  }
  if (kv_pool.dim(0) * kv_pool.dim(2) > INT32_MAX) {
    std::snprintf(msg, sizeof(msg), "pool has more than 2^31 slots (%s)",
                  kv_pool.ShapeString().c_str());
    Fail(op, msg);
  }
}

struct SplitPlan {
  int head_chunks = 1;
  int splits = 1;
  int keys_per_split = 1;
};

bool UsesTensorCores(DecodeAttentionKernel kernel) {
  return kernel != DecodeAttentionKernel::kCudaCores;
}

// Tensor-core CTAs one SM holds at once: shared memory decides (2 at D 64 / 128, 1 at D 256 on
// an H200's 228 KB).
int TcCtasPerSm(const cudaDeviceProp& props, int head_dim) {
  const size_t smem = head_dim == 64    ? paged::TcShape<64>::kSmemBytes
                      : head_dim == 128 ? paged::TcShape<128>::kSmemBytes
                                        : paged::TcShape<256>::kSmemBytes;
  const size_t per_cta = smem + props.reservedSharedMemPerBlock;
  return std::max(1, static_cast<int>(props.sharedMemPerMultiprocessor / per_cta));
}

// Splits for the tensor-core kernel: the count s (1 .. s_max) that minimises the waves of
// ctas * s CTAs over the GPU's slots times the keys each CTA walks (~ ceil(ctas s / slots) / s),
// the smallest within 5% of the best. Measured on the H200 before this rule: 4 x 32K keys of the
// 8B shape in 9 splits ran 288 CTAs on 264 slots, two waves, at 58% of HBM bandwidth, where one
// wave of 256 CTAs streams at ~80% (docs/gpu_performance.md, decode).
int64_t TcSplits(int64_t ctas, int64_t slots, int64_t s_max) {
  const auto cost = [&](int64_t s) {
    return static_cast<double>((ctas * s + slots - 1) / slots) / static_cast<double>(s);
  };
  double best = cost(1);
  for (int64_t s = 2; s <= s_max; ++s) best = std::min(best, cost(s));
  for (int64_t s = 1; s <= s_max; ++s) {
    if (cost(s) <= 1.05 * best) return s;
  }
  return 1;
}

SplitPlan ChooseSplits(const cudaDeviceProp& props, int batch, int q_heads, int kv_heads,
                       int head_dim, int max_seq_len, DecodeAttentionKernel kernel) {
  SplitPlan p;
  const bool tc = UsesTensorCores(kernel);
  const int group = kv_heads > 0 ? q_heads / kv_heads : 1;
  const int heads_per_cta = tc ? paged::TcShape<128>::kRows : kMaxGroup;
  p.head_chunks = (group + heads_per_cta - 1) / heads_per_cta;
  p.keys_per_split = std::max(max_seq_len, 1);
  if (max_seq_len <= kMinKeysPerSplit) return p;
  const int64_t ctas = static_cast<int64_t>(batch) * kv_heads * p.head_chunks;
  if (ctas <= 0) return p;
  const int64_t s_max = std::min<int64_t>(
      kMaxSplits, (max_seq_len + kMinKeysPerSplit - 1) / kMinKeysPerSplit);
  int64_t splits = 1;
  if (tc) {
    const int64_t slots =
        static_cast<int64_t>(TcCtasPerSm(props, head_dim)) * props.multiProcessorCount;
    splits = TcSplits(ctas, slots, s_max);
  } else {
    const int64_t target = static_cast<int64_t>(kTargetCtasPerSm) * props.multiProcessorCount;
    if (ctas >= target) return p;
    splits = std::min<int64_t>((target + ctas - 1) / ctas, s_max);
  }
  if (splits <= 1) return p;
  int64_t kps = (max_seq_len + splits - 1) / splits;
  kps = (kps + kSplitAlign - 1) / kSplitAlign * kSplitAlign;
  p.keys_per_split = static_cast<int>(kps);
  p.splits = static_cast<int>((max_seq_len + kps - 1) / kps);
  return p;
}

size_t AlignUp(size_t x) { return (x + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }

// Scratch layout: part_o f32 [B, Hq, splits, D], then part_lse f32 [B, Hq, splits].
size_t PartOBytes(int batch, int q_heads, int head_dim, const SplitPlan& p) {
  return AlignUp(sizeof(float) * static_cast<size_t>(batch) * q_heads * p.splits * head_dim);
}
size_t ScratchFor(int batch, int q_heads, int head_dim, const SplitPlan& p) {
  if (p.splits <= 1) return 0;
  return PartOBytes(batch, q_heads, head_dim, p) +
         AlignUp(sizeof(float) * static_cast<size_t>(batch) * q_heads * p.splits);
}

template <int D, int G>
void LaunchDecode(const DecodeArgs& a, int kv_heads, int batch, cudaStream_t stream) {
  const dim3 grid(a.splits, kv_heads * a.head_chunks, batch);
  PagedDecodeKernel<D, G><<<grid, kThreads, 0, stream>>>(a);
  UP_CUDA_CHECK_LAUNCH();
}

template <int D>
void LaunchDecodeForGroup(const DecodeArgs& a, int kv_heads, int batch, cudaStream_t stream) {
  const int g = std::min(a.group, kMaxGroup);
  if (g == 1) {
    LaunchDecode<D, 1>(a, kv_heads, batch, stream);
  } else if (g == 2) {
    LaunchDecode<D, 2>(a, kv_heads, batch, stream);
  } else if (g <= 4) {
    LaunchDecode<D, 4>(a, kv_heads, batch, stream);
  } else {
    LaunchDecode<D, 8>(a, kv_heads, batch, stream);
  }
}

template <int D>
void LaunchDecodeTc(const DecodeArgs& a, int kv_heads, int batch, cudaStream_t stream) {
  using S = paged::TcShape<D>;
  // Above 48 KB of dynamic shared memory needs the opt-in; setting it again is cheap.
  UP_CUDA_CHECK(cudaFuncSetAttribute(paged::PagedDecodeTcKernel<D>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(S::kSmemBytes)));
  const dim3 grid(a.splits, kv_heads * a.head_chunks, batch);
  paged::PagedDecodeTcKernel<D><<<grid, S::kThreads, S::kSmemBytes, stream>>>(a);
  UP_CUDA_CHECK_LAUNCH();
}

}  // namespace

namespace detail {

AppendArgs CheckedAppendArgs(const char* op, TensorView kv_pool, TensorView pos_pool,
                             TensorView k_new, TensorView v_new, const int32_t* slot_mapping,
                             const int32_t* positions, TensorView index_pool,
                             const int32_t* indices) {
  CheckPool(op, kv_pool, pos_pool);
  if (indices != nullptr) CheckPool(op, kv_pool, index_pool);  // the same shape as pos_pool
  char msg[320];
  const int64_t kv_dim = kv_pool.dim(3);
  for (const TensorView* t : {&k_new, &v_new}) {
    if (t->dtype != DType::kBF16 || t->device != Device::kCuda || t->ndim != 2 ||
        t->dim(1) != kv_dim || t->stride[1] != 1 || t->dim(0) != k_new.dim(0)) {
      std::snprintf(msg, sizeof(msg),
                    "k_new and v_new must be bf16 [R, %lld] CUDA views with a contiguous last dim "
                    "(got %s and %s)",
                    static_cast<long long>(kv_dim), k_new.ShapeString().c_str(),
                    v_new.ShapeString().c_str());
      Fail(op, msg);
    }
  }
  AppendArgs a;
  a.rows = k_new.dim(0);
  if (a.rows > INT32_MAX) Fail(op, "more than 2^31 rows");
  a.vectorised = kv_dim % 8 == 0 && Aligned16(kv_pool.data) && Aligned16(k_new.data) &&
                 Aligned16(v_new.data) && kv_pool.stride[0] % 8 == 0 &&
                 kv_pool.stride[1] % 8 == 0 && kv_pool.stride[2] % 8 == 0 &&
                 k_new.stride[0] % 8 == 0 && v_new.stride[0] % 8 == 0;
  a.kv = kv_pool.as<bf16>();
  a.blk_stride = kv_pool.stride[0];
  a.v_off = kv_pool.stride[1];
  a.kv_row = kv_pool.stride[2];
  a.pos = pos_pool.as<int32_t>();
  a.pos_blk = pos_pool.stride[0];
  a.num_slots = kv_pool.dim(0) * kv_pool.dim(2);
  a.block_tokens = static_cast<int>(kv_pool.dim(2));
  a.k_new = k_new.as<const bf16>();
  a.k_row = k_new.stride[0];
  a.v_new = v_new.as<const bf16>();
  a.v_row = v_new.stride[0];
  a.slots = slot_mapping;
  a.positions = positions;
  a.index = indices != nullptr ? index_pool.as<int32_t>() : nullptr;
  a.index_blk = indices != nullptr ? index_pool.stride[0] : 0;
  a.indices = indices;
  a.kv_dim = static_cast<int>(kv_dim);
  return a;
}

}  // namespace detail

void PagedKvAppend(DeviceContext& ctx, TensorView kv_pool, TensorView pos_pool, TensorView k_new,
                   TensorView v_new, const int32_t* slot_mapping, const int32_t* positions,
                   TensorView index_pool, const int32_t* indices) {
  const detail::AppendArgs a =
      detail::CheckedAppendArgs("PagedKvAppend", kv_pool, pos_pool, k_new, v_new, slot_mapping,
                                positions, index_pool, indices);
  if (a.rows == 0) return;
  AppendKernel<<<static_cast<unsigned>(a.rows), 128, 0, ctx.cuda().stream()>>>(a);
  UP_CUDA_CHECK_LAUNCH();
}

size_t PagedDecodeAttentionScratchBytes(DeviceContext& ctx, int batch, int q_heads, int kv_heads,
                                        int head_dim, int max_seq_len,
                                        DecodeAttentionKernel kernel) {
  const SplitPlan p =
      ChooseSplits(ctx.cuda().properties(), batch, q_heads, kv_heads, head_dim, max_seq_len,
                   kernel);
  return ScratchFor(batch, q_heads, head_dim, p);
}

void PagedDecodeAttention(DeviceContext& ctx, TensorView out, TensorView q, TensorView kv_pool,
                          TensorView pos_pool, const PagedDecodeBatch& batch,
                          const AttentionParams& params, void* scratch, size_t scratch_bytes,
                          DecodeAttentionKernel kernel) {
  constexpr const char* kOp = "PagedDecodeAttention";
  CheckPool(kOp, kv_pool, pos_pool);
  char msg[400];
  for (const TensorView* t : {&q, &out}) {
    if (t->dtype != DType::kBF16 || t->device != Device::kCuda || t->ndim != 3 ||
        t->stride[2] != 1) {
      std::snprintf(msg, sizeof(msg),
                    "q and out must be bf16 [B, Hq, D] CUDA views with a contiguous last dim (got "
                    "%s and %s)",
                    q.ShapeString().c_str(), out.ShapeString().c_str());
      Fail(kOp, msg);
    }
  }
  const int64_t bsz = q.dim(0), hq = q.dim(1), d = q.dim(2);
  const int64_t kv_dim = kv_pool.dim(3);
  const int64_t hkv = d > 0 ? kv_dim / d : 0;
  const int64_t block_tokens = kv_pool.dim(2);
  if (out.dim(0) != bsz || out.dim(1) != hq || out.dim(2) != d || hkv <= 0 || hkv * d != kv_dim ||
      hq % hkv != 0) {
    std::snprintf(msg, sizeof(msg),
                  "shapes do not agree: q %s, out %s, kv_pool %s (want q, out [B, Hq, D], "
                  "kv_pool [num_blocks, 2, block_tokens, Hkv * D], Hq a multiple of Hkv)",
                  q.ShapeString().c_str(), out.ShapeString().c_str(),
                  kv_pool.ShapeString().c_str());
    Fail(kOp, msg);
  }
  if (d != 64 && d != 128 && d != 256) {
    std::snprintf(msg, sizeof(msg), "head dim %lld is not supported (64, 128 or 256)",
                  static_cast<long long>(d));
    Fail(kOp, msg);
  }
  if (block_tokens <= 0 || (block_tokens & (block_tokens - 1)) != 0 || block_tokens > 4096) {
    std::snprintf(msg, sizeof(msg), "block_tokens must be a power of two <= 4096 (got %lld)",
                  static_cast<long long>(block_tokens));
    Fail(kOp, msg);
  }
  if (!Aligned16(q.data) || !Aligned16(out.data) || !Aligned16(kv_pool.data) ||
      q.stride[0] % 8 != 0 || q.stride[1] % 8 != 0 || out.stride[0] % 8 != 0 ||
      out.stride[1] % 8 != 0 || kv_pool.stride[0] % 8 != 0 || kv_pool.stride[1] % 8 != 0 ||
      kv_pool.stride[2] % 8 != 0) {
    Fail(kOp,
         "q, out and kv_pool need 16-byte aligned data and row / head / block strides that are "
         "multiples of 8 elements");
  }
  if (!(params.scale > 0.0f) || params.window < 0) {
    std::snprintf(msg, sizeof(msg), "needs scale > 0 and window >= 0 (got %g, %d)", params.scale,
                  params.window);
    Fail(kOp, msg);
  }
  if (batch.max_seq_len < 0 ||
      static_cast<int64_t>(batch.max_blocks_per_seq) * block_tokens < batch.max_seq_len) {
    std::snprintf(
        msg, sizeof(msg), "max_seq_len %d does not fit max_blocks_per_seq %d blocks of %lld tokens",
        batch.max_seq_len, batch.max_blocks_per_seq, static_cast<long long>(block_tokens));
    Fail(kOp, msg);
  }
  if (bsz == 0 || hq == 0) return;
  if (bsz > 65535) Fail(kOp, "more than 65535 requests in one call");

  const SplitPlan plan =
      ChooseSplits(ctx.cuda().properties(), static_cast<int>(bsz), static_cast<int>(hq),
                   static_cast<int>(hkv), static_cast<int>(d), batch.max_seq_len, kernel);
  const size_t need =
      ScratchFor(static_cast<int>(bsz), static_cast<int>(hq), static_cast<int>(d), plan);
  if (need > 0 && (scratch == nullptr || scratch_bytes < need || !Aligned16(scratch))) {
    std::snprintf(msg, sizeof(msg),
                  "scratch of %zu bytes is too small or not 16-byte aligned (need %zu: "
                  "PagedDecodeAttentionScratchBytes)",
                  scratch_bytes, need);
    Fail(kOp, msg);
  }

  DecodeArgs a{};
  a.q = q.as<const bf16>();
  a.out = out.as<bf16>();
  a.kv = kv_pool.as<const bf16>();
  a.pos = pos_pool.as<const int32_t>();
  a.table = batch.block_tables;
  a.seq_lens = batch.seq_lens;
  a.q_pos = batch.q_pos;
  if (need > 0) {
    a.part_o = static_cast<float*>(scratch);
    a.part_lse = reinterpret_cast<float*>(
        static_cast<char*>(scratch) +
        PartOBytes(static_cast<int>(bsz), static_cast<int>(hq), static_cast<int>(d), plan));
  }
  a.q_row = q.stride[0];
  a.q_head = q.stride[1];
  a.o_row = out.stride[0];
  a.o_head = out.stride[1];
  a.blk_stride = kv_pool.stride[0];
  a.v_off = kv_pool.stride[1];
  a.kv_row = kv_pool.stride[2];
  a.pos_blk = pos_pool.stride[0];
  a.num_blocks = static_cast<int>(kv_pool.dim(0));
  a.table_stride = batch.max_blocks_per_seq;
  a.hq = static_cast<int>(hq);
  a.group = static_cast<int>(hq / hkv);
  a.head_chunks = plan.head_chunks;
  a.splits = plan.splits;
  a.keys_per_split = plan.keys_per_split;
  a.block_shift = __builtin_ctzll(static_cast<unsigned long long>(block_tokens));
  a.window = params.window;
  a.scale_log2 = params.scale * kLog2e;

  cudaStream_t stream = ctx.cuda().stream();
  const int nkv = static_cast<int>(hkv), nb = static_cast<int>(bsz);
  const bool tc = UsesTensorCores(kernel);
  switch (d) {
    case 64:
      tc ? LaunchDecodeTc<64>(a, nkv, nb, stream) : LaunchDecodeForGroup<64>(a, nkv, nb, stream);
      break;
    case 128:
      tc ? LaunchDecodeTc<128>(a, nkv, nb, stream) : LaunchDecodeForGroup<128>(a, nkv, nb, stream);
      break;
    default:
      tc ? LaunchDecodeTc<256>(a, nkv, nb, stream) : LaunchDecodeForGroup<256>(a, nkv, nb, stream);
      break;
  }
  if (plan.splits > 1) {
    SplitReduceKernel<<<dim3(static_cast<unsigned>(hq), static_cast<unsigned>(bsz)),
                        static_cast<unsigned>(d), 0, stream>>>(
        out.as<bf16>(), out.stride[0], out.stride[1], a.part_o, a.part_lse, batch.seq_lens, a.hq,
        static_cast<int>(d), plan.splits, plan.keys_per_split);
    UP_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace uniprefill::ops::cuda
