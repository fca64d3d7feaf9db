#include "core/device_context.h"

#include <cblas.h>

namespace uniprefill {

std::unique_ptr<DeviceContext> DeviceContext::Cpu(int n_threads) {
  auto pool = std::make_unique<ThreadPool>(n_threads);
  // OpenBLAS keeps its own threads; match their number to ours so GEMMs use every core too.
  openblas_set_num_threads(pool->size());
  return std::unique_ptr<DeviceContext>(new DeviceContext(Device::kCpu, std::move(pool)));
}

}  // namespace uniprefill
