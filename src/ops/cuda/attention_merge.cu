// MergeAttentionPieces (cuda_attention_merge.h): one warp per (query row, head); every lane
// computes the pieces' weights from their log-sum-exps (at most kMaxAttentionPieces), then
// merges its share of the head's D values two at a time. Memory-bound: each partial element is
// read once, f32 math, one rounding to bf16 at the end.
#include <cassert>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_attention_merge.h"
#include "ops/cuda/dense_kernels_common.cuh"

namespace uniprefill::ops::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

__global__ void MergePiecesKernel(uint16_t* out, int64_t out_stride, const uint16_t* partial,
                                  int64_t piece_rows, const float* lse, int64_t lse_rows,
                                  int pieces, int64_t rows, int hq, int d) {
  const int64_t unit = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (unit >= rows * hq) return;
  const int lane = threadIdx.x % 32;
  const int64_t i = unit / hq;
  const int h = static_cast<int>(unit % hq);
  float w[kMaxAttentionPieces];
  float m = -INFINITY;
  for (int s = 0; s < pieces; ++s) {
    w[s] = lse[(static_cast<int64_t>(s) * hq + h) * lse_rows + i];
    m = fmaxf(m, w[s]);
  }
  float total = 0.0f;
  for (int s = 0; s < pieces; ++s) {
    w[s] = __expf(w[s] - m);
    total += w[s];
  }
  const float inv = 1.0f / total;
  const int64_t piece_stride = piece_rows * hq * d;  // elements between pieces' row i
  const uint32_t* src = reinterpret_cast<const uint32_t*>(partial + (i * hq + h) * d);
  uint32_t* dst = reinterpret_cast<uint32_t*>(out + i * out_stride + static_cast<int64_t>(h) * d);
  for (int pair = lane; pair < d / 2; pair += 32) {
    float lo = 0.0f, hi = 0.0f;
    for (int s = 0; s < pieces; ++s) {
      const uint32_t v = src[s * piece_stride / 2 + pair];
      lo += w[s] * detail::Bf16Lo(v);
      hi += w[s] * detail::Bf16Hi(v);
    }
    dst[pair] = detail::PackBf16(lo * inv, hi * inv);
  }
}

}  // namespace

void MergeAttentionPieces(DeviceContext& ctx, TensorView out, const uint16_t* partial,
                          int64_t piece_rows, const float* lse, int64_t lse_rows, int pieces) {
  assert(out.device == Device::kCuda && out.dtype == DType::kBF16 && out.ndim == 3);
  assert(pieces >= 1 && pieces <= kMaxAttentionPieces);
  const int64_t rows = out.dim(0);
  const int hq = static_cast<int>(out.dim(1)), d = static_cast<int>(out.dim(2));
  assert(d % 2 == 0 && out.stride[2] == 1 && out.stride[1] == d && out.stride[0] % 2 == 0);
  assert(rows <= piece_rows && rows <= lse_rows);
  if (rows == 0) return;
  const int64_t units = rows * hq;
  const int64_t blocks = (units + kWarpsPerBlock - 1) / kWarpsPerBlock;
  MergePiecesKernel<<<static_cast<unsigned>(blocks), kWarpsPerBlock * 32, 0,
                      ctx.cuda().stream()>>>(static_cast<uint16_t*>(out.data), out.stride[0],
                                             partial, piece_rows, lse, lse_rows, pieces, rows, hq,
                                             d);
  UP_CUDA_CHECK_LAUNCH();
}

}  // namespace uniprefill::ops::cuda
