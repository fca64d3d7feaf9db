// Qwen3-Next (linear / full-attention hybrid with MoE) from a Hugging Face checkpoint.
//
// Layer i is gated full attention when (i + 1) % full_attention_interval == 0, else a Gated DeltaNet
// layer (model-facts.md section 3). Block: x += mixer(input_layernorm(x));
// x += moe(post_attention_layernorm(x)). Norms are zero-centred ((1 + w), applied at load) except
// the DeltaNet's gated output norm (plain w). Full attention: q_proj gives [query | gate] per head,
// zero-centred q/k norms, partial RoPE (rotate-half on the first head_dim * partial_rotary_factor
// dims), output times sigmoid(gate). No embedding scale; untied head.
//
// UniPrefill: drop layers are full-attention layers; after a drop, the DeltaNet's conv and recurrence
// run over the kept tokens in order (their state then continues from those tokens at decode).
#pragma once

#include <memory>

#include "core/status.h"
#include "io/hf_config.h"
#include "model/model.h"
#include "model/model_definition.h"
#include "model/weight_source.h"

namespace uniprefill {

Result<ModelDefinition> LoadQwen3Next(const HfConfig& config, std::shared_ptr<void> owner,
                                             const WeightSource& src, DeviceContext& ctx,
                                             const LoadOptions& options);

}  // namespace uniprefill
