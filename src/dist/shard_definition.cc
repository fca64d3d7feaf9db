#include "dist/shard_definition.h"

#include <memory>
#include <utility>
#include <vector>

#include "dist/shard_layers.h"
#include "dist/weight_shards.h"
#include "io/dequant.h"
#include "ops/cpu/cpu_linear_int16_rows.h"
#include "ops/cpu/cpu_ops.h"

namespace uniprefill::dist {
namespace {

// As LoadLinear (model/weight_source.cc): one f32 part already is the GEMM operand (a copy would
// double the rank's bytes for nothing).
Status MakeF32Copy(ops::LinearWeight& w, const ShardCopies& copies) {
  if (w.parts.size() == 1 && w.parts[0].dtype == DType::kF32) return OkStatus();
  if (copies.unless_int16_gemm &&
      ops::cpu::CanRunLinearInt16Rows(w, *copies.unless_int16_gemm)) {
    return OkStatus();
  }
  if (copies.dequantise_on_call &&
      ops::cpu::CanDequantiseForGemm(w, *copies.dequantise_on_call)) {
    w.f32_on_call = true;
    return OkStatus();
  }
  w.f32 = Buffer(sizeof(float) * static_cast<size_t>(w.out_features * w.in_features));
  int64_t row = 0;
  for (const TensorView& p : w.parts) {
    UP_RETURN_IF_ERROR(
        Dequantize(p.dtype, p.data, w.f32.as<float>() + row * w.in_features, p.numel()));
    row += p.dim(0);
  }
  return OkStatus();
}

}  // namespace

Result<ModelDefinition> ShardDefinition(ModelDefinition full, const ShardPlan& plan,
                                        const ShardCopies& copies, bool split_vocabulary) {
  ModelDefinition d = std::move(full);
  if (plan.world == 1) return d;
  ModelConfig& c = d.config;
  auto storage = std::make_shared<std::vector<Buffer>>();
  d.host_copy_bytes = 0;
  for (size_t i = 0; i < d.layers.size(); ++i) {
    LayerDefinition& L = d.layers[i];
    if (L.attention) UP_RETURN_IF_ERROR(ShardAttention(*L.attention, plan, storage.get()));
    if (L.delta) UP_RETURN_IF_ERROR(ShardGatedDeltaNet(*L.delta, plan, storage.get()));
    if (L.ffn) {
      UP_RETURN_IF_ERROR(
          ShardGatedMlp(L.ffn->gate_up, L.ffn->down, plan.ffn, storage.get()));
    }
    if (L.moe) UP_RETURN_IF_ERROR(ShardMoe(*L.moe, plan, storage.get()));
    if (copies.f32_prefill) {
      for (ops::LinearWeight* w : L.LinearWeights()) {
        UP_RETURN_IF_ERROR(MakeF32Copy(*w, copies));
        d.host_copy_bytes += w->f32.size();
      }
    }
  }
  // Vocabulary-parallel embedding and head (tied or not): each rank holds its rows; the walk
  // all-reduces the embedded rows (zeros outside a rank's range) and all-gathers the logits. A
  // vocabulary that does not split evenly stays replicated.
  if (split_vocabulary && c.vocab_size % plan.world == 0 && !d.token_embedding.is_random()) {
    const int64_t per = c.vocab_size / plan.world;
    d.vocab_begin = per * plan.rank;
    d.vocab_end = per * (plan.rank + 1);
    UP_ASSIGN_OR_RETURN(d.token_embedding,
                        SliceOutputRows(d.token_embedding, d.vocab_begin, d.vocab_end));
    UP_ASSIGN_OR_RETURN(d.head, SliceOutputRows(d.head, d.vocab_begin, d.vocab_end));
  }
  // The local counts, which caches (the DeltaNet's recurrent state) and kernels size from.
  c.n_heads = static_cast<int>(plan.q_heads.size());
  c.n_kv_heads = static_cast<int>(plan.kv_heads.size());
  if (c.n_experts > 0) {
    c.shared_ffn_hidden = static_cast<int>(plan.shared_ffn.size());  // experts stay whole
  } else {
    c.ffn_hidden = static_cast<int>(plan.ffn.size());
  }
  if (plan.linear_k_heads.size() > 0) {
    c.linear_k_heads = static_cast<int>(plan.linear_k_heads.size());
    c.linear_v_heads = static_cast<int>(plan.linear_v_heads.size());
  }
  d.owners.push_back(std::move(storage));
  return d;
}

}  // namespace uniprefill::dist
