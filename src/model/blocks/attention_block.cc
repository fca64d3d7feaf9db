#include "model/blocks/attention_block.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>

#include "dist/communicator.h"
#include "kv/kv_rows.h"
#include "sparsity/drop_plan.h"
#include "sparsity/token_selection.h"

namespace uniprefill {
namespace {

// A layer's cached keys/values of one request as contiguous f32 views: the single f32 chunk in
// place, or the chunks gathered (and f16 ones widened) into `scratch` (paged or f16 caches).
struct ContiguousKv {
  TensorView k, v;                 // f32 [N, Hkv, D]
  const int32_t* pos = nullptr;    // [N]
  const int32_t* index = nullptr;  // [N]
  int n = 0;
  Buffer scratch;
  std::vector<int32_t> pos_copy, index_copy;
};

void ViewKv(const KvLayerView& view, int n_kv_heads, int head_dim, ContiguousKv* out) {
  const int n = view.count();
  out->n = n;
  if (view.chunks.size() == 1 && view.dtype == DType::kF32) {
    const KvChunk& c = view.chunks[0];
    out->k = TensorView::Contiguous(const_cast<void*>(c.k), DType::kF32, {n, n_kv_heads, head_dim});
    out->v = TensorView::Contiguous(const_cast<void*>(c.v), DType::kF32, {n, n_kv_heads, head_dim});
    out->pos = c.pos;
    out->index = c.index;
    return;
  }
  const size_t row = static_cast<size_t>(view.kv_dim);
  out->scratch = Buffer(sizeof(float) * row * 2 * std::max(n, 1));
  float* k = out->scratch.as<float>();
  float* v = k + row * n;
  size_t at = 0;
  for (const KvChunk& c : view.chunks) {
    LoadKvValues(k + at * row, c.k, view.dtype, static_cast<int64_t>(row) * c.count);
    LoadKvValues(v + at * row, c.v, view.dtype, static_cast<int64_t>(row) * c.count);
    out->pos_copy.insert(out->pos_copy.end(), c.pos, c.pos + c.count);
    out->index_copy.insert(out->index_copy.end(), c.index, c.index + c.count);
    at += c.count;
  }
  out->k = TensorView::Contiguous(k, DType::kF32, {n, n_kv_heads, head_dim});
  out->v = TensorView::Contiguous(v, DType::kF32, {n, n_kv_heads, head_dim});
  out->pos = out->pos_copy.data();
  out->index = out->index_copy.data();
}

// A layer's cached keys of one request for attention: one run per chunk (a paged cache's block),
// read in place, and the keys' masking coordinates (alive indices, or positions) in one array:
// copied only with several chunks, 4 bytes per key against K and V's 8 * kv_dim.
struct KvRuns {
  std::vector<ops::KvRun> runs;  // each k, v (f32 or f16) [count, Hkv, D]
  const int32_t* mask = nullptr;  // [sum of counts]
  std::vector<int32_t> mask_copy;
};

void ViewKvRuns(const KvLayerView& view, int n_kv_heads, int head_dim, bool by_position,
                KvRuns* out) {
  for (const KvChunk& c : view.chunks) {
    out->runs.push_back(
        {TensorView::Contiguous(const_cast<void*>(c.k), view.dtype,
                                {c.count, n_kv_heads, head_dim}),
         TensorView::Contiguous(const_cast<void*>(c.v), view.dtype,
                                {c.count, n_kv_heads, head_dim})});
  }
  if (view.chunks.empty()) {  // no key: one empty run carries the head count
    out->runs.push_back({TensorView::Contiguous(nullptr, view.dtype, {0, n_kv_heads, head_dim}),
                         TensorView::Contiguous(nullptr, view.dtype, {0, n_kv_heads, head_dim})});
  }
  if (view.chunks.size() == 1) {
    out->mask = by_position ? view.chunks[0].pos : view.chunks[0].index;
    return;
  }
  for (const KvChunk& c : view.chunks) {
    const int32_t* m = by_position ? c.pos : c.index;
    out->mask_copy.insert(out->mask_copy.end(), m, m + c.count);
  }
  out->mask = out->mask_copy.data();
}

// UniPrefill selection for request r (rows [begin, end) of q): kept rows relative to begin, or an
// empty list when the request passes through.
Result<std::vector<int32_t>> SelectRows(DeviceContext& ctx, const AttentionWeights& w,
                                        const PackedBatch& batch, int r, TensorView q,
                                        const ContiguousKv& kv, const DropLayer& drop) {
  const PackedBatch::Seq& s = batch.seq(r);
  const UniPrefillConfig* config = drop.steps[r].selection ? drop.steps[r].selection : drop.config;
  const sparsity::SelectionParams& p = config->selection;
  int n_alive = s.rows();
  // A segment-wise chunk passes its drop layer whole (its rows leave for the boundary next); the
  // segment's last chunk selects among every row of the segment, all of them cached by now, and
  // leaves the kept list with the boundary, which compacts the collected rows.
  const SegmentChunk* chunk = drop.steps[r].chunk;
  SegmentBoundary* boundary = nullptr;
  if (chunk != nullptr) {
    if (s.rows() == 0 || chunk->segment != batch.segment() || !chunk->ends_segment) {
      return std::vector<int32_t>();
    }
    if (s.leaves >= 0) {  // the last segment (a drop at the last layer) only records
      boundary = &s.cache->boundary();
      boundary->segment_ended = true;
      boundary->kept.clear();  // every row, unless the selection below keeps fewer
    }
    n_alive = chunk->segment_rows;
  }
  DropRequest request;  // the drop plan's rule (sparsity/drop_plan.h), as on the GPU
  request.rows = request.rows_min = n_alive;
  request.allow_drop = drop.steps[r].allow_drop;
  request.params = &p;
  if (!Selects(request)) return std::vector<int32_t>();
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  // The request's alive rows of this step are its newest n_alive cache entries.
  const int first_new = kv.n - n_alive;
  if (first_new < 0) return Internal("UniPrefill: the cache holds fewer entries than alive rows");
  const int n_obs = std::min(p.last_n, n_alive);
  if (n_obs > s.rows()) {
    return InvalidArgument("UniPrefill: the segment's last chunk has " +
                           std::to_string(s.rows()) + " rows but the selection reads the last " +
                           std::to_string(n_obs) + " queries; its last chunk must hold them");
  }
  TensorView q_obs = q.Slice0(s.end - n_obs, n_obs);  // f32 [n_obs, Hq, D]
  std::vector<float> importance(kv.n, 0.0f);
  ops::AttentionImportance(ctx, importance.data(), q_obs, kv.k, batch.indices() + s.end - n_obs,
                           kv.index, w.scale);
  if (drop.comm != nullptr) {
    UP_RETURN_IF_ERROR(drop.comm->AllReduce(importance.data(), kv.n, dist::ReduceOp::kSum));
  }
  const auto t1 = Clock::now();
  std::vector<float> candidates(importance.begin() + first_new, importance.end());
  std::vector<int32_t> keep = sparsity::SelectTokens(candidates, p);
  if (drop.stats) {
    drop.stats->scoring_s += std::chrono::duration<double>(t1 - t0).count();
    drop.stats->selection_s += std::chrono::duration<double>(Clock::now() - t1).count();
  }
  if (drop.steps[r].kept) {
    drop.steps[r].kept->push_back({drop.layer, static_cast<int>(keep.size()), n_alive});
  }
  if (chunk != nullptr) {
    if (boundary && static_cast<int>(keep.size()) != n_alive) boundary->kept = std::move(keep);
    return std::vector<int32_t>();
  }
  if (static_cast<int>(keep.size()) == n_alive) return std::vector<int32_t>();
  return keep;
}

// The query rows that keep getting an output after a drop or at the last layer: rows (ascending,
// of `now`) of q f32 [now, qd], of the gate f32 [now, qd] when gated, and of their mask
// coordinates, each replaced by its gathered rows.
void KeepQueryRows(DeviceContext& ctx, const std::vector<int32_t>& rows, int64_t now, int64_t qd,
                   bool gated, Buffer* q_buf, Buffer* gate_buf, std::vector<int32_t>* q_mask) {
  const int64_t kept = static_cast<int64_t>(rows.size());
  const auto gather = [&](Buffer* b) {
    Buffer out(sizeof(float) * std::max<int64_t>(1, kept) * qd);
    ops::GatherRows(ctx, out.View(DType::kF32, {kept, qd}), b->View(DType::kF32, {now, qd}),
                    rows.data());
    *b = std::move(out);
  };
  gather(q_buf);
  if (gated) gather(gate_buf);
  std::vector<int32_t> mask(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) mask[i] = (*q_mask)[rows[i]];
  *q_mask = std::move(mask);
}

}  // namespace

Status AttentionForward(DeviceContext& ctx, const AttentionWeights& w, int layer,
                        PackedBatch& batch, TensorView h, const DropLayer* drop,
                        WindowMode window_mode, Buffer* out, QueryRows queries) {
  const int T = batch.rows();
  const int Hq = w.n_heads, Hkv = w.n_kv_heads, D = w.head_dim;
  const int64_t qd = int64_t(Hq) * D, kvd = int64_t(Hkv) * D;
  const int64_t hidden = h.dim(1);

  // Projections. q f32 [T, Hq, D]; gate f32 [T, Hq * D] when gated; k, v f32 [T, Hkv * D].
  Buffer q_buf(sizeof(float) * T * qd), gate_buf, k_buf(sizeof(float) * T * kvd),
      v_buf(sizeof(float) * T * kvd);
  TensorView q = q_buf.View(DType::kF32, {T, Hq, D});
  if (w.gated_output) {
    Buffer qg(sizeof(float) * T * qd * 2);
    ops::Linear(ctx, qg.View(DType::kF32, {T, 2 * qd}), h, w.q);
    gate_buf = Buffer(sizeof(float) * T * qd);
    const float* src = qg.as<float>();
    float* qo = q_buf.as<float>();
    float* go = gate_buf.as<float>();
    for (int64_t t = 0; t < T; ++t) {
      for (int hh = 0; hh < Hq; ++hh) {
        const float* s = src + (t * Hq + hh) * 2 * D;
        std::memcpy(qo + (t * Hq + hh) * D, s, sizeof(float) * D);
        std::memcpy(go + (t * Hq + hh) * D, s + D, sizeof(float) * D);
      }
    }
  } else {
    ops::Linear(ctx, q_buf.View(DType::kF32, {T, qd}), h, w.q);
  }
  TensorView k2 = k_buf.View(DType::kF32, {T, kvd}), v2 = v_buf.View(DType::kF32, {T, kvd});
  ops::Linear(ctx, k2, h, w.k);
  ops::Linear(ctx, v2, h, w.v);
  if (!w.q_norm.empty()) {
    TensorView qh = q_buf.View(DType::kF32, {int64_t(T) * Hq, D});
    ops::RmsNorm(ctx, qh, qh, w.q_norm.data(), w.norm_eps);
  }
  if (!w.k_norm.empty()) {
    TensorView kh = k_buf.View(DType::kF32, {int64_t(T) * Hkv, D});
    ops::RmsNorm(ctx, kh, kh, w.k_norm.data(), w.norm_eps);
  }
  TensorView k3 = k_buf.View(DType::kF32, {T, Hkv, D});
  ops::Rope(ctx, q, batch.positions(), w.rope_inv_freq.data(), w.rot_dims, w.rope_style);
  ops::Rope(ctx, k3, batch.positions(), w.rope_inv_freq.data(), w.rot_dims, w.rope_style);

  // Cache this step's keys and values, per request.
  for (int r = 0; r < batch.n_seqs(); ++r) {
    const PackedBatch::Seq& s = batch.seq(r);
    if (s.rows() == 0) continue;  // a segment-wise chunk not in this segment
    UP_ASSIGN_OR_RETURN(KvAppendSlot slot,
                        s.cache->AppendKv(layer, s.rows(), batch.positions() + s.begin,
                                          batch.indices() + s.begin));
    StoreKvValues(slot.k.data, slot.k.dtype, k2.row<float>(s.begin), kvd * s.rows());
    StoreKvValues(slot.v.data, slot.v.dtype, v2.row<float>(s.begin), kvd * s.rows());
  }

  // The query rows that get an output, with their masking coordinate in this layer's segment.
  std::vector<int32_t> q_mask(batch.indices(), batch.indices() + T);
  if (window_mode == WindowMode::kPosition && w.window > 0) {
    q_mask.assign(batch.positions(), batch.positions() + T);
  }
  if (drop != nullptr) {
    std::vector<std::vector<int32_t>> keep(batch.n_seqs());
    std::vector<int32_t> rows;  // absolute rows kept
    bool any = false;
    for (int r = 0; r < batch.n_seqs(); ++r) {
      const PackedBatch::Seq& s = batch.seq(r);
      if (s.rows() == 0) continue;
      ContiguousKv kv;
      ViewKv(s.cache->Layer(layer), Hkv, D, &kv);
      UP_ASSIGN_OR_RETURN(keep[r], SelectRows(ctx, w, batch, r, q, kv, *drop));
      if (keep[r].empty()) {
        for (int i = s.begin; i < s.end; ++i) rows.push_back(i);
      } else {
        any = true;
        for (int32_t i : keep[r]) rows.push_back(s.begin + i);
      }
    }
    const auto t_compact = std::chrono::steady_clock::now();
    if (any) KeepQueryRows(ctx, rows, T, qd, w.gated_output, &q_buf, &gate_buf, &q_mask);
    batch.NextSegment(ctx, keep);
    if (drop->stats) {
      drop->stats->compaction_s +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t_compact).count();
    }
  }

