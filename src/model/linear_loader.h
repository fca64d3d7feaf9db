// Builds ops::LinearWeight from model-file tensors: the quantised parts read in place, and (when
// asked) one dequantised f32 copy of all parts stacked, for prefill GEMMs.
#pragma once

#include <vector>

#include "core/device_context.h"
#include "core/status.h"
#include "io/gguf.h"
#include "ops/ops.h"

namespace uniprefill {

Result<ops::LinearWeight> LoadLinear(DeviceContext& ctx,
                                     const std::vector<const gguf::TensorInfo*>& parts,
                                     bool make_f32_copy);

// A 1-D f32 vector (norm weights) dequantised into `out`.
Status LoadVector(const gguf::TensorInfo& t, std::vector<float>* out);

}  // namespace uniprefill
