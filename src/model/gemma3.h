// Gemma 3 (sliding-window / full-attention hybrid) from GGUF. This file holds only the
// architecture: its metadata, its weight table and its layer loop; the math is in ops/.
//
// Per layer (model-facts.md section 1): x += post_attn_norm(attn(attn_norm(x)));
// x += post_ffw_norm(mlp(ffn_norm(x))), with q/k RMSNorms before RoPE (local base on sliding
// layers, global on full ones), window W on sliding layers, GELU-tanh gated MLP; embeddings are
// scaled by sqrt(hidden) and the head is tied to them. GGUF norm weights already include the +1.
#pragma once

#include <memory>

#include "core/status.h"
#include "io/gguf.h"
#include "model/model.h"

namespace uniprefill {

Result<ModelConfig> Gemma3ConfigFromGguf(const gguf::GgufFile& file);

Result<std::unique_ptr<Model>> LoadGemma3(std::unique_ptr<gguf::GgufFile> file, DeviceContext& ctx,
                                          const LoadOptions& options);

}  // namespace uniprefill
