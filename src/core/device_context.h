// DeviceContext: everything an op needs to run on one device, passed explicitly to every op.
//
// The CPU context carries the thread pool (and sets OpenBLAS's thread count to match); a CUDA
// context (a later issue) will carry its stream and cuBLAS handles here too. There are no globals:
// two contexts can coexist (tests run ops with 1 and N threads side by side).
#pragma once

#include <memory>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace uniprefill {

class DeviceContext {
 public:
  // A CPU context with n_threads workers (<= 0: every core).
  static std::unique_ptr<DeviceContext> Cpu(int n_threads = 0);

  Device device() const { return device_; }
  ThreadPool& pool() { return *pool_; }
  int threads() const { return pool_->size(); }

 private:
  DeviceContext(Device device, std::unique_ptr<ThreadPool> pool)
      : device_(device), pool_(std::move(pool)) {}

  Device device_;
  std::unique_ptr<ThreadPool> pool_;
};

}  // namespace uniprefill
