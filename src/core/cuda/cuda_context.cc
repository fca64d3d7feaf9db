#include "core/cuda/cuda_context.h"

#include <cstdio>
#include <utility>
#include <vector>

#include "core/cuda/cublas_library.h"
#include "core/cuda/cuda_check.h"

namespace uniprefill {

namespace {
// cuBLASLt picks faster algorithms with a workspace; 32 MiB covers its Hopper kernels.
constexpr size_t kBlasWorkspaceBytes = size_t{32} << 20;
}  // namespace

Result<std::unique_ptr<CudaContext>> CudaContext::Create(int device_index) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return Unavailable(std::string("no CUDA device: ") +
                       (err != cudaSuccess ? cudaGetErrorString(err) : "none found") +
                       "; run on a machine with an NVIDIA GPU and its driver");
  }
  if (device_index < 0 || device_index >= count) {
    return InvalidArgument("CUDA device " + std::to_string(device_index) + " does not exist (" +
                           std::to_string(count) + " found)");
  }
  auto ctx = std::unique_ptr<CudaContext>(new CudaContext());
  ctx->device_index_ = device_index;
  UP_CUDA_CHECK(cudaSetDevice(device_index));
  UP_CUDA_CHECK(cudaGetDeviceProperties(&ctx->props_, device_index));
  if (ctx->props_.major < 8) {
    return Unimplemented("GPU " + std::string(ctx->props_.name) + " is sm_" +
                         std::to_string(ctx->props_.major * 10 + ctx->props_.minor) +
                         "; the CUDA backend needs bf16 tensor cores (sm_80 or newer, built for "
                         "sm_90)");
  }
  // A blocking stream: it orders with the legacy default stream, which DeviceBuffer's synchronous
  // copies and fills use, so a host copy after an op sees its result without an explicit sync.
  UP_CUDA_CHECK(cudaStreamCreate(&ctx->stream_));
  UP_RETURN_IF_ERROR(cuda::LoadCublasLibraries());
  UP_CUBLAS_CHECK(cublasLtCreate(&ctx->blas_lt_));
  UP_CUBLAS_CHECK(cublasCreate(&ctx->blas_));
  UP_CUBLAS_CHECK(cublasSetStream(ctx->blas_, ctx->stream_));
  UP_ASSIGN_OR_RETURN(ctx->workspace_, DeviceBuffer::Allocate(kBlasWorkspaceBytes));
  return ctx;
}

void DestroyBlasLtMatmulPlan(const BlasLtMatmulPlan& plan) {
  if (plan.c) UP_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(plan.c));
  if (plan.b) UP_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(plan.b));
  if (plan.a) UP_CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(plan.a));
  if (plan.op) UP_CUBLAS_CHECK(cublasLtMatmulDescDestroy(plan.op));
}

CudaContext::~CudaContext() {
  if (stream_) cudaStreamSynchronize(stream_);
  for (const auto& [key, plan] : plans_) DestroyBlasLtMatmulPlan(plan);
  if (blas_) cublasDestroy(blas_);
  if (blas_lt_) cublasLtDestroy(blas_lt_);
  if (stream_) cudaStreamDestroy(stream_);
}

std::string CudaContext::Describe() const {
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%s (sm_%d%d, %d SMs, %.1f GiB)", props_.name, props_.major,
                props_.minor, props_.multiProcessorCount,
                static_cast<double>(props_.totalGlobalMem) / (1u << 30));
  return buf;
}

std::string CudaContext::PciBusId() const {
  char buf[64] = {};
  if (cudaDeviceGetPCIBusId(buf, sizeof(buf), device_index_) != cudaSuccess) return "";
  return buf;
}

void CudaContext::Synchronize() const { UP_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

const BlasLtMatmulPlan* CudaContext::FindMatmulPlan(const BlasLtMatmulKey& key) const {
  std::lock_guard<std::mutex> lock(plans_mu_);
  auto it = plans_.find(key);
  return it == plans_.end() ? nullptr : &it->second;
}

const BlasLtMatmulPlan* CudaContext::CacheMatmulPlan(const BlasLtMatmulKey& key,
                                                     const BlasLtMatmulPlan& plan) {
  std::lock_guard<std::mutex> lock(plans_mu_);
  auto it = plans_.find(key);
  if (it != plans_.end()) {
    DestroyBlasLtMatmulPlan(plan);
    return &it->second;
  }
  if (plans_.size() >= kMaxMatmulPlans) return nullptr;
  return &plans_.emplace(key, plan).first->second;
}

void CudaContext::ForEachMatmulPlan(
    const std::function<void(const BlasLtMatmulKey&, BlasLtMatmulPlan&)>& fn) {
  // fn runs outside the lock (it may look up tuned algorithms, which takes it); plans are never
  // erased, so the pointers stay valid.
  std::vector<std::pair<const BlasLtMatmulKey*, BlasLtMatmulPlan*>> all;
  {
    std::lock_guard<std::mutex> lock(plans_mu_);
    for (auto& [key, plan] : plans_) all.emplace_back(&key, &plan);
  }
  for (auto& [key, plan] : all) fn(*key, *plan);
}

void CudaContext::KeepTunedMatmulAlgo(const BlasLtMatmulKey& bucket_key,
                                      const cublasLtMatmulAlgo_t& algo) {
  std::lock_guard<std::mutex> lock(plans_mu_);
  tuned_[bucket_key] = algo;
}

bool CudaContext::FindTunedMatmulAlgo(const BlasLtMatmulKey& bucket_key,
                                      cublasLtMatmulAlgo_t* algo) const {
  std::lock_guard<std::mutex> lock(plans_mu_);
  auto it = tuned_.find(bucket_key);
  if (it == tuned_.end()) return false;
  *algo = it->second;
  return true;
}

void CudaContext::SetMatmulTuneRows(int64_t step, int64_t max_rows) {
  tune_step_.store(step);
  tune_max_rows_.store(max_rows);
}

}  // namespace uniprefill
