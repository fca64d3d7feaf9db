#include "dist/shard_definition.h"

#include <memory>
#include <utility>
#include <vector>

#include "dist/weight_shards.h"
#include "io/dequant.h"

namespace uniprefill::dist {
namespace {

// Column-parallel parts stacked: rows [b, e) of each `stride`-row group (gate | up: two groups).
Result<ops::LinearWeight> RowsOfGroups(const ops::LinearWeight& w, int groups, int64_t b,
                                       int64_t e) {
  const int64_t per = w.out_features / groups;
  ops::LinearWeight out;
  out.in_features = w.in_features;
  out.int16_decode_activations = w.int16_decode_activations;
  for (int g = 0; g < groups; ++g) {
    UP_ASSIGN_OR_RETURN(ops::LinearWeight s, SliceOutputRows(w, g * per + b, g * per + e));
    for (TensorView& p : s.parts) out.parts.push_back(p);
    out.out_features += s.out_features;
  }
  return out;
}

Status MakeF32Copy(ops::LinearWeight& w) {
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
                                        bool make_f32_copies, bool split_vocabulary) {
  ModelDefinition d = std::move(full);
  if (plan.world == 1) return d;
  ModelConfig& c = d.config;
  auto storage = std::make_shared<std::vector<Buffer>>();
  d.host_copy_bytes = 0;
  for (size_t i = 0; i < d.layers.size(); ++i) {
    LayerDefinition& L = d.layers[i];
    if (L.delta || L.moe) {
      return Unimplemented("tensor parallelism: layer " + std::to_string(i) + " is a " +
                           (L.delta ? "Gated DeltaNet" : "MoE") +
                           " layer, which cannot be sharded yet (llama and gemma3 can)");
    }
    if (L.attention) {
      AttentionWeights& a = *L.attention;
      const int64_t q_rows_per_head = a.q.out_features / a.n_heads;  // D, or 2D when gated
      const int64_t D = a.head_dim;
      UP_ASSIGN_OR_RETURN(a.q, SliceOutputRows(a.q, plan.q_heads.begin * q_rows_per_head,
                                               plan.q_heads.end * q_rows_per_head));
      UP_ASSIGN_OR_RETURN(a.k, SliceOutputRows(a.k, plan.kv_heads.begin * D,
                                               plan.kv_heads.end * D));
      UP_ASSIGN_OR_RETURN(a.v, SliceOutputRows(a.v, plan.kv_heads.begin * D,
                                               plan.kv_heads.end * D));
      UP_ASSIGN_OR_RETURN(a.o, SliceInputColumns(a.o, plan.q_heads.begin * D,
                                                 plan.q_heads.end * D, storage.get()));
      a.n_heads = static_cast<int>(plan.q_heads.size());
      a.n_kv_heads = static_cast<int>(plan.kv_heads.size());
    }
    if (L.ffn) {
      GatedFfnWeights& f = *L.ffn;
      UP_ASSIGN_OR_RETURN(f.gate_up, RowsOfGroups(f.gate_up, 2, plan.ffn.begin, plan.ffn.end));
      UP_ASSIGN_OR_RETURN(f.down,
                          SliceInputColumns(f.down, plan.ffn.begin, plan.ffn.end, storage.get()));
    }
    if (make_f32_copies) {
      std::vector<ops::LinearWeight*> ws;
      if (L.attention) ws = {&L.attention->q, &L.attention->k, &L.attention->v, &L.attention->o};
      if (L.ffn) {
        ws.push_back(&L.ffn->gate_up);
        ws.push_back(&L.ffn->down);
      }
      for (ops::LinearWeight* w : ws) {
        UP_RETURN_IF_ERROR(MakeF32Copy(*w));
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
  c.n_heads = static_cast<int>(plan.q_heads.size());
  c.n_kv_heads = static_cast<int>(plan.kv_heads.size());
  c.ffn_hidden = static_cast<int>(plan.ffn.size());
  d.owners.push_back(std::move(storage));
  return d;
}

}  // namespace uniprefill::dist
