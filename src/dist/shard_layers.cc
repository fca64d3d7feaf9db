#include "dist/shard_layers.h"

#include <string>
#include <utility>

#include "dist/weight_shards.h"

namespace uniprefill::dist {
namespace {

// Column-parallel parts stacked: rows [b, e) of each of `groups` equal row groups (gate | up).
Result<ops::LinearWeight> RowsOfGroups(const ops::LinearWeight& w, int groups, int64_t b,
                                       int64_t e) {
  const int64_t per = w.out_features / groups;
  ops::LinearWeight out;
  out.in_features = w.in_features;
  out.int16_decode_activations = w.int16_decode_activations;
  out.int8_rows_activations = w.int8_rows_activations;
  out.bf16_prefill_gemm = w.bf16_prefill_gemm;
  for (int g = 0; g < groups; ++g) {
    UP_ASSIGN_OR_RETURN(ops::LinearWeight s, SliceOutputRows(w, g * per + b, g * per + e));
    for (TensorView& p : s.parts) out.parts.push_back(p);
    out.out_features += s.out_features;
  }
  return out;
}

// Rows [b, e) of a row-major f32 [rows, width] vector, appended to *out.
void AppendRows(const std::vector<float>& v, int64_t width, int64_t b, int64_t e,
                std::vector<float>* out) {
  out->insert(out->end(), v.begin() + b * width, v.begin() + e * width);
}

}  // namespace

Status ShardAttention(AttentionWeights& a, const ShardPlan& plan, std::vector<Buffer>* storage) {
  const int64_t q_rows_per_head = a.q.out_features / a.n_heads;  // D, or 2D when gated
  const int64_t D = a.head_dim;
  UP_ASSIGN_OR_RETURN(a.q, SliceOutputRows(a.q, plan.q_heads.begin * q_rows_per_head,
                                           plan.q_heads.end * q_rows_per_head));
  UP_ASSIGN_OR_RETURN(a.k,
                      SliceOutputRows(a.k, plan.kv_heads.begin * D, plan.kv_heads.end * D));
  UP_ASSIGN_OR_RETURN(a.v,
                      SliceOutputRows(a.v, plan.kv_heads.begin * D, plan.kv_heads.end * D));
  UP_ASSIGN_OR_RETURN(a.o, SliceInputColumns(a.o, plan.q_heads.begin * D, plan.q_heads.end * D,
                                             storage));
  a.n_heads = static_cast<int>(plan.q_heads.size());
  a.n_kv_heads = static_cast<int>(plan.kv_heads.size());
  return OkStatus();
}

Status ShardGatedMlp(ops::LinearWeight& gate_up, ops::LinearWeight& down, ShardRange columns,
                     std::vector<Buffer>* storage) {
  UP_ASSIGN_OR_RETURN(gate_up, RowsOfGroups(gate_up, 2, columns.begin, columns.end));
  UP_ASSIGN_OR_RETURN(down, SliceInputColumns(down, columns.begin, columns.end, storage));
  return OkStatus();
}

Status ShardGatedDeltaNet(GatedDeltaNetWeights& g, const ShardPlan& plan,
                          std::vector<Buffer>* storage) {
  const ShardRange kh = plan.linear_k_heads, vh = plan.linear_v_heads;
  const int64_t r = g.n_v_heads / g.n_k_heads, dk = g.d_k, dv = g.d_v;
  if (kh.end > g.n_k_heads || vh.begin != kh.begin * r || vh.end != kh.end * r) {
    return InvalidArgument("Gated DeltaNet shard: key heads [" + std::to_string(kh.begin) + ", " +
                           std::to_string(kh.end) + ") and value heads [" +
                           std::to_string(vh.begin) + ", " + std::to_string(vh.end) +
                           ") are not one group of the layer's " + std::to_string(g.n_k_heads) +
                           " key heads with " + std::to_string(r) + " value heads each");
  }
  // in_proj_qkvz rows come per key head as [q (d_k) | k (d_k) | v (r d_v) | z (r d_v)] and
  // in_proj_ba rows per key head as [b (r) | a (r)] (gated_deltanet.h): a run of whole key-head
  // groups is one contiguous row range, and the forward's regrouping then sees local heads only.
  const int64_t qkvz_group = 2 * dk + 2 * r * dv, ba_group = 2 * r;
  UP_ASSIGN_OR_RETURN(g.in_proj_qkvz, SliceOutputRows(g.in_proj_qkvz, kh.begin * qkvz_group,
                                                      kh.end * qkvz_group));
  UP_ASSIGN_OR_RETURN(g.in_proj_ba,
                      SliceOutputRows(g.in_proj_ba, kh.begin * ba_group, kh.end * ba_group));
  UP_ASSIGN_OR_RETURN(g.out_proj,
                      SliceInputColumns(g.out_proj, vh.begin * dv, vh.end * dv, storage));
  // The conv's channels are NOT per head group: [q of every key head | k of every key head | v of
  // every value head], so the rank's channels are three ranges.
  const int64_t key_dim = g.key_dim(), K = g.conv_kernel;
  std::vector<float> conv;  // f32 [local conv_dim, K]
  AppendRows(g.conv_weight, K, kh.begin * dk, kh.end * dk, &conv);
  AppendRows(g.conv_weight, K, key_dim + kh.begin * dk, key_dim + kh.end * dk, &conv);
  AppendRows(g.conv_weight, K, 2 * key_dim + vh.begin * dv, 2 * key_dim + vh.end * dv, &conv);
  g.conv_weight = std::move(conv);
  std::vector<float> dt_bias, a_log;  // f32 [local n_v]
  AppendRows(g.dt_bias, 1, vh.begin, vh.end, &dt_bias);
  AppendRows(g.a_log, 1, vh.begin, vh.end, &a_log);
  g.dt_bias = std::move(dt_bias);
  g.a_log = std::move(a_log);
  g.n_k_heads = static_cast<int>(kh.size());
  g.n_v_heads = static_cast<int>(vh.size());
  return OkStatus();
}

Status ShardMoe(MoeWeights& m, const ShardPlan& plan, std::vector<Buffer>* storage) {
  const ShardRange e = plan.experts;
  if (m.first_expert != 0 || static_cast<int64_t>(m.expert_gate_up.size()) != m.n_experts ||
      static_cast<int64_t>(m.expert_down.size()) != m.n_experts || e.end > m.n_experts) {
    return InvalidArgument("MoE shard: experts [" + std::to_string(e.begin) + ", " +
                           std::to_string(e.end) + ") of a layer holding " +
                           std::to_string(m.expert_gate_up.size()) + " of its " +
                           std::to_string(m.n_experts) + " experts");
  }
  // Other ranks' experts are dropped unread: their pages of the mapped file are never touched.
  auto keep = [&](std::vector<ops::LinearWeight>& v) {
    v = std::vector<ops::LinearWeight>(std::make_move_iterator(v.begin() + e.begin),
                                       std::make_move_iterator(v.begin() + e.end));
  };
  keep(m.expert_gate_up);
  keep(m.expert_down);
  m.first_expert = static_cast<int>(e.begin);
  // The router and the shared expert's gate ([1, H]: one scalar per row) stay whole.
  return ShardGatedMlp(m.shared_gate_up, m.shared_down, plan.shared_ffn, storage);
}

}  // namespace uniprefill::dist
