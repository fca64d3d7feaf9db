// The FFN's fused gate | up GEMM (cuda_dense_ops.h: GatedGemm) over the sm_90a kernel in
// sm90/gated_gemm_cutlass.cu, and the interleaved weight order it reads.
#include <cassert>
#include <cstdio>
#include <cstdlib>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "ops/cuda/cuda_dense_ops.h"
#include "ops/cuda/sm90/gated_gemm_cutlass.h"

namespace uniprefill::ops::cuda {
namespace {

GatedGemmArgs ArgsOf(const TensorView* out, const TensorView& x, const TensorView& w,
                     Activation act, int variant = 0) {
  GatedGemmArgs a{};
  a.variant = variant;
  a.out = out ? out->data : nullptr;
  a.ldo = out ? out->stride[0] : 0;
  a.x = x.data;
  a.ldx = x.stride[0];
  a.w = w.data;
  a.rows = x.dim(0);
  a.f = w.dim(0) / 2;
  a.k = x.dim(1);
  a.gelu_tanh = act == Activation::kGeluTanh;
  return a;
}

}  // namespace

bool GatedGemmRuns(DeviceContext& ctx, const TensorView& x, const TensorView& w) {
  const cudaDeviceProp& p = ctx.cuda().properties();
  return GatedGemmAvailable(p.major, p.minor) && w.dim(0) % 2 == 0 && w.stride[0] == w.dim(1) &&
         GatedGemmSupports(ArgsOf(nullptr, x, w, Activation::kSilu));
}

void GatedGemm(DeviceContext& ctx, TensorView out, TensorView x, TensorView w, Activation act,
               int variant) {
  // out bf16 [T, F]; x bf16 [T, K]; w bf16 [2F, K] (gate and up rows interleaved).
  assert(x.dtype == DType::kBF16 && w.dtype == DType::kBF16 && out.dtype == DType::kBF16);
  assert(out.dim(0) == x.dim(0) && 2 * out.dim(1) == w.dim(0) && x.dim(1) == w.dim(1));
  assert(x.stride[1] == 1 && out.stride[1] == 1 && GatedGemmRuns(ctx, x, w));
  if (x.dim(0) == 0) return;
  CudaContext& cuda = ctx.cuda();
  if (!LaunchGatedGemm(ArgsOf(&out, x, w, act, variant), cuda.sm_count(), cuda.stream())) {
    std::fprintf(stderr, "GatedGemm: CUTLASS refused a [%lld x %lld] x [%lld x %lld] launch\n",
                 static_cast<long long>(x.dim(0)), static_cast<long long>(x.dim(1)),
                 static_cast<long long>(w.dim(0)), static_cast<long long>(w.dim(1)));
    std::abort();
  }
  UP_CUDA_CHECK_LAUNCH();
}

const char* GatedGemmVariant(int variant) { return GatedGemmVariantName(variant); }

std::vector<int64_t> GatedWeightRowOrder(int64_t f) {
  std::vector<int64_t> order(static_cast<size_t>(2 * f));
  for (int64_t j = 0; j < f; ++j) {
    order[2 * j] = j;          // gate row j
    order[2 * j + 1] = f + j;  // up row j
  }
  return order;
}

}  // namespace uniprefill::ops::cuda
