// UniPrefill token selection on the GPU: the twin of sparsity::SelectTokens for one request, equal to
// it element for element on the same importance (the same double sums in the same order, the same
// tie-breaking, the same keep rule), with no host synchronisation.
//
// Kernels (N tokens, B = ceil(N / G) blocks):
//   1. BlockScoresKernel (a thread per block): b_g = double sum of its importance in token order,
//      exactly the CPU's sequential accumulation.
//   2. RankBlocksKernel (a thread per block): rank = number of blocks ordered before it (higher
//      score, or equal score and lower index: std::stable_sort's order); order[rank] = block.
//      O(B^2) comparisons spread over the GPU: ~4M at B = 2048, 67M at B = 8192.
//   3. SelectKernel (one CTA of 1024 threads): top-p: the total (sequential sum in block order, as
//      std::accumulate) and the walk over ranks (sequential sum of score / total in rank order, the
//      divisions done in parallel), both by one thread over chunks staged in shared memory; then the
//      kept tokens (sink, window, blocks of rank < keep) compacted in order by a block-wide scan.
// The fixed-ratio keep count and the keep-everything cases are decided on the host from N and the
// parameters, with the CPU's own expressions; when N lives on the device (a segment whose length
// is known only there, after an earlier sync-free drop), every kernel reads it and evaluates the
// same expressions itself (ResolveSize), so fixed-ratio UniPrefill never needs a host sync.
#include <cub/block/block_scan.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_uniprefill.h"
#include "sparsity/keep_rules.h"

namespace uniprefill::ops::cuda {
namespace {

constexpr int kScoreThreads = 128;
constexpr int kRankThreads = 128;
constexpr int kRankChunk = 2048;     // scores staged in shared memory per step (16 KB)
constexpr int kSelectThreads = 1024;
constexpr int kWalkChunk = 2048;     // ranks per step of the sequential walk (16 KB of doubles)
constexpr int kItemsPerThread = 4;   // tokens per thread per compaction step
constexpr size_t kAlign = 256;

size_t AlignUp(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Scratch layout for B blocks: f64 scores [B], i32 order [B] (block of each rank), i32 rank [B].
struct ScratchLayout {
  size_t order_offset, rank_offset, bytes;
};
ScratchLayout LayoutFor(int64_t n_blocks) {
  ScratchLayout s;
  s.order_offset = AlignUp(sizeof(double) * n_blocks);
  s.rank_offset = s.order_offset + AlignUp(sizeof(int32_t) * n_blocks);
  s.bytes = std::max(s.rank_offset + AlignUp(sizeof(int32_t) * n_blocks), kAlign);
  return s;
}

__global__ void KeepAllKernel(int32_t* kept_rows, int32_t* kept_count, int n_tokens) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n_tokens) kept_rows[i] = i;
  if (i == 0) *kept_count = n_tokens;
}

struct SelectArgs {
  int n_tokens, block_size, n_blocks, sink, last_n;
  int fixed_keep;  // > 0: fixed-ratio mode, keep this many blocks; 0: top-p
  double top_p;
  // Device-side N (nullptr: n_tokens above is exact). When set, n_tokens is only an upper bound
  // and n_blocks, fixed_keep and keep_all are recomputed from *n_device by ResolveSize.
  const int32_t* n_device;
  bool fixed_ratio;
  float keep_ratio;
  bool keep_all;  // keep every token (decided on the host when n_device is null)
};

// The sizes of this call: as given, or recomputed from the device-side N with the host's (and
// sparsity::SelectTokens') own expressions.
__device__ __forceinline__ SelectArgs ResolveSize(SelectArgs a) {
  if (a.n_device == nullptr) return a;
  a.n_tokens = max(0, min(*a.n_device, a.n_tokens));
  a.n_blocks = (a.n_tokens + a.block_size - 1) / a.block_size;
  a.keep_all = sparsity::KeepsAll(a.n_tokens, a.sink, a.last_n, a.fixed_ratio,
                                  static_cast<float>(a.top_p), a.keep_ratio);
  if (a.fixed_ratio && a.n_blocks > 0) {
    a.fixed_keep = static_cast<int>(sparsity::FixedKeepBlocks(a.n_blocks, a.keep_ratio));
  }
  return a;
}

// scores[g] = sum of importance[g * G .. min(N, (g + 1) * G)) in double, in token order.
__global__ void BlockScoresKernel(double* scores, const float* importance, SelectArgs args) {
  const SelectArgs a = ResolveSize(args);
  const int n_tokens = a.n_tokens, block_size = a.block_size, n_blocks = a.n_blocks;
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= n_blocks) return;
  const int64_t begin = static_cast<int64_t>(g) * block_size;
  const int64_t end = min(static_cast<int64_t>(n_tokens), begin + block_size);
  double sum = 0.0;
  for (int64_t i = begin; i < end; ++i) sum += static_cast<double>(importance[i]);
  scores[g] = sum;
}

