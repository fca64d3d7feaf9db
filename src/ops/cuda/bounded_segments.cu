// Bounded segments (cuda_uniprefill.h): the index kernels that let a fixed-ratio UniPrefill drop
// run without a host sync. The host sizes every launch by each request's capacity; these kernels
// turn the device-side kept counts into row lists. Both are tiny (a thread per output row).
#include <cuda_runtime.h>

#include <cassert>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_uniprefill.h"

namespace uniprefill::ops::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void SegmentTailRowsKernel(int32_t* rows, const int32_t* begin, const int32_t* count,
                                      int batch, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= batch * n) return;
  const int r = i / n, j = i % n;
  rows[i] = begin[r] + count[r] - n + j;
}

// The request owning new row j: the last r with new_cu[r] <= j (binary search over batch + 1).
__device__ int OwnerOf(const int32_t* new_cu, int batch, int64_t j) {
  int lo = 0, hi = batch - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (new_cu[mid] <= j) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

__global__ void CompactSegmentsKernel(int32_t* source, int32_t* new_pos, const int32_t* kept_rows,
                                      const int32_t* kept_count, const int32_t* old_begin,
                                      const int32_t* new_cu, const int32_t* old_pos, int batch,
                                      int64_t new_rows, int32_t* new_index,
                                      const int32_t* index_base, const int32_t* pass_through) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= new_rows) return;
  const int r = OwnerOf(new_cu, batch, j);
  const int64_t local = j - new_cu[r];
  if (local < kept_count[r]) {
    const bool whole = pass_through != nullptr && pass_through[r] != 0;
    const int32_t row =
        old_begin[r] + (whole ? static_cast<int32_t>(local) : kept_rows[old_begin[r] + local]);
    source[j] = row;
    new_pos[j] = old_pos[row];
    if (new_index != nullptr) new_index[j] = index_base[r] + static_cast<int32_t>(local);
  } else {
    source[j] = -1;
    new_pos[j] = kPaddingPosition;
    if (new_index != nullptr) new_index[j] = kPaddingPosition;
  }
}

__global__ void GatherPositionsKernel(int32_t* out, const int32_t* in, const int32_t* source,
                                      int64_t n) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j < n) out[j] = source[j] >= 0 ? in[source[j]] : kPaddingPosition;
}

}  // namespace

void GatherPositions(DeviceContext& ctx, int32_t* out, const int32_t* in, const int32_t* source,
                     int64_t n) {
  assert(n >= 0);
  if (n == 0) return;
  GatherPositionsKernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0,
                          ctx.cuda().stream()>>>(out, in, source, n);
  UP_CUDA_CHECK_LAUNCH();
}

void SegmentTailRows(DeviceContext& ctx, int32_t* rows, const int32_t* begin, const int32_t* count,
                     int batch, int n) {
  assert(batch >= 1 && n >= 1);
  const int total = batch * n;
  SegmentTailRowsKernel<<<(total + kThreads - 1) / kThreads, kThreads, 0, ctx.cuda().stream()>>>(
      rows, begin, count, batch, n);
  UP_CUDA_CHECK_LAUNCH();
}

void CompactSegments(DeviceContext& ctx, int32_t* source, int32_t* new_pos,
                     const int32_t* kept_rows, const int32_t* kept_count,
                     const int32_t* old_begin, const int32_t* new_cu, const int32_t* old_pos,
                     int batch, int64_t new_rows, int32_t* new_index, const int32_t* index_base,
                     const int32_t* pass_through) {
  assert(batch >= 1 && new_rows >= 0 && (new_index == nullptr) == (index_base == nullptr));
  if (new_rows == 0) return;
  const unsigned blocks = static_cast<unsigned>((new_rows + kThreads - 1) / kThreads);
  CompactSegmentsKernel<<<blocks, kThreads, 0, ctx.cuda().stream()>>>(
      source, new_pos, kept_rows, kept_count, old_begin, new_cu, old_pos, batch, new_rows,
      new_index, index_base, pass_through);
  UP_CUDA_CHECK_LAUNCH();
}

}  // namespace uniprefill::ops::cuda
