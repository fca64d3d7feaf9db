#include "dist/shard_plan.h"

#include <algorithm>

namespace uniprefill::dist {

Result<ShardRange> EvenShare(int64_t n, int rank, int world, const std::string& what) {
  if (world < 1 || rank < 0 || rank >= world) {
    return InvalidArgument("rank " + std::to_string(rank) + " of " + std::to_string(world) +
                           " ranks does not exist");
  }
  if (n % world != 0) {
    return InvalidArgument(what + " (" + std::to_string(n) + ") do not split evenly over " +
                           std::to_string(world) + " ranks; use a tensor-parallel size that "
                           "divides it");
  }
  return ShardRange{n / world * rank, n / world * (rank + 1)};
}

Result<ShardPlan> PlanShards(const ModelConfig& m, int rank, int world) {
  ShardPlan p;
  p.rank = rank;
  p.world = world;
  UP_ASSIGN_OR_RETURN(p.q_heads, EvenShare(m.n_heads, rank, world, "the query heads"));
  if (m.n_kv_heads <= 0 || m.n_heads % m.n_kv_heads != 0) {
    return InvalidArgument("the model's query heads (" + std::to_string(m.n_heads) +
                           ") are not a multiple of its KV heads (" +
                           std::to_string(m.n_kv_heads) + ")");
  }
  if (m.n_kv_heads >= world) {
    UP_ASSIGN_OR_RETURN(p.kv_heads, EvenShare(m.n_kv_heads, rank, world, "the KV heads"));
  } else {
    // Fewer KV heads than ranks: the rank's query heads sit inside one GQA group; hold its KV
    // head. world / Hkv must be whole so no rank's query heads straddle two groups.
    if (world % m.n_kv_heads != 0) {
      return InvalidArgument("the KV heads (" + std::to_string(m.n_kv_heads) +
                             ") do not divide the " + std::to_string(world) +
                             " ranks; use a tensor-parallel size that is a multiple of them");
    }
    const int64_t group = m.n_heads / m.n_kv_heads;
    const int64_t kv = p.q_heads.begin / group;
    p.kv_heads = {kv, kv + 1};
    p.kv_replicated = true;
  }
  if (m.n_experts > 0) {
    // Expert parallel: a routed expert's ffn_hidden columns stay together on one rank.
    UP_ASSIGN_OR_RETURN(p.experts, EvenShare(m.n_experts, rank, world, "the MoE experts"));
    UP_ASSIGN_OR_RETURN(p.shared_ffn, EvenShare(m.shared_ffn_hidden, rank, world,
                                                "the shared expert's FFN columns"));
  } else if (m.ffn_hidden > 0) {
    UP_ASSIGN_OR_RETURN(p.ffn, EvenShare(m.ffn_hidden, rank, world, "the FFN columns"));
  }
  const bool has_linear = std::find(m.layer_kinds.begin(), m.layer_kinds.end(),
                                    LayerKind::kLinearAttention) != m.layer_kinds.end();
  if (has_linear) {
    UP_ASSIGN_OR_RETURN(p.linear_k_heads,
                        EvenShare(m.linear_k_heads, rank, world, "the DeltaNet key heads"));
    UP_ASSIGN_OR_RETURN(p.linear_v_heads,
                        EvenShare(m.linear_v_heads, rank, world, "the DeltaNet value heads"));
  }
  return p;
}

}  // namespace uniprefill::dist