// rank[g] = #{c : scores[c] > scores[g] or (scores[c] == scores[g] and c < g)}; order[rank[g]] = g.
__global__ void __launch_bounds__(kRankThreads)
    RankBlocksKernel(int32_t* order, int32_t* rank, const double* scores, SelectArgs args) {
  const int n_blocks = ResolveSize(args).n_blocks;  // uniform over the block: barriers are safe
  __shared__ double chunk[kRankChunk];
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  const double mine = g < n_blocks ? scores[g] : 0.0;
  int count = 0;
  for (int c0 = 0; c0 < n_blocks; c0 += kRankChunk) {
    const int len = min(kRankChunk, n_blocks - c0);
    __syncthreads();  // the previous chunk is no longer read
    for (int t = threadIdx.x; t < len; t += blockDim.x) chunk[t] = scores[c0 + t];
    __syncthreads();
    // Blocks before g win ties, blocks after g must be strictly higher.
    const int split = min(max(g - c0, 0), len);
#pragma unroll 4
    for (int t = 0; t < split; ++t) count += chunk[t] >= mine;
#pragma unroll 4
    for (int t = split; t < len; ++t) count += chunk[t] > mine;
  }
  if (g < n_blocks) {
    rank[g] = count;
    if (count < n_blocks) order[count] = g;  // always true unless a score is NaN
  }
}

// Top-p keep count, as sparsity::SelectBlocks: walk the ranks keeping block r while r == 0 or the
// normalised mass before it is <= p. Sequential in thread 0 for bit-identical double sums.
__device__ int TopPKeepCount(const SelectArgs& a, const double* scores, const int32_t* order,
                             double* buf) {
  __shared__ double total_s;
  __shared__ int keep_s;
  __shared__ bool done_s;
  // total = std::accumulate(scores, 0.0): block order.
  double total = 0.0;  // meaningful in thread 0
  for (int c0 = 0; c0 < a.n_blocks; c0 += kWalkChunk) {
    const int len = min(kWalkChunk, a.n_blocks - c0);
    for (int t = threadIdx.x; t < len; t += blockDim.x) buf[t] = scores[c0 + t];
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int t = 0; t < len; ++t) total += buf[t];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    total_s = total;
    keep_s = 0;
    done_s = false;
  }
  __syncthreads();
  total = total_s;

  double before = 0.0;  // thread 0: normalised mass of the blocks kept so far
  int keep = 0;         // thread 0
  for (int c0 = 0; c0 < a.n_blocks; c0 += kWalkChunk) {
    const int len = min(kWalkChunk, a.n_blocks - c0);
    for (int t = threadIdx.x; t < len; t += blockDim.x) {
      int g = order[c0 + t];
      g = g >= 0 && g < a.n_blocks ? g : 0;  // only a NaN score leaves a hole
      buf[t] = total > 0 ? scores[g] / total : 0.0;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      bool done = false;
      for (int t = 0; t < len; ++t) {
        if (c0 + t > 0 && !(before <= a.top_p)) {  // the block that crosses p is kept
          done = true;
          break;
        }
        ++keep;
        before += buf[t];
      }
      keep_s = keep;
      done_s = done;
    }
    __syncthreads();
    if (done_s) break;  // uniform: every thread reads it after the barrier
  }
  __syncthreads();
  return keep_s;
}

// One CTA: the keep count, then kept_rows = ascending tokens with i < S, i >= N - n, or a block
// of rank < keep; kept_count = their number.
__global__ void __launch_bounds__(kSelectThreads)
    SelectKernel(int32_t* kept_rows, int32_t* kept_count, const double* scores,
                 const int32_t* order, const int32_t* rank, SelectArgs args) {
  using Scan = cub::BlockScan<int, kSelectThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ double buf[kWalkChunk];
  const SelectArgs a = ResolveSize(args);
  if (a.keep_all) {  // only with a device-side N: the host handles its own keep-all cases
    for (int i = threadIdx.x; i < a.n_tokens; i += blockDim.x) kept_rows[i] = i;
    if (threadIdx.x == 0) *kept_count = a.n_tokens;
    return;
  }
  const int keep = a.fixed_keep > 0 ? a.fixed_keep : TopPKeepCount(a, scores, order, buf);

  constexpr int kStep = kSelectThreads * kItemsPerThread;
  const int window_begin = a.n_tokens - a.last_n;
  int written = 0;  // the same in every thread
  for (int base = 0; base < a.n_tokens; base += kStep) {
    const int first = base + threadIdx.x * kItemsPerThread;  // blocked: thread order = token order
    bool kept[kItemsPerThread];
    int count = 0;
#pragma unroll
    for (int e = 0; e < kItemsPerThread; ++e) {
      const int i = first + e;
      kept[e] = i < a.n_tokens &&
                (i < a.sink || i >= window_begin || rank[i / a.block_size] < keep);
      count += kept[e];
    }
    int offset, step_total;
    Scan(scan_storage).ExclusiveSum(count, offset, step_total);
#pragma unroll
    for (int e = 0; e < kItemsPerThread; ++e) {
      if (kept[e]) kept_rows[written + offset++] = first + e;
    }
    written += step_total;
    __syncthreads();  // scan_storage is reused
  }
  if (threadIdx.x == 0) *kept_count = written;
}

