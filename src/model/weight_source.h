// WeightSource: named model tensors from a GGUF file or a Hugging Face safetensors checkpoint, with
// shapes checked against what the architecture expects before any layer code runs. Architectures
// ask for tensors by the source's own names (GGUF "blk.3.attn_q.weight", HF
// "model.layers.3.self_attn.q_proj.weight"); shapes are engine order, outermost first ([out, in]).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"
#include "io/gguf.h"
#include "ops/ops.h"

namespace uniprefill {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual std::string path() const = 0;
  virtual bool Has(const std::string& name) const = 0;
  // The tensor, checked to have `shape` and a dtype the engine can read.
  virtual Result<TensorView> Get(const std::string& name,
                                 const std::vector<int64_t>& shape) const = 0;
  // A source whose weights are seeds (random-weight presets, model/model_presets.h) describes a
  // linear weight of these [out_i, in] tensors without values (ops::LinearWeight::random_parts);
  // file-backed sources return nullopt and LoadLinear reads the tensors.
  virtual std::optional<ops::LinearWeight> DescribeLinear(
      const std::vector<std::string>& names,
      const std::vector<std::vector<int64_t>>& shapes) const {
    (void)names, (void)shapes;
    return std::nullopt;
  }
};

std::unique_ptr<WeightSource> GgufWeightSource(const gguf::GgufFile& file);

// A linear layer from one or more [out_i, in] tensors stacked along out (e.g. gate and up). With
// make_f32_copy, a dequantised f32 copy is kept for many-row GEMMs (prefill), unless
// unless_int16_gemm and every part has an int16 kernel at ctx's ISA level (then Linear multiplies
// on the stored weights at every row count). A source of seeds gives its description instead
// (WeightSource::DescribeLinear).
Result<ops::LinearWeight> LoadLinear(DeviceContext& ctx, const WeightSource& src,
                                     const std::vector<std::string>& names,
                                     const std::vector<std::vector<int64_t>>& shapes,
                                     bool make_f32_copy, bool unless_int16_gemm = false);
// A 1-D tensor of n elements as f32, plus `offset` (1.0 for zero-centred (1 + w) norms).
Result<std::vector<float>> LoadVector(const WeightSource& src, const std::string& name, int64_t n,
                                      float offset = 0.0f);

std::string ShapeToString(const std::vector<int64_t>& shape);

}  // namespace uniprefill
