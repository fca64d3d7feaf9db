// RopePagedKvAppend (cuda_paged_attention.h): an attention layer's RoPE and its keys' and values'
// append in one launch. Why: at a prefill chunk of a few hundred rows both are a few
// microseconds of work behind a launch each (28th session, H100: Rope 5.1 us and the append
// 2.8 us a layer at 256 rows, each with ~2-3 us of idle GPU before it); the row's arithmetic is
// Rope's (rope_row.cuh) and its copy PagedKvAppend's (paged_append_row.cuh), so the results are
// the two launches' bit for bit.
#include <algorithm>
#include <cassert>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_paged_attention.h"
#include "ops/cuda/paged_append_row.cuh"
#include "ops/cuda/rope_row.cuh"

namespace uniprefill::ops::cuda {
namespace {

constexpr int kThreads = 256;

template <RopeStyle kStyle, bool kPaired>
__global__ void __launch_bounds__(kThreads)
    RopeAppendKernel(detail::RopeArgs rope, detail::AppendArgs append) {
  extern __shared__ float cos_sin[];  // f32 [2, half]: cos, then sin
  if (rope.half > 0) detail::RopeRow<kStyle, kPaired>(rope, blockIdx.x, cos_sin);
  __syncthreads();  // the row's rotated keys (global memory) visible to every thread of the block
  detail::AppendRow(append, blockIdx.x);
}

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "RopePagedKvAppend: %s\n", what);
  std::abort();
}

}  // namespace

void RopePagedKvAppend(DeviceContext& ctx, TensorView qk, int kv_heads, const int32_t* pos,
                       const float* inv_freq, int rot_dims, RopeStyle style, TensorView kv_pool,
                       TensorView pos_pool, TensorView v_new, const int32_t* slot_mapping,
                       const int32_t* positions, TensorView index_pool, const int32_t* indices) {
  if (qk.device != Device::kCuda || qk.dtype != DType::kBF16 || qk.ndim != 3 ||
      qk.stride[2] != 1 || qk.stride[1] != qk.dim(2) || kv_heads <= 0 || kv_heads > qk.dim(1)) {
    char msg[256];
    std::snprintf(msg, sizeof(msg),
                  "qk must be a bf16 [R, Hq + Hkv, D] CUDA view with heads D apart and Hkv = %d "
                  "of its heads the keys (got %s)",
                  kv_heads, qk.ShapeString().c_str());
    Fail(msg);
  }
  if (rot_dims % 2 != 0 || rot_dims < 0 || rot_dims > qk.dim(2)) Fail("rot_dims must be even, <= D");
  const int64_t R = qk.dim(0), D = qk.dim(2);
  // The keys: the row's last kv_heads heads, contiguous ([R, kv_heads * D], rows as qk's).
  TensorView keys = TensorView::Contiguous(
      static_cast<uint16_t*>(qk.data) + (qk.dim(1) - kv_heads) * D, DType::kBF16,
      {R, kv_heads * D}, Device::kCuda);
  keys.stride[0] = qk.stride[0];
  const detail::AppendArgs append =
      detail::CheckedAppendArgs("RopePagedKvAppend", kv_pool, pos_pool, keys, v_new,
                                slot_mapping, positions, index_pool, indices);
  if (R == 0) return;
  const detail::RopeArgs rope = detail::RopeArgsFor(qk, pos, inv_freq, rot_dims);
  const bool paired = detail::RopePairedOk(rope);
  const size_t smem = sizeof(float) * 2 * std::max(rope.half, 1);
  const unsigned grid = static_cast<unsigned>(R);
  cudaStream_t stream = ctx.cuda().stream();
  if (style == RopeStyle::kNeox) {
    if (paired) {
      RopeAppendKernel<RopeStyle::kNeox, true><<<grid, kThreads, smem, stream>>>(rope, append);
    } else {
      RopeAppendKernel<RopeStyle::kNeox, false><<<grid, kThreads, smem, stream>>>(rope, append);
    }
  } else if (paired) {
    RopeAppendKernel<RopeStyle::kAdjacent, true><<<grid, kThreads, smem, stream>>>(rope, append);
  } else {
    RopeAppendKernel<RopeStyle::kAdjacent, false><<<grid, kThreads, smem, stream>>>(rope, append);
  }
  UP_CUDA_CHECK_LAUNCH();
}

}  // namespace uniprefill::ops::cuda
