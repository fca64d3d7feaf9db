// Which slice of a model each tensor-parallel rank holds (Megatron-style, docs/scaling.md): query
// heads and FFN columns split evenly, KV heads split with their query heads' GQA groups or, when
// there are fewer KV heads than ranks, the one KV head a rank's query heads use replicated
// (Gemma 3 270M: one KV head), Gated DeltaNet by key heads with their value heads. Each rank's
// query heads use exactly the KV heads of its range, so attention needs no communication; o_proj
// and FFN down are then row-parallel (an all-reduce each). MoE layers are expert parallel: whole
// routed experts split evenly (the router stays on every rank), the shared expert by its FFN
// columns like a dense FFN.
//
// Not for: the vocabulary split of the embedding and head (dist/shard_definition.h decides it).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "model/model_config.h"

namespace uniprefill::dist {

struct ShardRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const ShardRange&) const = default;
};

// Rank `rank` of `world`'s share of n items: [n r / world, n (r + 1) / world); n must divide
// evenly (InvalidArgument naming `what` otherwise).
Result<ShardRange> EvenShare(int64_t n, int rank, int world, const std::string& what);

struct ShardPlan {
  int rank = 0, world = 1;
  ShardRange q_heads;   // attention query heads (full and sliding layers share the counts)
  ShardRange kv_heads;  // the KV heads those query heads use
  bool kv_replicated = false;  // fewer KV heads than ranks: several ranks hold the same KV head
  ShardRange ffn;              // dense FFN intermediate columns (gate/up rows, down columns)
  // Gated DeltaNet (empty without such layers): value heads follow their key heads (v = k r).
  ShardRange linear_k_heads, linear_v_heads;
  ShardRange experts;     // MoE routed experts held whole (empty without MoE layers)
  ShardRange shared_ffn;  // MoE shared-expert intermediate columns
};

// The plan for `rank` of `world` ranks, or InvalidArgument naming what does not divide (query
// heads, KV heads vs ranks, FFN columns, DeltaNet heads, experts, shared-expert columns).
Result<ShardPlan> PlanShards(const ModelConfig& m, int rank, int world);

}  // namespace uniprefill::dist
