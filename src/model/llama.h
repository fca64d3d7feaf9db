// Llama 3.x (full attention, GQA, llama3 RoPE scaling, SwiGLU) from GGUF or from a Hugging Face
// checkpoint, as a model definition (model_definition.h). Per layer: x += attn(attn_norm(x));
// x += mlp(ffn_norm(x)); untied head (tied when the file has no output tensor).
//
// RoPE pairing differs by source: HF checkpoints rotate halves (i, i + d/2); llama.cpp's converter
// permutes the q/k weight rows so that GGUF files rotate adjacent pairs (2i, 2i + 1). Each source is
// run with its own pairing on its own weights, which gives the same attention scores.
#pragma once

#include <memory>

#include "core/status.h"
#include "io/gguf.h"
#include "io/hf_config.h"
#include "model/model.h"
#include "model/model_definition.h"
#include "model/weight_source.h"

namespace uniprefill {

Result<ModelDefinition> LoadLlama(std::unique_ptr<gguf::GgufFile> file, DeviceContext& ctx,
                                         const LoadOptions& options);
Result<ModelDefinition> LoadLlama(const HfConfig& config, std::shared_ptr<void> owner,
                                         const WeightSource& src, DeviceContext& ctx,
                                         const LoadOptions& options);

// inv_freq with the "llama3" rule (model-facts.md section 4) applied.
std::vector<float> Llama3RopeInvFreq(double theta, int dims, double factor, double low_freq_factor,
                                     double high_freq_factor, double original_max_positions);

}  // namespace uniprefill
