// MakeCudaBackend in builds without the CUDA backend (the real one: backend/cuda/cuda_backend.cc).
#ifndef UNIPREFILL_WITH_CUDA

#include "backend/cuda/cuda_backend.h"

namespace uniprefill {

Result<std::unique_ptr<LayerBackend>> MakeCudaBackend(const ModelDefinition&, DeviceContext&,
                                                      const LoadOptions&) {
  return Unimplemented(
      "this uniprefill was built without the CUDA backend; rebuild with "
      "`bash scripts/build.sh -DUNIPREFILL_CUDA=ON` on a machine with nvcc, or use --device cpu");
}

}  // namespace uniprefill

#endif
