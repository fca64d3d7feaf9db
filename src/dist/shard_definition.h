// One tensor-parallel rank's model definition (issue 21): the full definition (weights still in
// the mapped file) cut to the rank's shard plan (dist/shard_plan.h), layer block by layer block
// (dist/shard_layers.h): attention by query heads (a head's rows stay together, also Qwen3-Next's
// [query | gate] pairs) with their KV heads, o columns; dense FFN by columns; Gated DeltaNet by key
// heads with their value heads; MoE by whole routed experts (expert parallel; the router stays
// whole) with the shared expert by columns. The config then says the local head, DeltaNet head and
// FFN / shared-expert counts, so caches (the DeltaNet's recurrent state too) and kernels size
// themselves per rank. The layer walk all-reduces every mixer and FFN / MoE output (row-parallel
// partial sums) and the drop layers' block scores (model/transformer_model.cc).
// Embedding and head: split by vocabulary rows when the vocabulary divides by the ranks (the walk
// all-reduces the embedded rows and all-gathers the logits), else replicated. Norms: replicated.
// Not yet: random-weight presets (their weights are seeds, not stored rows).
#pragma once

#include <optional>

#include "core/device_context.h"
#include "core/status.h"
#include "dist/shard_plan.h"
#include "model/model_definition.h"

namespace uniprefill::dist {

// Which of a rank's linear weights get f32 prefill copies, as LoadLinear decides for a whole model
// (LoadOptions::f32_prefill_weights and int16_prefill_gemm; load the full definition without
// copies).
struct ShardCopies {
  bool f32_prefill = false;
  // Set: no copy for a weight whose parts all have multi-row int16 kernels at this ISA level (its
  // prefill GEMMs run on the stored blocks, ops/cpu/cpu_linear_int16_rows.h).
  std::optional<CpuIsa> unless_int16_gemm;
  // Set: no copy for a weight that Linear can dequantise per GEMM at this ISA level
  // (LinearWeight::f32_on_call, ops::cpu::CanDequantiseForGemm), as LoadLinear does.
  std::optional<CpuIsa> dequantise_on_call;
};

// `split_vocabulary` false keeps the embedding and head whole on every rank (the CUDA backend:
// every rank computes all logits, no gather).
Result<ModelDefinition> ShardDefinition(ModelDefinition full, const ShardPlan& plan,
                                        const ShardCopies& copies, bool split_vocabulary = true);

}  // namespace uniprefill::dist
