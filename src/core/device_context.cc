#include "core/device_context.h"

#include <cblas.h>

#include <cassert>
#include <cstdlib>

#ifdef UNIPREFILL_WITH_CUDA
#include "core/cuda/cuda_context.h"
#endif

namespace uniprefill {
namespace {

// OpenBLAS's own thread count for a context whose pool has `pool_threads`: 1, since
// ops::cpu::PoolSgemm splits every GEMM over our pool (cpu_sgemm.h says why);
// UNIPREFILL_OPENBLAS_OWN_THREADS=1 lets OpenBLAS thread each call itself again (the earlier
// behaviour, kept for same-binary comparisons).
int OpenBlasThreads(int pool_threads) {
  const char* own = std::getenv("UNIPREFILL_OPENBLAS_OWN_THREADS");
  return own != nullptr && own[0] == '1' ? pool_threads : 1;
}

}  // namespace

#ifndef UNIPREFILL_WITH_CUDA
// Without CUDA there is no CudaContext to hold; an empty type keeps unique_ptr<CudaContext>
// complete (it is always null in this build).
class CudaContext {};
#endif

DeviceContext::DeviceContext(Device device, std::unique_ptr<ThreadPool> pool, CpuIsa cpu_isa)
    : device_(device), cpu_isa_(cpu_isa), pool_(std::move(pool)) {}

std::unique_ptr<DeviceContext> DeviceContext::Cpu(int n_threads, CpuIsa isa) {
  const Result<CpuIsa> resolved = ResolveCpuIsa(isa, DetectCpuFeatures());
  assert(resolved.ok() && "DeviceContext::Cpu: a CPU ISA level this CPU lacks");
  auto pool = std::make_unique<ThreadPool>(n_threads);
  openblas_set_num_threads(OpenBlasThreads(pool->size()));
  return std::unique_ptr<DeviceContext>(new DeviceContext(
      Device::kCpu, std::move(pool), resolved.ok() ? *resolved : CpuIsa::kAvx2));
}

#ifdef UNIPREFILL_WITH_CUDA

Result<std::unique_ptr<DeviceContext>> DeviceContext::Cuda(int device_index, int n_threads) {
  UP_ASSIGN_OR_RETURN(std::unique_ptr<CudaContext> cuda, CudaContext::Create(device_index));
  auto pool = std::make_unique<ThreadPool>(n_threads);
  openblas_set_num_threads(OpenBlasThreads(pool->size()));
  // Host-side CPU work of a GPU context runs at the best level this CPU has.
  auto ctx = std::unique_ptr<DeviceContext>(new DeviceContext(
      Device::kCuda, std::move(pool), BestCpuIsa(DetectCpuFeatures())));
  ctx->cuda_ = std::move(cuda);
  return ctx;
}

bool DeviceContext::CudaAvailable(std::string* why) {
  Result<std::unique_ptr<CudaContext>> probe = CudaContext::Create(0);
  if (!probe.ok() && why) *why = probe.status().message();
  return probe.ok();
}

DeviceContext::~DeviceContext() = default;

CudaContext& DeviceContext::cuda() const {
  assert(cuda_ && "DeviceContext::cuda() on a CPU context");
  return *cuda_;
}

void DeviceContext::Synchronize() const {
  if (cuda_) cuda_->Synchronize();
}

#else  // built without CUDA

Result<std::unique_ptr<DeviceContext>> DeviceContext::Cuda(int, int) {
  return Unimplemented(
      "this uniprefill was built without the CUDA backend; rebuild with "
      "`bash scripts/build.sh -DUNIPREFILL_CUDA=ON` on a machine with nvcc, or use --device cpu");
}

bool DeviceContext::CudaAvailable(std::string* why) {
  if (why) *why = "built without CUDA (configure with -DUNIPREFILL_CUDA=ON)";
  return false;
}

DeviceContext::~DeviceContext() = default;

CudaContext& DeviceContext::cuda() const {
  assert(false && "DeviceContext::cuda() in a build without CUDA");
  return *cuda_;
}

void DeviceContext::Synchronize() const {}

#endif

}  // namespace uniprefill
