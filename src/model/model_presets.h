// Random-weight models of named preset shapes (vLLM's dummy weights): what `bench gpu-prefill`
// measures and what the CUDA-vs-CPU tests run at the 8B-80B shapes, with no model files.
//
// A preset is loaded by its family's own Hugging Face loader (llama.cc, gemma3.cc, qwen3_next.cc)
// from the preset's config.json (written from the table in model_presets.cc) and a weight source of
// seeds instead of safetensors: the same ModelConfig (so DefaultUniPrefillConfig gives the model's
// own drop layers), the same layer recipe and block fields as a checkpoint of that shape. Only the
// values are random, so the one layer walk runs it as it runs a loaded model. Not for: accuracy
// (random weights say nothing about what UniPrefill keeps in a trained model).
//
// Values. Every 2-D tensor (embedding, attention and DeltaNet projections, FFN, router, experts)
// is a seeded stream of bf16 uniform in +-0.02 sqrt(3) (std 0.02, as the PyTorch anchor's randn *
// 0.02; core/random_bf16.h), its seed a hash of the model seed and the tensor's name, so a model of
// fewer layers or experts has the same values in the tensors it keeps. Small tensors are made on
// the host the same way: norm weights 1 +- 0.1 as multiplied, conv taps, A_log and dt_bias +- 0.5;
// activations stay finite over 48 layers. Materialised weights hold exactly the values the CUDA
// model makes on the device (ops::cuda::FillRandomBf16), so a CPU and a CUDA model of one preset
// and seed are one model. Embeddings are tied (one tensor).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model_definition.h"
#include "model/segment_cost.h"

namespace uniprefill {

struct RandomModelOptions {
  uint64_t seed = 1;  // every value follows from it
  int n_layers = 0;   // 0: the preset's depth (tests run fewer layers)
  int n_experts = 0;  // 0: the preset's experts (MoE presets only; top-k capped at it)
  int sliding_window = 0;  // 0: the preset's window (presets with sliding layers only)
  // false: 2-D weights are described by their seeds (ops::LinearWeight::random_parts) and the
  // CUDA model fills them on the device; true: made on the host as bf16 tensors, which the CPU
  // model needs.
  bool materialize = false;
  bool f32_prefill_weights = true;  // with materialize: f32 copies, as LoadOptions' field
  bool f32_decode = false;          // as LoadOptions::f32_decode
};

// "llama-3.1-8b", "gemma-3-12b", "qwen3-next-80b-a3b", "tiny", "tiny-gemma3", "tiny-hybrid".
const std::vector<std::string>& RandomModelPresets();

// How the preset departs from the real model (recorded in the bench JSON); "" if unknown.
std::string RandomModelPresetNote(const std::string& preset);

// The preset's definition; an unknown name is an error that lists the presets.
Result<ModelDefinition> RandomModelDefinition(const std::string& preset,
                                              const RandomModelOptions& options);

// The GPU benchmark's counting convention (as shared/bench/pytorch_anchor.py), for any definition.
// Parameters: every linear weight (the embedding once when tied) and the DeltaNet conv taps; norms
// and DeltaNet constants are not counted.
int64_t ParameterCount(const ModelDefinition& def);
// FLOPs of the linear layers for one request of n tokens: 2 per weight and token (MoE: the router,
// top-k experts, the shared expert and its gate), plus for Gated DeltaNet the conv and 6 d_k d_v
// per value head for the delta rule.
double LinearPrefillFlops(const ModelDefinition& def, int64_t n_tokens);
// The dense prefill: the linear part plus causal attention, 4 * heads * head_dim per visible
// (query, key) pair, sliding windows counted. Embedding, norms and the logits are not counted.
double DensePrefillFlops(const ModelDefinition& def, int64_t n_tokens);
// What the walk runs of that (QueryRows::kLastOfEach): where the last layer is an attention layer,
// its n - 1 rows before the last compute their key and value projections only, and its attention
// is the last row's over its keys (all n, or its window). last_layer_every_row: the walk before
// the 36th session, DensePrefillFlops itself.
double ExecutedDensePrefillFlops(const ModelDefinition& def, int64_t n_tokens,
                                 bool last_layer_every_row);
// Attention FLOPs per cached key of the full-attention layers (4 H D each) over the linear FLOPs
// per token (LinearPrefillFlops): what a key costs in rows of a step's budget.
double AttentionKeyCost(const ModelDefinition& def);
// The same split by segment for drop layers `drop_layers` (ascending): segment s holds the layers
// from drop layer d_s's FFN to d_{s+1}'s attention (segment 0 from layer 0), so its linear share
// and key cost count those mixers and FFNs (model/segment_cost.h; the key costs sum to
// AttentionKeyCost, the shares to 1). One entry per segment (drop_layers.size() + 1).
std::vector<SegmentCost> SegmentCosts(const ModelDefinition& def,
                                      const std::vector<int>& drop_layers);
// SegmentCosts of a walk whose last layer runs each request's last row only (QueryRows::
// kLastOfEach): a row that is not its request's last pays there only its key and value
// projections, so the last layer's other linear FLOPs and its attention keys leave the prices
// (a chunk's last row pays them; one row, left out). Nothing changes when the last layer is no
// attention layer. (full_attention_layers, which counts the decodes' and the prefix copies'
// layers, is left as it is.)
void PriceLastLayerRowsOnly(const ModelDefinition& def, const std::vector<int>& drop_layers,
                            std::vector<SegmentCost>* costs);

}  // namespace uniprefill
