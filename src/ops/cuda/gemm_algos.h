// The cuBLASLt algorithms behind ops::cuda::Gemm (cuda_dense_ops.h): the ones its heuristic
// proposes for a problem, best first, the GEMM run with one of them, and a tuner that keeps the
// fastest per weight shape and row bucket (ops/gemm_tune_plan.h). Gemm runs the heuristic's first
// unless a tuner kept another for its problem's bucket. On the H200 the heuristic's first cost an
// 8B layer's four GEMMs 3.0% at 128 rows, 6.5% at 257, 3.2% at 384 and 5.4% at 2048 over the
// fastest of its 16 (24th session, CudaGemmAlgoThroughputTest).
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <vector>

#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ops/gemm_tune_plan.h"

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

// The median ms of `runs` launches of GemmWithAlgo after one untimed (events on the stream;
// synchronises it).
double GemmAlgoMedianMs(DeviceContext& ctx, TensorView out, TensorView x, TensorView w,
                        const GemmAlgo& algo, int runs);

// Gemm's problems of out's rows' bucket (out, x, w: the problem at the bucket's top, 256-byte
// aligned) run `algo` from now on, where cuBLASLt accepts it for their own rows.
void KeepGemmAlgo(DeviceContext& ctx, TensorView out, TensorView x, TensorView w,
                  const GemmAlgo& algo);

// The algorithm Gemm runs for this problem (its plan made and cached when not yet).
GemmAlgo PlannedGemmAlgo(DeviceContext& ctx, TensorView out, TensorView x, TensorView w);

// Cached plans re-choose their algorithm from what KeepGemmAlgo kept (before serving starts: no
// GEMM may run meanwhile); returns how many changed.
int RechooseCachedGemmPlans(DeviceContext& ctx);

struct GemmTuneReport {
  int shapes = 0;            // distinct weight shapes
  int problems = 0;          // shapes x row buckets timed
  int kept_other = 0;        // problems whose fastest beat the heuristic's first by the margin
  double first_ms = 0;       // every problem once with the heuristic's first, summed
  double kept_ms = 0;        // the same with the algorithms kept
  double seconds = 0;        // the tuning's wall time
};

// Times up to `candidates` of the heuristic's algorithms for each distinct weight (bf16 [N, K],
// contiguous rows) at every row bucket of `rows` (random bf16 inputs), keeps per problem the
// fastest that beats the heuristic's first by more than min_gain (PickGemmCandidate), sets the
// context's buckets and re-chooses cached plans. Synchronises the stream; run before serving.
Result<GemmTuneReport> TuneGemms(DeviceContext& ctx, const std::vector<TensorView>& weights,
                                 const GemmTuneRows& rows, int candidates = 16,
                                 double min_gain = 0.02);

}  // namespace uniprefill::ops::cuda
