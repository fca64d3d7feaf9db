// ModelDefinition: what a loaded model is, wherever it runs: its configuration, its weight table
// and its layer recipe. Families (gemma3.cc, llama.cc, qwen3_next.cc, model_presets.cc) only fill
// one in: config keys, weight names, norm and RoPE variants. The one layer walk
// (transformer_model.h) runs the recipe on a backend (backend/cpu, backend/cuda). Every family
// maps onto one recipe per layer:
//   x += post_mixer_norm?(mixer(mixer_norm(x)));  x += post_ffn_norm?(ffn(ffn_norm(x)))
// where the mixer is attention (full, sliding, gated) or a Gated DeltaNet, the FFN a gated MLP or a
// MoE, and the post norms exist only in Gemma 3's sandwich layers. Norm weights are as multiplied
// (the (1 + w) of zero-centred norms already applied).
//
// Linear weights point into the mapped model file (`owners` keeps it alive) or, for random-weight
// presets, are described by seeds (ops::LinearWeight::random_parts) that the CUDA backend fills on
// the device (CPU models of presets get the values materialised on the host instead).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/status.h"
#include "model/blocks/attention_block.h"
#include "model/blocks/feed_forward.h"
#include "model/blocks/gated_deltanet.h"
#include "model/blocks/moe.h"
#include "model/model_config.h"
#include "ops/ops.h"

namespace uniprefill {

struct LayerDefinition {
  std::vector<float> mixer_norm;       // f32 [hidden]
  std::vector<float> post_mixer_norm;  // f32 [hidden], or empty
  std::vector<float> ffn_norm;         // f32 [hidden]
  std::vector<float> post_ffn_norm;    // f32 [hidden], or empty
  std::optional<AttentionWeights> attention;  // exactly one of attention / delta
  std::optional<GatedDeltaNetWeights> delta;
  std::optional<GatedFfnWeights> ffn;  // exactly one of ffn / moe
  std::optional<MoeWeights> moe;

  // Every linear weight of the layer (mixer, FFN or MoE: router, shared expert, routed experts).
  std::vector<ops::LinearWeight*> LinearWeights();
  std::vector<const ops::LinearWeight*> LinearWeights() const;
};

struct ModelDefinition {
  ModelConfig config;
  ops::LinearWeight token_embedding;  // [vocab, hidden], one part as stored (or random)
  std::vector<float> output_norm;     // f32 [hidden]
  ops::LinearWeight head;             // [vocab, hidden]; the embedding when config.tied_embeddings
  std::vector<LayerDefinition> layers;
  // Tensor parallel with the vocabulary split (dist/shard_definition.h): token_embedding and head
  // hold rows [vocab_begin, vocab_end) of the vocabulary; both 0: every row.
  int64_t vocab_begin = 0, vocab_end = 0;
  bool vocab_sharded() const { return vocab_end > vocab_begin; }
  std::vector<std::shared_ptr<void>> owners;  // mapped files / host buffers the weights point into
  // The memory-mapped model files among the owners (read-only, file-backed): DropMappedPages.
  std::vector<std::span<const uint8_t>> mapped_files;
  // dequantised f32 copies (LoadOptions::f32_prefill_weights) and the CPU's Q8_0 block sums
  size_t host_copy_bytes = 0;

  // Every weight of every layer: shapes, one mixer and one FFN per layer, lengths of the norms.
  Status Check() const;
  // Bytes of linear weights this model (a tensor-parallel rank: its shard) reads on the host: the
  // stored blocks its weights point at (pages of the mapped file, or copies), each once, plus the
  // f32 copies. Random-weight presets' seeds count nothing.
  size_t HostWeightBytes() const;
};

// Gives the resident pages of every mapped model file back to the kernel (madvise
// MADV_DONTNEED; the mappings are read-only, so nothing is lost): a page still in use is read again
// from the page cache on its next touch. For a model that no longer reads most of its file once
// loaded: a tensor-parallel rank (it copied the row-parallel slices out, and other ranks' rows were
// touched on the way) and a GPU model (its weights were uploaded). Otherwise every page the loader
// touched stays in the process's resident set for the model's life.
void DropMappedPages(const ModelDefinition& d);
// The same for the pages of [data, data + bytes) when they lie inside one of d's mapped files
// (nothing otherwise: other memory would lose its contents). Pages are rounded outward.
void DropMappedRange(const ModelDefinition& d, const void* data, size_t bytes);

}  // namespace uniprefill
