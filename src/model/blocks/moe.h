// The sparse MoE block of Qwen3-Next (transformers' Qwen3NextSparseMoeBlock) on rows of a packed
// batch (rows are independent, so sequences do not matter here).
//
// Router softmax over all experts in f32, top-k (ties: the lower expert index), optional
// renormalisation; each expert's rows are gathered and run as one SwiGLU GEMM pair, then added back
// weighted; plus one shared SwiGLU expert scaled by sigmoid(shared_expert_gate(x)).
// Determinism: every row sums its experts in ascending expert index, then the shared expert, so a
// row's result does not depend on which other rows share the batch (up to the GEMM kernel that
// ops::Linear picks for a given row count).
// Tensor parallel (expert parallel, dist/shard_definition.h): a rank holds experts [first_expert,
// first_expert + expert_gate_up.size()) and a column slice of the shared expert, but the whole
// router, so every rank routes (softmax over all E, top-k, renormalisation) exactly as one process
// does; its output is its experts' weighted sum (zero for rows routed elsewhere) plus its partial
// shared expert, and the layer walk all-reduces it.
#pragma once

#include <vector>

#include "core/device_context.h"
#include "core/tensor.h"
#include "ops/ops.h"

namespace uniprefill {

struct MoeWeights {
  ops::LinearWeight router;                       // [E, H]
  std::vector<ops::LinearWeight> expert_gate_up;  // E_local of [2 I, H]: gate rows, then up rows
  std::vector<ops::LinearWeight> expert_down;     // E_local of [H, I]
  ops::LinearWeight shared_gate_up;               // [2 I_shared, H]: gate rows, then up rows
  ops::LinearWeight shared_down;                  // [H, I_shared]
  ops::LinearWeight shared_expert_gate;           // [1, H]
  int n_experts = 0;    // E: the router's experts (all of the model's)
  int first_expert = 0;  // the expert expert_gate_up[0] is; E_local = E unless tensor parallel
  int top_k = 0;
  bool norm_topk_prob = true;  // renormalise the top-k weights to sum 1 (Qwen3NextConfig default)
};

// out f32 [T, H] = MoE(x f32 [T, H]). out must not alias x.
void MoeForward(DeviceContext& ctx, const MoeWeights& w, TensorView x, TensorView out);

// The routing of one row: `top_k` experts and weights, ordered by ascending expert index.
// logits f32 [E]. Exposed for tests and for expert-load statistics.
struct ExpertChoice {
  int expert;
  float weight;
};
std::vector<ExpertChoice> RouteRow(const float* logits, int n_experts, int top_k,
                                   bool norm_topk_prob);

}  // namespace uniprefill