void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "cuda::SelectTokens: %s\n", what);
    std::abort();
  }
}

}  // namespace

int64_t FixedRatioCapacity(int64_t capacity, const sparsity::SelectionParams& p) {
  return sparsity::FixedRatioCapacity(capacity, p.block_size, p.sink, p.last_n, p.keep_ratio);
}

int64_t FixedRatioMinimum(int64_t minimum, const sparsity::SelectionParams& p) {
  return sparsity::FixedRatioMinimum(minimum, p.block_size, p.sink, p.last_n, p.keep_ratio);
}

size_t SelectTokensScratchBytes(int64_t max_tokens, const sparsity::SelectionParams& params) {
  const int64_t g = std::max(params.block_size, 1);
  return LayoutFor((std::max<int64_t>(max_tokens, 0) + g - 1) / g).bytes;
}

void SelectTokens(DeviceContext& ctx, int32_t* kept_rows, int32_t* kept_count,
                  const float* importance, int64_t n_tokens,
                  const sparsity::SelectionParams& params, void* scratch, size_t scratch_bytes,
                  const int32_t* n_tokens_device) {
  // Validated where the configuration was made (ValidateUniPrefillConfig); debug builds re-check.
  assert(sparsity::ValidateSelectionParams(params).ok());
  Require(n_tokens >= 0 && n_tokens < (int64_t{1} << 31) - kSelectThreads * kItemsPerThread,
          "token count out of range");
  cudaStream_t stream = ctx.cuda().stream();
  const int n = static_cast<int>(n_tokens);
  // Keep everything: the same conditions as sparsity::SelectTokens (with a device-side N, the
  // kernels decide it: SelectKernel keeps everything then).
  const bool keep_all =
      n_tokens_device == nullptr &&
      sparsity::KeepsAll(n_tokens, params.sink, params.last_n,
                         params.mode == sparsity::SelectionMode::kFixedRatio, params.top_p,
                         params.keep_ratio);
  if (keep_all) {
    KeepAllKernel<<<std::max(1, (n + 255) / 256), 256, 0, stream>>>(kept_rows, kept_count, n);
    UP_CUDA_CHECK_LAUNCH();
    return;
  }

  // At least one block: with a device-side N the grids are sized by the bound n_tokens.
  const int64_t n_blocks =
      std::max<int64_t>(1, (n_tokens + params.block_size - 1) / params.block_size);
  const ScratchLayout layout = LayoutFor(n_blocks);
  Require(scratch != nullptr && scratch_bytes >= layout.bytes &&
              reinterpret_cast<uintptr_t>(scratch) % alignof(double) == 0,
          "scratch missing, misaligned or smaller than SelectTokensScratchBytes(N)");
  double* scores = static_cast<double*>(scratch);
  int32_t* order = reinterpret_cast<int32_t*>(static_cast<char*>(scratch) + layout.order_offset);
  int32_t* rank = reinterpret_cast<int32_t*>(static_cast<char*>(scratch) + layout.rank_offset);

  SelectArgs a;
  a.n_tokens = n;
  a.block_size = params.block_size;
  a.n_blocks = static_cast<int>(n_blocks);
  a.sink = params.sink;
  a.last_n = params.last_n;
  a.top_p = params.top_p;  // the CPU compares its double mass with the float p promoted
  a.fixed_keep = 0;
  a.n_device = n_tokens_device;
  a.fixed_ratio = params.mode == sparsity::SelectionMode::kFixedRatio;
  a.keep_ratio = params.keep_ratio;
  a.keep_all = false;
  if (params.mode == sparsity::SelectionMode::kFixedRatio) {
    a.fixed_keep = static_cast<int>(sparsity::FixedKeepBlocks(n_blocks, params.keep_ratio));
  }

  const int grid_blocks = static_cast<int>((n_blocks + kScoreThreads - 1) / kScoreThreads);
  BlockScoresKernel<<<grid_blocks, kScoreThreads, 0, stream>>>(scores, importance, a);
  UP_CUDA_CHECK_LAUNCH();
  const int grid_rank = static_cast<int>((n_blocks + kRankThreads - 1) / kRankThreads);
  RankBlocksKernel<<<grid_rank, kRankThreads, 0, stream>>>(order, rank, scores, a);
  UP_CUDA_CHECK_LAUNCH();
  SelectKernel<<<1, kSelectThreads, 0, stream>>>(kept_rows, kept_count, scores, order, rank, a);
  UP_CUDA_CHECK_LAUNCH();
}

}  // namespace uniprefill::ops::cuda
