// DeviceContext: everything an op needs to run on one device, passed explicitly to every op.
//
// The CPU context carries the thread pool (and sets OpenBLAS's thread count to match) and the CPU
// ISA level its kernels run at (core/cpu_isa.h, resolved once when the context is made); a CUDA
// context also owns a CudaContext (stream, cuBLASLt handle, device properties; see
// core/cuda/cuda_context.h, which only CUDA builds compile). There are no globals: two contexts
// can coexist (tests run ops with 1 and N threads side by side, and a CPU and a GPU context).
#pragma once

#include <memory>
#include <string>

#include "core/cpu_isa.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace uniprefill {

class CudaContext;  // core/cuda/cuda_context.h (CUDA builds only)

class DeviceContext {
 public:
  // A CPU context with n_threads workers (<= 0: every core) whose kernels run at `isa`: kAuto is
  // the best level this CPU has; a forced level must be one ResolveCpuIsa accepts (asserted; a
  // release build falls back to avx2 rather than run instructions the CPU lacks).
  static std::unique_ptr<DeviceContext> Cpu(int n_threads = 0, CpuIsa isa = CpuIsa::kAuto);
  // A context on CUDA device `device_index` (its host pool has n_threads workers for host-side
  // work). Errors: built without CUDA (Unimplemented), no GPU (Unavailable), a bad index.
  static Result<std::unique_ptr<DeviceContext>> Cuda(int device_index = 0, int n_threads = 0);
  // Whether this build has the CUDA backend and a usable GPU; *why says what is missing.
  static bool CudaAvailable(std::string* why = nullptr);

  ~DeviceContext();
  Device device() const { return device_; }
  ThreadPool& pool() { return *pool_; }
  int threads() const { return pool_->size(); }
  // The resolved CPU ISA level (never kAuto) of the CPU kernels run with this context.
  CpuIsa cpu_isa() const { return cpu_isa_; }
  // The CUDA state; only for a context made by Cuda() (asserted).
  CudaContext& cuda() const;
  // Waits for the work queued on the device (a CPU context's work is done when its calls return).
  void Synchronize() const;

 private:
  // Out of line: CudaContext.
  DeviceContext(Device device, std::unique_ptr<ThreadPool> pool, CpuIsa cpu_isa);

  Device device_;
  CpuIsa cpu_isa_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<CudaContext> cuda_;
};

}  // namespace uniprefill
