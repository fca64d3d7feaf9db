// MakeCudaModel in builds without the CUDA backend (the real one is model/cuda/cuda_model.cc).
#ifndef UNIPREFILL_WITH_CUDA

#include "model/cuda/cuda_model.h"

namespace uniprefill {

Result<std::unique_ptr<Model>> MakeCudaModel(std::unique_ptr<Model>, DeviceContext&,
                                             const LoadOptions&) {
  return Unimplemented(
      "this uniprefill was built without the CUDA backend; rebuild with "
      "`bash scripts/build.sh -DUNIPREFILL_CUDA=ON` on a machine with nvcc, or use --device cpu");
}

}  // namespace uniprefill

#endif
