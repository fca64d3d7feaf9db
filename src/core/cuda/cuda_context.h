// CudaContext: the per-device state CUDA ops need (stream, cuBLASLt handle and workspace, device
// properties). Owned by a DeviceContext made with DeviceContext::Cuda(); ops reach it through
// ctx.cuda(). Every op enqueues on stream() and never synchronises unless it says so.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "core/cuda/device_buffer.h"
#include "core/status.h"

namespace uniprefill {

// A cuBLASLt matmul set up for one problem: its descriptors and the algorithm the heuristic chose.
// Reused for every GEMM of the same key, since cublasLtMatmulAlgoGetHeuristic costs tens of
// microseconds per call.
struct BlasLtMatmulPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // c also describes d
  cublasLtMatmulAlgo_t algo{};
};
// Everything a plan depends on: the column-major problem (m, n, k, leading dimensions), the
// alignment in bytes of each pointer (the heuristic excludes algorithms that need more), and a
// caller-defined kind (dtypes, transposes, epilogue) so different GEMM variants never collide.
struct BlasLtMatmulKey {
  int32_t kind = 0;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  uint32_t align_a = 0, align_b = 0, align_c = 0;
  auto Tie() const { return std::tie(kind, m, n, k, lda, ldb, ldc, align_a, align_b, align_c); }
  bool operator<(const BlasLtMatmulKey& o) const { return Tie() < o.Tie(); }
};
// Destroys a plan's descriptors (each may be null).
void DestroyBlasLtMatmulPlan(const BlasLtMatmulPlan& plan);

class CudaContext {
 public:
  static Result<std::unique_ptr<CudaContext>> Create(int device_index);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device_index() const { return device_index_; }
  cudaStream_t stream() const { return stream_; }
  cublasLtHandle_t blas_lt() const { return blas_lt_; }
  // cuBLAS (not Lt) for what cuBLASLt lacks: grouped GEMMs (ops/cuda/grouped_gemm.h). On stream().
  cublasHandle_t blas() const { return blas_; }
  void* blas_workspace() const { return workspace_.data(); }
  size_t blas_workspace_bytes() const { return workspace_.size(); }
  const cudaDeviceProp& properties() const { return props_; }
  int sm_count() const { return props_.multiProcessorCount; }
  std::string Describe() const;  // e.g. "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)"
  // The device's PCI bus id ("0000:1B:00.0"), how NVML (core/gpu_clock_sampler.h) finds the same
  // GPU whatever CUDA_VISIBLE_DEVICES renumbered.
  std::string PciBusId() const;

  void Synchronize() const;

  // The cuBLASLt plan cache (thread-safe; cached plans stay valid until the context dies).
  // FindMatmulPlan: the plan for key, or null. CacheMatmulPlan: takes ownership of plan and
  // returns the cached one (an earlier plan for the same key wins: plan is then destroyed), or
  // null when the cache is full (kMaxMatmulPlans keys), leaving plan with the caller.
  static constexpr size_t kMaxMatmulPlans = 4096;
  const BlasLtMatmulPlan* FindMatmulPlan(const BlasLtMatmulKey& key) const;
  const BlasLtMatmulPlan* CacheMatmulPlan(const BlasLtMatmulKey& key, const BlasLtMatmulPlan& plan);
  // Calls fn on every cached plan (a tuner re-choosing their algorithms before serving starts:
  // no GEMM may run meanwhile, on any thread).
  void ForEachMatmulPlan(const std::function<void(const BlasLtMatmulKey&, BlasLtMatmulPlan&)>& fn);

  // Algorithms a GEMM tuner kept (ops/cuda/gemm_algos.h TuneGemms), keyed by the problem at its
  // row bucket's top (key.n the bucket), and the buckets' rows (step, limit; 0: nothing tuned).
  // Gemm's new plans look here first. Thread-safe like the plan cache.
  void KeepTunedMatmulAlgo(const BlasLtMatmulKey& bucket_key, const cublasLtMatmulAlgo_t& algo);
  bool FindTunedMatmulAlgo(const BlasLtMatmulKey& bucket_key, cublasLtMatmulAlgo_t* algo) const;
  void SetMatmulTuneRows(int64_t step, int64_t max_rows);
  int64_t matmul_tune_step() const { return tune_step_.load(); }
  int64_t matmul_tune_max_rows() const { return tune_max_rows_.load(); }
  // Gemm runs problems of more rows than this (0: no limit) as row blocks of at most this many,
  // one cuBLASLt call each (UNIPREFILL_CUDA_GEMM_MAX_ROWS; a same-binary experiment: cuBLASLt's
  // rate per row count differs, and a prefill's 32K-row GEMMs may run faster as blocks).
  void SetGemmMaxRows(int64_t rows) { gemm_max_rows_.store(rows); }
  int64_t gemm_max_rows() const { return gemm_max_rows_.load(); }

 private:
  CudaContext() = default;

  int device_index_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t blas_lt_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  DeviceBuffer workspace_;
  cudaDeviceProp props_{};
  mutable std::mutex plans_mu_;
  std::map<BlasLtMatmulKey, BlasLtMatmulPlan> plans_;  // node-based: pointers stay valid
  std::map<BlasLtMatmulKey, cublasLtMatmulAlgo_t> tuned_;  // under plans_mu_
  std::atomic<int64_t> tune_step_{0}, tune_max_rows_{0};
  std::atomic<int64_t> gemm_max_rows_{0};
};

}  // namespace uniprefill
