// Rope on bf16 [T, H, D] in place, as ops/cpu/cpu_rope.cc (the row's arithmetic: rope_row.cuh).
// One block per token.
#include <algorithm>
#include <cassert>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_dense_ops.h"
#include "ops/cuda/rope_row.cuh"

namespace uniprefill::ops::cuda {
namespace {

using detail::RopeArgs;

constexpr int kRopeThreads = 256;

template <RopeStyle kStyle, bool kPaired>
__global__ void __launch_bounds__(kRopeThreads) RopeKernel(RopeArgs a) {
  extern __shared__ float cos_sin[];  // f32 [2, half]: cos, then sin
  detail::RopeRow<kStyle, kPaired>(a, blockIdx.x, cos_sin);
}

template <RopeStyle kStyle>
void LaunchRope(const RopeArgs& a, int64_t tokens, bool paired, cudaStream_t stream) {
  const int work = a.heads * (paired ? a.half / 2 : a.half);
  const int threads = std::min(kRopeThreads, std::max(32, (work + 31) / 32 * 32));
  const size_t smem = sizeof(float) * 2 * a.half;
  assert(tokens <= INT32_MAX);
  if (paired) {
    RopeKernel<kStyle, true><<<static_cast<unsigned>(tokens), threads, smem, stream>>>(a);
  } else {
    RopeKernel<kStyle, false><<<static_cast<unsigned>(tokens), threads, smem, stream>>>(a);
  }
  UP_CUDA_CHECK_LAUNCH();
}

}  // namespace

void Rope(DeviceContext& ctx, TensorView x, const int32_t* pos, const float* inv_freq, int rot_dims,
          RopeStyle style) {
  // x bf16 [T, H, D] (token and head strides free, last dim contiguous); pos int32 [T];
  // inv_freq f32 [rot_dims / 2].
  assert(x.device == Device::kCuda && x.dtype == DType::kBF16 && x.ndim == 3);
  assert(x.stride[2] == 1 && rot_dims % 2 == 0 && rot_dims <= x.dim(2));
  const int64_t T = x.dim(0);
  if (T == 0 || x.dim(1) == 0 || rot_dims == 0) return;
  const RopeArgs a = detail::RopeArgsFor(x, pos, inv_freq, rot_dims);
  const bool paired = detail::RopePairedOk(a);
  if (style == RopeStyle::kNeox) {
    LaunchRope<RopeStyle::kNeox>(a, T, paired, ctx.cuda().stream());
  } else {
    LaunchRope<RopeStyle::kAdjacent>(a, T, paired, ctx.cuda().stream());
  }
}

}  // namespace uniprefill::ops::cuda
