// TuneGemms (gemm_algos.h): per weight shape and row bucket, the fastest of cuBLASLt's proposals.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <set>
#include <tuple>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "core/cuda/stream_timing.h"
#include "ops/cuda/cuda_dense_ops.h"
#include "ops/cuda/gemm_algos.h"

namespace uniprefill::ops::cuda {

double GemmAlgoMedianMs(DeviceContext& ctx, TensorView out, TensorView x, TensorView w,
                        const GemmAlgo& algo, int runs) {
  GemmWithAlgo(ctx, out, x, w, algo);  // untimed: first-launch costs
  Result<std::vector<float>> ms = TimeRunsMs(ctx.cuda().stream(), std::max(runs, 1),
                                             [&] { GemmWithAlgo(ctx, out, x, w, algo); });
  if (!ms.ok()) return -1;  // not usable: the tuner keeps the heuristic's algorithm
  std::sort(ms->begin(), ms->end());
  return (*ms)[ms->size() / 2];
}

Result<GemmTuneReport> TuneGemms(DeviceContext& ctx, const std::vector<TensorView>& weights,
                                 const GemmTuneRows& rows, int candidates, double min_gain) {
  const auto t0 = std::chrono::steady_clock::now();
  GemmTuneReport report;
  const std::vector<int64_t> buckets = GemmTuneBuckets(rows);
  if (buckets.empty() || candidates < 1) {
    return InvalidArgument("TuneGemms: no row buckets (step and limit must be positive)");
  }
  // One weight per distinct problem (N, K, row stride): its own values, the inputs random.
  std::vector<TensorView> distinct;
  std::set<std::tuple<int64_t, int64_t, int64_t>> seen;
  int64_t max_k = 0, max_n = 0;
  for (const TensorView& w : weights) {
    if (w.dtype != DType::kBF16 || w.ndim != 2 || w.dim(0) == 0 || w.stride[1] != 1) continue;
    if (!seen.emplace(w.dim(0), w.dim(1), w.stride[0]).second) continue;
    distinct.push_back(w);
    max_n = std::max(max_n, w.dim(0));
    max_k = std::max(max_k, w.dim(1));
  }
  report.shapes = static_cast<int>(distinct.size());
  if (distinct.empty()) return report;
  const int64_t top = buckets.back();
  // x bf16 [top, max_k] random (a GEMM of zeros runs faster than one of data), out bf16
  // [top, max_n]; cudaMalloc's pointers are 256-byte aligned, as the step's work buffers are.
  UP_ASSIGN_OR_RETURN(DeviceBuffer x_buf, DeviceBuffer::Allocate(top * max_k * 2));
  UP_ASSIGN_OR_RETURN(DeviceBuffer out_buf, DeviceBuffer::Allocate(top * max_n * 2));
  FillRandomBf16(ctx, x_buf.data(), top * max_k, 7, 1.0f);
  constexpr int kRuns = 5;  // timed launches per candidate (their median)
  for (const TensorView& w : distinct) {
    const int64_t N = w.dim(0), K = w.dim(1);
    for (int64_t M : buckets) {
      const TensorView x = x_buf.View(DType::kBF16, {M, K});
      const TensorView out = out_buf.View(DType::kBF16, {M, N});
      const std::vector<GemmAlgo> algos = GemmHeuristicAlgos(ctx, out, x, w, candidates);
      if (algos.empty()) continue;  // Gemm would abort on it too; not the tuner's to report
      std::vector<double> ms;
      for (const GemmAlgo& a : algos) ms.push_back(GemmAlgoMedianMs(ctx, out, x, w, a, kRuns));
      const int kept = PickGemmCandidate(ms, min_gain);
      ++report.problems;
      report.first_ms += ms[0];
      report.kept_ms += ms[static_cast<size_t>(kept)];
      if (kept != 0) {
        KeepGemmAlgo(ctx, out, x, w, algos[static_cast<size_t>(kept)]);
        ++report.kept_other;
      }
    }
  }
  ctx.cuda().SetMatmulTuneRows(rows.step, rows.max_rows);
  RechooseCachedGemmPlans(ctx);
  report.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace uniprefill::ops::cuda
