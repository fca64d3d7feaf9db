#include "backend/cuda/cuda_weights.h"

#include <cstring>
#include <string>

#include "core/cuda/cuda_context.h"
#include "io/dequant.h"
#include "ops/cuda/cuda_dense_ops.h"

namespace uniprefill::cuda_backend {
namespace {

uint16_t ToBf16(float f) {  // round to nearest even (no NaNs in weights)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// The rows of one or more host linear weights (stacked), dequantised to f32 [out, in].
Result<std::vector<float>> HostRows(const std::vector<const ops::LinearWeight*>& ws, int64_t* out,
                                    int64_t* in) {
  *out = 0;
  *in = ws.front()->in_features;
  for (const ops::LinearWeight* w : ws) *out += w->out_features;
  std::vector<float> rows(static_cast<size_t>(*out) * *in);
  size_t at = 0;
  for (const ops::LinearWeight* w : ws) {
    if (w->in_features != *in) return Internal("stacked weights differ in input width");
    const size_t n = static_cast<size_t>(w->out_features) * *in;
    if (w->f32.size() >= n * sizeof(float)) {
      std::memcpy(rows.data() + at, w->f32.as<float>(), n * sizeof(float));
    } else {
      size_t part_at = at;
      for (const TensorView& p : w->parts) {
        const int64_t pn = p.dim(0) * p.dim(1);
        UP_RETURN_IF_ERROR(Dequantize(p.dtype, p.data, rows.data() + part_at, pn));
        part_at += pn;
      }
    }
    at += n;
  }
  return rows;
}

}  // namespace

Result<DeviceLinear> UploadRows(const std::vector<float>& rows, int64_t out, int64_t in,
                                const std::vector<int64_t>* order) {
  std::vector<uint16_t> bf(rows.size());
  for (int64_t r = 0; r < out; ++r) {
    const int64_t src = order ? (*order)[r] : r;
    for (int64_t c = 0; c < in; ++c) bf[r * in + c] = ToBf16(rows[src * in + c]);
  }
  DeviceLinear d;
  d.out = out;
  d.in = in;
  UP_ASSIGN_OR_RETURN(d.w, DeviceBuffer::Allocate(bf.size() * 2));
  d.w.CopyFromHost(bf.data(), bf.size() * 2);
  return d;
}

namespace {

// Random weights (model/model_presets.h) are filled on the device: stacked part by part, then
// rows reordered by a device gather when `order` asks for it.
Result<DeviceLinear> UploadRandom(DeviceContext& ctx,
                                  const std::vector<const ops::LinearWeight*>& ws,
                                  const std::vector<int64_t>* order) {
  DeviceLinear d;
  d.in = ws.front()->in_features;
  for (const ops::LinearWeight* w : ws) {
    if (!w->is_random() || w->in_features != d.in) {
      return Internal("stacked weights mix random and stored values, or differ in input width");
    }
    d.out += w->out_features;
  }
  UP_ASSIGN_OR_RETURN(DeviceBuffer stacked, DeviceBuffer::Allocate(d.out * d.in * 2));
  int64_t at = 0;
  for (const ops::LinearWeight* w : ws) {
    for (const ops::LinearWeight::RandomPart& p : w->random_parts) {
      const int64_t n = p.rows * d.in;
      ops::cuda::FillRandomBf16(ctx, stacked.as<uint16_t>() + at, n, p.seed, p.scale);
      at += n;
    }
  }
  if (at != d.out * d.in) return Internal("random parts do not add up to the weight's rows");
  if (order == nullptr) {
    d.w = std::move(stacked);
  } else {
    const std::vector<int32_t> rows(order->begin(), order->end());
    DeviceBuffer d_rows = DeviceBuffer::FromHost(rows);
    UP_ASSIGN_OR_RETURN(d.w, DeviceBuffer::Allocate(d.out * d.in * 2));
    ops::cuda::GatherRows(ctx, d.view(), stacked.View(DType::kBF16, {d.out, d.in}),
                          d_rows.as<int32_t>());
  }
  ctx.cuda().Synchronize();  // the temporaries go when this returns
  return d;
}

}  // namespace

Result<DeviceLinear> Upload(DeviceContext& ctx, const std::vector<const ops::LinearWeight*>& ws,
                            const std::vector<int64_t>* order) {
  if (ws.front()->is_random()) return UploadRandom(ctx, ws, order);
  int64_t out = 0, in = 0;
  UP_ASSIGN_OR_RETURN(std::vector<float> rows, HostRows(ws, &out, &in));
  return UploadRows(rows, out, in, order);
}

DeviceBuffer UploadF32(const std::vector<float>& v) { return DeviceBuffer::FromHost(v); }

Status UploadAttention(DeviceContext& ctx, const AttentionWeights& a, AttentionLayer* L,
                       int64_t* bytes) {
  L->host = &a;
  const int64_t D = a.head_dim, Hq = a.n_heads;
  if (a.gated_output) {
    // Host rows: per head [query (D) | gate (D)]; device rows: all queries, then all gates.
    const int64_t out = a.q.out_features + a.k.out_features + a.v.out_features;
    std::vector<int64_t> order;
    for (int64_t h = 0; h < Hq; ++h) {
      for (int64_t d = 0; d < D; ++d) order.push_back(h * 2 * D + d);
    }
    for (int64_t h = 0; h < Hq; ++h) {
      for (int64_t d = 0; d < D; ++d) order.push_back(h * 2 * D + D + d);
    }
    for (int64_t r = 2 * Hq * D; r < out; ++r) order.push_back(r);
    UP_ASSIGN_OR_RETURN(L->qkv, Upload(ctx, {&a.q, &a.k, &a.v}, &order));
  } else {
    UP_ASSIGN_OR_RETURN(L->qkv, Upload(ctx, {&a.q, &a.k, &a.v}));
  }
  UP_ASSIGN_OR_RETURN(L->o, Upload(ctx, {&a.o}));
  if (!a.q_norm.empty()) L->q_norm = UploadF32(a.q_norm);
  if (!a.k_norm.empty()) L->k_norm = UploadF32(a.k_norm);
  L->inv_freq = UploadF32(a.rope_inv_freq);
  *bytes += (L->qkv.w.size() + L->o.w.size());
  return OkStatus();
}

Status UploadDelta(DeviceContext& ctx, const GatedDeltaNetWeights& d, DeltaLayer* L,
                   int64_t* bytes) {
  L->host = &d;
  // Host rows of in_proj_qkvz: per key head [q (dk) | k (dk) | v (r dv) | z (r dv)]; of in_proj_ba:
  // per key head [b (r) | a (r)]. Device rows: q all | k all | v all | z all | b all | a all.
  const int64_t hk = d.n_k_heads, hv = d.n_v_heads, dk = d.d_k, dv = d.d_v, r = hv / hk;
  const int64_t group = 2 * dk + 2 * r * dv, ba0 = hk * group;
  std::vector<int64_t> order;
  for (int part = 0; part < 4; ++part) {  // q, k, v, z
    const int64_t off = part == 0 ? 0 : part == 1 ? dk : part == 2 ? 2 * dk : 2 * dk + r * dv;
    const int64_t len = part < 2 ? dk : r * dv;
    for (int64_t kh = 0; kh < hk; ++kh) {
      for (int64_t i = 0; i < len; ++i) order.push_back(kh * group + off + i);
    }
  }
  for (int part = 0; part < 2; ++part) {  // b, a
    for (int64_t h = 0; h < hv; ++h) order.push_back(ba0 + (h / r) * 2 * r + part * r + h % r);
  }
  UP_ASSIGN_OR_RETURN(L->in_proj, Upload(ctx, {&d.in_proj_qkvz, &d.in_proj_ba}, &order));
  UP_ASSIGN_OR_RETURN(L->out_proj, Upload(ctx, {&d.out_proj}));
  L->conv_w = UploadF32(d.conv_weight);
  L->a_log = UploadF32(d.a_log);
  L->dt_bias = UploadF32(d.dt_bias);
  L->norm = UploadF32(d.norm);
  *bytes += L->in_proj.w.size() + L->out_proj.w.size();
  return OkStatus();
}

Status UploadMoe(DeviceContext& ctx, const MoeWeights& m, MoeLayer* L, int64_t* bytes) {
  // An expert-parallel shard (dist/shard_layers.h) holds experts [first_expert, first_expert +
  // E_local) and the whole router: the device MoE routes over all E and runs the held ones.
  const int64_t local = static_cast<int64_t>(m.expert_gate_up.size());
  if (local < 1 || static_cast<int64_t>(m.expert_down.size()) != local || m.first_expert < 0 ||
      m.first_expert + local > m.n_experts || m.router.out_features != m.n_experts) {
    return InvalidArgument("MoE layer: experts [" + std::to_string(m.first_expert) + ", " +
                           std::to_string(m.first_expert + local) + ") (" +
                           std::to_string(m.expert_down.size()) + " down projections) of a " +
                           "router of " + std::to_string(m.router.out_features) + " rows and " +
                           std::to_string(m.n_experts) + " experts do not fit together");
  }
  L->first_expert = m.first_expert;
  L->local_experts = local;
  L->top_k = m.top_k;
  L->norm_topk = m.norm_topk_prob;
  L->n_experts = m.n_experts;
  L->inter = m.expert_down.empty() ? 0 : m.expert_down[0].in_features;
  UP_ASSIGN_OR_RETURN(L->router, Upload(ctx, {&m.router}));
  std::vector<const ops::LinearWeight*> gu, dn;
  for (const ops::LinearWeight& w : m.expert_gate_up) gu.push_back(&w);
  for (const ops::LinearWeight& w : m.expert_down) dn.push_back(&w);
  UP_ASSIGN_OR_RETURN(L->experts_gate_up, Upload(ctx, gu));
  UP_ASSIGN_OR_RETURN(L->experts_down, Upload(ctx, dn));
  UP_ASSIGN_OR_RETURN(L->shared_gate_up, Upload(ctx, {&m.shared_gate_up}));
  UP_ASSIGN_OR_RETURN(L->shared_down, Upload(ctx, {&m.shared_down}));
  UP_ASSIGN_OR_RETURN(L->shared_gate, Upload(ctx, {&m.shared_expert_gate}));
  for (const DeviceLinear* w : {&L->router, &L->experts_gate_up, &L->experts_down,
                                &L->shared_gate_up, &L->shared_down, &L->shared_gate}) {
    *bytes += w->w.size();
  }
  return OkStatus();
}

}  // namespace uniprefill::cuda_backend
