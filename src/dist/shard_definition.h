// One tensor-parallel rank's model definition (issue 21): the full definition (weights still in
// the mapped file) cut to the rank's shard plan (dist/shard_plan.h). Attention: q rows of its query
// heads (a head's rows stay together, also Qwen3-Next's [query | gate] pairs), k and v rows of its
// KV heads, o columns of its query heads; dense FFN: gate and up rows of its columns, down
// columns. The config then says the local head and FFN counts, so caches and kernels size
// themselves per rank. The layer walk all-reduces the attention and FFN outputs (row-parallel
// partial sums) and the drop layers' block scores (model/transformer_model.cc).
// Embedding and head: split by vocabulary rows when the vocabulary divides by the ranks (the walk
// all-reduces the embedded rows and all-gathers the logits), else replicated. Norms: replicated.
// Not yet: Gated DeltaNet and MoE layers (Unimplemented), random-weight presets.
#pragma once

#include "core/status.h"
#include "dist/shard_plan.h"
#include "model/model_definition.h"

namespace uniprefill::dist {

// `make_f32_copies`: dequantise the rank's linear weights to f32 for many-row GEMMs, as
// LoadOptions::f32_prefill_weights does for a whole model (load the full definition without them).
// `split_vocabulary` false keeps the embedding and head whole on every rank (the CUDA backend:
// every rank computes all logits, no gather).
Result<ModelDefinition> ShardDefinition(ModelDefinition full, const ShardPlan& plan,
                                        bool make_f32_copies, bool split_vocabulary = true);

}  // namespace uniprefill::dist
