// Gemma 3 (sliding-window / full-attention hybrid) from GGUF or from a Hugging Face checkpoint.
// This file holds only the architecture: its metadata, its tensor names and its layer; the math is
// in ops/ and the shared blocks in model/blocks/.
//
// Per layer (model-facts.md section 1): x += post_attn_norm(attn(attn_norm(x)));
// x += post_ffw_norm(mlp(ffn_norm(x))), with q/k RMSNorms before RoPE (local base on sliding
// layers, global on full ones), window W on sliding layers, GELU-tanh gated MLP; embeddings are
// scaled by sqrt(hidden) and the head is tied to them. GGUF norm weights already include the +1;
// HF checkpoints store w and the (1 + w) is applied at load.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "io/gguf.h"
#include "io/hf_config.h"
#include "model/model.h"
#include "model/model_definition.h"
#include "model/weight_source.h"

namespace uniprefill {

// Tensor names of one source; "{}" stands for the layer number.
struct Gemma3TensorNames {
  std::string embedding, output_norm, output;
  std::string attn_norm, post_attn_norm, ffn_norm, post_ffn_norm, q_norm, k_norm;
  std::string q, k, v, o, gate, up, down;
  std::string Layer(const std::string& pattern, int i) const;
  static Gemma3TensorNames Gguf();
  static Gemma3TensorNames HuggingFace();
};

Result<ModelConfig> Gemma3ConfigFromGguf(const gguf::GgufFile& file);
// From config.json (the text part for multimodal checkpoints).
Result<ModelConfig> Gemma3ConfigFromHf(const HfConfig& config);

Result<ModelDefinition> LoadGemma3(std::unique_ptr<gguf::GgufFile> file, DeviceContext& ctx,
                                          const LoadOptions& options);
// From a Hugging Face checkpoint's config and tensors; `owner` keeps the mapped files alive.
Result<ModelDefinition> LoadGemma3(const ModelConfig& config, std::shared_ptr<void> owner,
                                          const WeightSource& src, DeviceContext& ctx,
                                          const LoadOptions& options);

}  // namespace uniprefill
