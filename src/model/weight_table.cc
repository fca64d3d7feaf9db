#include "model/weight_table.h"

#include <algorithm>

#include "io/dequant.h"

namespace uniprefill {

std::string ShapeToString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Result<const gguf::TensorInfo*> LookupWeight(const gguf::GgufFile& file, const WeightSpec& spec) {
  const gguf::TensorInfo* t = file.FindTensor(spec.name);
  if (!t) {
    if (!spec.required) return static_cast<const gguf::TensorInfo*>(nullptr);
    return NotFound("model file " + file.path() + " lacks tensor '" + spec.name + "' (expected " +
                    ShapeToString(spec.shape) + "); is it a complete " +
                    "model of this architecture?");
  }
  std::vector<int64_t> found(t->dims.rbegin(), t->dims.rend());  // GGUF dims are innermost first
  if (found != spec.shape) {
    return InvalidArgument("tensor '" + spec.name + "' has shape " + ShapeToString(found) +
                           ", expected " + ShapeToString(spec.shape) +
                           " from the model's metadata");
  }
  if (!CanDequantize(t->type)) {
    return Unimplemented("tensor '" + spec.name + "' uses quantisation type " +
                         DTypeName(t->type) + ", which this engine does not support yet " +
                         "(supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, " +
                         "Q6_K); re-quantise the model, e.g. to Q4_K_M");
  }
  return t;
}

}  // namespace uniprefill
