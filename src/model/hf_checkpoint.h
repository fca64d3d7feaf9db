// Hugging Face checkpoints (a directory with config.json and safetensors) as model definitions: the tensor
// source over safetensors and the dispatch on config.json's model_type.
#pragma once

#include <memory>
#include <string>

#include "core/device_context.h"
#include "core/status.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "model/model_definition.h"
#include "model/weight_source.h"

namespace uniprefill {

std::unique_ptr<WeightSource> SafetensorsWeightSource(const safetensors::Checkpoint& checkpoint);

// The model definition of a checkpoint directory. Supported model_type values: llama,
// gemma3_text / gemma3 (text part), qwen3_next.
Result<ModelDefinition> LoadHfDefinition(const std::string& dir, DeviceContext& ctx,
                                         const LoadOptions& options);

}  // namespace uniprefill
