// ModelExport: a family-neutral description of a loaded host model, its weights and its layer
// recipe, for backends that run the model elsewhere (the CUDA model uploads it as bf16 and runs the
// same math). Every family maps onto one recipe per layer:
//   x += post_mixer_norm?(mixer(mixer_norm(x)));  x += post_ffn_norm?(ffn(ffn_norm(x)))
// where the mixer is attention (full, sliding, gated) or a Gated DeltaNet, the FFN a gated MLP or
// a MoE, and the post norms exist only in Gemma 3's sandwich layers. Norm weights are as
// multiplied (the (1 + w) of zero-centred norms already applied).
//
// Pointers point into the exporting model and stay valid while it lives.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "model/blocks/attention_block.h"
#include "model/blocks/feed_forward.h"
#include "model/blocks/gated_deltanet.h"
#include "model/blocks/moe.h"
#include "model/model_config.h"
#include "ops/ops.h"

namespace uniprefill {

struct ExportedLayer {
  const std::vector<float>* mixer_norm = nullptr;       // f32 [hidden]
  const std::vector<float>* post_mixer_norm = nullptr;  // f32 [hidden], or null
  const std::vector<float>* ffn_norm = nullptr;         // f32 [hidden]
  const std::vector<float>* post_ffn_norm = nullptr;    // f32 [hidden], or null
  const AttentionWeights* attention = nullptr;          // exactly one of attention / delta
  const GatedDeltaNetWeights* delta = nullptr;
  const GatedFfnWeights* ffn = nullptr;  // exactly one of ffn / moe
  const MoeWeights* moe = nullptr;
};

struct ModelExport {
  TensorView token_embedding;  // [vocab, hidden], as stored (any dequantisable dtype)
  float embedding_scale = 1.0f;
  const std::vector<float>* output_norm = nullptr;  // f32 [hidden]
  const ops::LinearWeight* head = nullptr;          // [vocab, hidden]
  std::vector<ExportedLayer> layers;
};

}  // namespace uniprefill
