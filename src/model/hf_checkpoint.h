// Hugging Face checkpoints (a directory with config.json and safetensors) as model definitions:
// the tensor source over safetensors, the config keys every family shares, and the dispatch on
// config.json's model_type.
#pragma once

#include <memory>
#include <string>

#include "core/device_context.h"
#include "core/status.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "model/model_definition.h"
#include "model/weight_source.h"

namespace uniprefill {

std::unique_ptr<WeightSource> SafetensorsWeightSource(const safetensors::Checkpoint& checkpoint);

// The config.json keys every family shares, with that family's defaults for the optional ones.
struct HfCommonDefaults {
  int64_t head_dim = 0;   // 0: hidden_size / num_attention_heads
  int64_t vocab = 0;      // 0: vocab_size is required
  int64_t context = 8192;  // max_position_embeddings
  double rms_eps = 1e-6;
  double rope_theta = 10000.0;
  bool ffn = true;  // read intermediate_size into ffn_hidden
};
// architecture, name, layers, hidden, (ffn), heads, kv heads (default: heads), head dim, vocab,
// context, RMS eps, RoPE theta and the 1 / sqrt(head_dim) attention scale.
Result<ModelConfig> ReadHfCommonConfig(const HfConfig& hf, const std::string& architecture,
                                       const HfCommonDefaults& defaults);

// The model definition of a checkpoint directory. Supported model_type values: llama,
// gemma3_text / gemma3 (text part), qwen3_next.
Result<ModelDefinition> LoadHfDefinition(const std::string& dir, DeviceContext& ctx,
                                         const LoadOptions& options);

}  // namespace uniprefill
