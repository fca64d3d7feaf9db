// The cuBLASLt algorithms behind ops::cuda::Gemm (cuda_dense_ops.h): the ones its heuristic
// proposes for a problem, best first, and the GEMM run with one of them. Gemm itself always runs
// the heuristic's first; these are for sweeps that measure how far that is from the fastest
// (CudaGemmAlgoThroughputTest: at the row counts a served step runs, 256-2048, the heuristic's
// choice is unmeasured) and for a tuner that would keep the fastest per shape.
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <vector>

#include "core/device_context.h"
#include "core/tensor.h"

namespace uniprefill::ops::cuda {

struct GemmAlgo {
  cublasLtMatmulAlgo_t algo{};
  size_t workspace_bytes = 0;  // what it needs of the context's cuBLAS workspace
  float waves = 0;             // the heuristic's estimate of its waves of CTAs over the SMs
};

// Up to `max` algorithms for out = x w^T (Gemm's views and dtypes), the heuristic's order.
std::vector<GemmAlgo> GemmHeuristicAlgos(DeviceContext& ctx, TensorView out, TensorView x,
                                         TensorView w, int max);

// Gemm with `algo` (one of GemmHeuristicAlgos' for the same views) instead of the cached plan's.
void GemmWithAlgo(DeviceContext& ctx, TensorView out, TensorView x, TensorView w,
                  const GemmAlgo& algo);

}  // namespace uniprefill::ops::cuda