  // The last layer: each request's last row only (every row's key and value is cached above; at
  // a drop layer, after its selection). A step of one row per request (decodes) has none to drop.
  bool more_than_last = false;
  for (int r = 0; r < batch.n_seqs(); ++r) more_than_last |= batch.seq(r).rows() > 1;
  if (queries == QueryRows::kLastOfEach && more_than_last) {
    const int64_t now = batch.rows();  // the query rows so far (a drop's kept ones)
    const std::vector<int32_t> rows = batch.KeepLastRows(ctx);
    KeepQueryRows(ctx, rows, now, qd, w.gated_output, &q_buf, &gate_buf, &q_mask);
  }

  // Attention per request over its cached keys. attn f32 [T', Hq, D].
  const int Tk = batch.rows();
  q = q_buf.View(DType::kF32, {Tk, Hq, D});
  Buffer attn_buf(sizeof(float) * Tk * qd);
  TensorView attn = attn_buf.View(DType::kF32, {Tk, Hq, D});
  ops::AttentionParams ap;
  ap.scale = w.scale;
  ap.window = w.window;
  ap.bf16_tiles = w.q.bf16_prefill_gemm;  // the bf16 prefill mode covers attention too
  // Every request in one call: a decode request is one work item, so the step's requests share
  // the threads instead of running one after another on one of them.
  std::vector<KvRuns> kvs(batch.n_seqs());
  std::vector<ops::PagedAttentionSeq> seqs;
  for (int r = 0; r < batch.n_seqs(); ++r) {
    const PackedBatch::Seq& s = batch.seq(r);
    if (s.rows() == 0) continue;
    ViewKvRuns(s.cache->Layer(layer), Hkv, D,
               window_mode == WindowMode::kPosition && w.window > 0, &kvs[r]);
    seqs.push_back({attn.Slice0(s.begin, s.rows()), q.Slice0(s.begin, s.rows()), &kvs[r].runs,
                    q_mask.data() + s.begin, kvs[r].mask});
  }
  ops::AttentionPagedBatch(ctx, seqs, ap);
  if (w.window > 0) {  // sliding layer: what falls out of the window is never read again
    for (int r = 0; r < batch.n_seqs(); ++r) {
      if (batch.seq(r).rows() > 0) batch.seq(r).cache->TrimWindow(layer);
    }
  }
  if (w.gated_output) {
    float* a = attn_buf.as<float>();
    const float* g = gate_buf.as<float>();
    const int64_t total = int64_t(Tk) * qd;
    ctx.pool().ParallelFor(total, 4096, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) a[i] *= 1.0f / (1.0f + std::exp(-g[i]));
    });
  }
  *out = Buffer(sizeof(float) * Tk * hidden);
  ops::Linear(ctx, out->View(DType::kF32, {Tk, hidden}), attn_buf.View(DType::kF32, {Tk, qd}),
              w.o);
  return OkStatus();
}

}  // namespace uniprefill
