// One layer block's weights cut to a tensor-parallel rank's share (dist/shard_plan.h): the pieces
// dist/shard_definition.h applies to every layer. Each cut block, run by the block's own forward
// on the full input, gives the rank's partial output; the ranks' partial outputs summed (the layer
// walk's all-reduce) are the whole block's output.
//   attention: q rows of its query heads, k and v rows of its KV heads, o columns;
//   gated FFN (also MoE's shared expert): gate and up rows of its columns, down columns;
//   Gated DeltaNet: its key heads with their value heads: in_proj_qkvz / in_proj_ba rows, conv1d
//     channels, dt_bias and A_log per value head, out_proj columns; the gated norm is per head and
//     stays whole;
//   MoE: its routed experts whole (the router stays whole, so every rank routes the same way).
// Column-parallel cuts are views into the source weights; row-parallel ones (input columns) are
// copies kept in *storage, which must outlive the weights.
// Not for: the embedding and head (dist/shard_definition.cc), f32 prefill copies.
#pragma once

#include <vector>

#include "core/buffer.h"
#include "core/status.h"
#include "dist/shard_plan.h"
#include "model/blocks/attention_block.h"
#include "model/blocks/feed_forward.h"
#include "model/blocks/gated_deltanet.h"
#include "model/blocks/moe.h"

namespace uniprefill::dist {

Status ShardAttention(AttentionWeights& a, const ShardPlan& plan, std::vector<Buffer>* storage);

// gate_up [2F, H] (gate rows, then up rows) and down [H, F] cut to intermediate `columns`.
Status ShardGatedMlp(ops::LinearWeight& gate_up, ops::LinearWeight& down, ShardRange columns,
                     std::vector<Buffer>* storage);

Status ShardGatedDeltaNet(GatedDeltaNetWeights& g, const ShardPlan& plan,
                          std::vector<Buffer>* storage);

Status ShardMoe(MoeWeights& m, const ShardPlan& plan, std::vector<Buffer>* storage);

}  // namespace uniprefill::dist
