// Weight tables: each architecture declares its tensors (name, shape, required) in one table; the
// loader checks the file against it before any layer code runs, with errors that name the tensor
// and the expected and found shapes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/gguf.h"

namespace uniprefill {

struct WeightSpec {
  std::string name;             // GGUF tensor name, e.g. "blk.3.attn_q.weight"
  std::vector<int64_t> shape;   // engine order, outermost first: [out, in] for a linear weight
  bool required = true;
};

// The tensor named by spec, with its shape checked, or nullptr for a missing optional one.
Result<const gguf::TensorInfo*> LookupWeight(const gguf::GgufFile& file, const WeightSpec& spec);

std::string ShapeToString(const std::vector<int64_t>& shape);

}  // namespace uniprefill
