// UniPrefill drops of the CUDA backend (cuda_backend_impl.h), at a drop layer after its keys are
// cached: score the last n queries' attention (AttentionImportance; over the step's own keys for a
// fresh prompt, over every cached key of the layer for a request whose cache holds tokens, as the
// CPU backend does), select (SelectTokens) among the step's rows (a segment-wise chunk that ends
// its segment: among all of the segment's rows, its own passing whole), then
// compact the residual and the kept queries. SyncedDrop learns the kept rows by one host sync and
// lays the next segment out exactly (top-p); BoundedDrop never syncs (fixed ratio: capacities,
// padding rows and device-side counts, ops/cuda/cuda_uniprefill.h), and ReconcileBoundedCaches
// settles the caches and kept records after the forward's final sync.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/device_views.h"
#include "ops/cuda/cuda_dense_ops.h"
#include "ops/cuda/cuda_uniprefill.h"
#include "sparsity/drop_plan.h"

namespace uniprefill::cuda_backend {

namespace oc = ops::cuda;

namespace {

// The host's view of each request at this drop (sparsity/drop_plan.h); a bounded segment's
// capacity stands in for its length (a shorter true count keeps everything on the device).
std::vector<DropRequest> DropRequests(const std::vector<Req>& reqs, const DropLayer& drop,
                                      int segment) {
  std::vector<DropRequest> out;
  for (const Req& q : reqs) {
    const SequenceStep& step = drop.steps[q.step];
    const UniPrefillConfig* config = step.selection ? step.selection : drop.config;
    DropRequest d;
    d.rows = q.rows();
    d.rows_min = q.n_min;
    d.allow_drop = step.allow_drop;
    d.cache_holds_tokens = !q.fresh;
    d.fixed_ratio = config->selection.mode == sparsity::SelectionMode::kFixedRatio;
    // (A drop at the last layer opens no segment: nothing follows to number.)
    const bool next_exists = segment + 1 < q.cache->layout().n_segments;
    d.next_base = next_exists ? q.cache->segment_length(segment + 1) : 0;
    d.params = &config->selection;
    out.push_back(d);
  }
  return out;
}

// Which requests select (the others pass through to the next segment whole).
struct Selecting {
  std::vector<DropRequest> requests;                     // [B]
  std::vector<char> selects;                             // [B]
  std::vector<const sparsity::SelectionParams*> params;  // [B]: each request's selection
  // [B] the rows a selecting request chooses among: its own, or for a segment's last chunk every
  // row of the segment (its newest cache entries), whose rows then pass whole.
  std::vector<int> candidates;
  std::vector<char> ends_segment;  // [B] a chunk in its segment's last chunk, at its end
  bool any = false;
  bool compacts = false;     // some request other than a chunk selects (its rows shrink)
  size_t scratch_bytes = 0;  // SelectTokens scratch for the largest selecting request
};

Selecting SelectingRequests(const std::vector<Req>& reqs, const DropLayer& drop, int segment) {
  Selecting out;
  out.requests = DropRequests(reqs, drop, segment);
  for (size_t r = 0; r < reqs.size(); ++r) {
    DropRequest d = out.requests[r];
    const SegmentChunk* chunk = reqs[r].chunk;
    // A chunk passes its drop layer whole; only the segment's last chunk selects, over all of the
    // segment's rows (model/blocks/attention_block.cc, SelectRows).
    const bool ends = chunk != nullptr && reqs[r].rows() > 0 && chunk->segment == segment &&
                      chunk->ends_segment;
    if (chunk != nullptr) d.rows = d.rows_min = ends ? chunk->segment_rows : 0;
    const bool selects = Selects(d);
    out.selects.push_back(selects ? 1 : 0);
    out.params.push_back(d.params);
    out.candidates.push_back(selects ? d.rows : 0);
    out.ends_segment.push_back(ends ? 1 : 0);
    if (!selects) continue;
    out.any = true;
    out.compacts = out.compacts || chunk == nullptr;
    out.scratch_bytes =
        std::max(out.scratch_bytes, oc::SelectTokensScratchBytes(d.rows, *d.params));
  }
  return out;
}

}  // namespace

Status CudaBackend::ScoreOverCache(int layer, const Req& req, int candidates,
                                   const TensorView& q_obs, const int32_t* q_coord,
                                   const AttentionWeights& a, float* importance) {
  // Every key this layer holds for the request (its earlier tokens and this step's rows, all
  // appended before the drop), gathered from the paged pool with its alive index: the CPU
  // backend's scoring (model/blocks/attention_block.cc). The candidates are the newest entries;
  // their importance is what the selection reads.
  cudaStream_t stream = ctx_.cuda().stream();
  const int count = req.cache->count(layer);
  if (candidates > count) {
    return Internal("UniPrefill scoring: the cache holds fewer entries than candidate rows");
  }
  const int bt = pool_->block_tokens(), kvd = pool_->kv_dim();
  const TensorView pool = pool_->kv();  // K rows: block * stride[0] + row * stride[2] (planar)
  const int64_t block_rows = pool.stride[0] / kvd, row_rows = pool.stride[2] / kvd;
  const std::vector<int32_t>& blocks = req.cache->blocks(layer);
  std::vector<int32_t> k_rows(count), c_rows(count);
  for (int i = 0; i < count; ++i) {
    const int32_t block = blocks[i / bt], row = i % bt;
    if (block < 0) {
      return Internal("UniPrefill scoring: a page of a full-attention layer was released");
    }
    k_rows[i] = static_cast<int32_t>(block * block_rows + row * row_rows);  // the K plane
    c_rows[i] = 2 * bt * block + bt + row;  // the alive index of meta [blocks, 2, bt]
  }
  UP_ASSIGN_OR_RETURN(const int32_t* d_k_rows, staging_.Put(k_rows, stream));
  UP_ASSIGN_OR_RETURN(const int32_t* d_c_rows, staging_.Put(c_rows, stream));
  UP_RETURN_IF_ERROR(Grow(cache_keys_, static_cast<size_t>(count) * kvd * 2));
  UP_RETURN_IF_ERROR(Grow(cache_coords_, static_cast<size_t>(count) * 4));
  UP_RETURN_IF_ERROR(Grow(cache_importance_, static_cast<size_t>(count) * 4));
  const int64_t k_rows_total = int64_t{bt} * pool_->num_blocks();
  const int64_t meta_rows = int64_t{2} * bt * pool_->num_blocks();
  oc::GatherRows(ctx_, cache_keys_.View(DType::kBF16, {count, kvd}),
                 Rows(pool.data, DType::kBF16, k_rows_total, kvd, kvd), d_k_rows);
  oc::GatherRows(ctx_, Rows(cache_coords_.data(), DType::kI32, count, 1, 1),
                 Rows(pool_->meta(), DType::kI32, meta_rows, 1, 1), d_c_rows);
  UP_CUDA_CHECK(
      cudaMemsetAsync(cache_importance_.data(), 0, static_cast<size_t>(count) * 4, stream));
  oc::AttentionImportance(ctx_, cache_importance_.as<float>(), q_obs,
                          Heads(cache_keys_.data(), count, a.n_kv_heads, a.head_dim, kvd), q_coord,
                          cache_coords_.as<int32_t>(), a.scale);
  UP_CUDA_CHECK(cudaMemcpyAsync(importance, cache_importance_.as<float>() + (count - candidates),
                                static_cast<size_t>(candidates) * 4, cudaMemcpyDeviceToDevice,
                                stream));
  return OkStatus();
}

Status CudaBackend::SyncedDrop(const AttentionLayer& L, std::vector<Req>& reqs,
                             const DropLayer& drop, int segment, int64_t T, KeptQueries* kq) {
  const AttentionWeights& a = *L.host;
  cudaStream_t stream = ctx_.cuda().stream();
  const int64_t H = cfg_.hidden, Hq = a.n_heads, Hkv = a.n_kv_heads, D = a.head_dim;
  const int64_t qd = Hq * D, width = L.qkv.out;
  const int64_t q_cols = a.gated_output ? 2 * qd : qd;  // q | gate
  const int B = static_cast<int>(reqs.size());
  const int32_t* k_coord = kq->coord;  // the drop layer's mask coordinates, pre-compaction
  std::vector<int>& q_begin = kq->begin;
  std::vector<int>& q_len = kq->len;
  std::pair<cudaEvent_t, cudaEvent_t> ev_score{}, ev_select{}, ev_compact{};
  auto mark = [&](std::pair<cudaEvent_t, cudaEvent_t>& p, bool first) {
    return Mark(first ? &p.first : &p.second);
  };
  const Selecting selecting = SelectingRequests(reqs, drop, segment);
  const std::vector<char>& eligible = selecting.selects;
  const std::vector<int>& candidates = selecting.candidates;
  const std::vector<const sparsity::SelectionParams*>& params = selecting.params;
  const bool any = selecting.any;
  // Where each selecting request's importance and kept rows lie: at its own rows, or for a
  // segment's last chunk (more candidates than rows) after all T rows.
  std::vector<int64_t> at(B);
  int64_t space = T;
  for (int r = 0; r < B; ++r) {
    at[r] = reqs[r].begin;
    if (eligible[r] && reqs[r].chunk != nullptr) {
      at[r] = space;
      space += candidates[r];
    }
  }
  // A segment's last chunk ends the segment here: its rows, leaving next, close the boundary's
  // collected rows (all kept, unless the selection below keeps fewer).
  for (int r = 0; r < B; ++r) {
    if (!selecting.ends_segment[r] || reqs[r].leaves < 0) continue;
    SegmentBoundary& b = reqs[r].cache->boundary();
    b.segment_ended = true;
    b.kept.clear();
  }
  if (any) {
    UP_RETURN_IF_ERROR(Grow(importance_, static_cast<size_t>(space) * 4));
    UP_RETURN_IF_ERROR(Grow(kept_rows_, static_cast<size_t>(space) * 4));
    UP_RETURN_IF_ERROR(mark(ev_score, true));
    UP_CUDA_CHECK(cudaMemsetAsync(importance_.data(), 0, space * 4, stream));
  }
  for (int r = 0; r < B && any; ++r) {
    if (!eligible[r]) continue;
    const int n = reqs[r].rows();
    const int64_t n_obs = std::min<int64_t>(params[r]->last_n, candidates[r]);
    if (n_obs > n) {
      return InvalidArgument("UniPrefill: the segment's last chunk has " + std::to_string(n) +
                             " rows but the selection reads the last " + std::to_string(n_obs) +
                             " queries; its last chunk must hold them");
    }
    const int64_t b = reqs[r].begin;
    const TensorView q_obs = Heads(Bf16(qkv_, (b + n - n_obs) * width), n_obs, Hq, D, width);
    if (reqs[r].fresh && candidates[r] == n) {  // its keys are the step's own rows
      oc::AttentionImportance(ctx_, importance_.as<float>() + at[r], q_obs,
                              Heads(Bf16(qkv_, b * width + q_cols), n, Hkv, D, width),
                              d_index_ + b + n - n_obs, d_index_ + b, a.scale);
    } else {
      UP_RETURN_IF_ERROR(ScoreOverCache(drop.layer, reqs[r], candidates[r], q_obs,
                                        d_index_ + b + n - n_obs, a,
                                        importance_.as<float>() + at[r]));
    }
  }
  std::pair<int32_t*, int32_t*> counts{}, kept{};
  if (any && drop.comm != nullptr) {
    // Tensor parallel: each rank scored with its heads; every rank selects from the same sums.
    UP_RETURN_IF_ERROR(drop.comm->AllReduceDevice(importance_.data(), space, DType::kF32, stream));
  }
  if (any) {
    UP_RETURN_IF_ERROR(mark(ev_score, false));
    UP_RETURN_IF_ERROR(mark(ev_select, true));
    UP_RETURN_IF_ERROR(Grow(select_scratch_, selecting.scratch_bytes));
    for (int r = 0; r < B; ++r) {
      if (!eligible[r]) continue;
      oc::SelectTokens(ctx_, kept_rows_.as<int32_t>() + at[r], kept_count_.as<int32_t>() + r,
                       importance_.as<float>() + at[r], candidates[r], *params[r],
                       select_scratch_.data(), select_scratch_.size());
    }
    // The one host sync of a drop layer: the kept rows decide every later shape.
    UP_ASSIGN_OR_RETURN(counts, staging_.Scratch(B));
    UP_ASSIGN_OR_RETURN(kept, staging_.Scratch(space));
    UP_CUDA_CHECK(cudaMemcpyAsync(counts.second, kept_count_.data(), B * 4,
                                  cudaMemcpyDeviceToHost, stream));
    UP_CUDA_CHECK(cudaMemcpyAsync(kept.second, kept_rows_.data(), space * 4,
                                  cudaMemcpyDeviceToHost, stream));
    UP_RETURN_IF_ERROR(WaitStream(stream));
    if (drop.stats) ++drop.stats->drop_host_syncs;
    UP_RETURN_IF_ERROR(mark(ev_select, false));
    UP_RETURN_IF_ERROR(mark(ev_compact, true));
  }

  // The next segment on the host (the plan): kept rows, their positions, their new alive indices.
  std::vector<std::vector<int32_t>> keep(B);
  for (int r = 0; r < B; ++r) {
    Req& q_req = reqs[r];
    q_req.added[segment] += q_req.rows();
    if (!eligible[r]) continue;
    const int c = counts.second[r];
    std::vector<int32_t> list(kept.second + at[r], kept.second + at[r] + c);
    const SequenceStep& step = drop.steps[q_req.step];
    if (step.kept) step.kept->push_back({drop.layer, c, candidates[r]});
    if (q_req.chunk != nullptr) {  // its rows pass whole; the boundary keeps `list` of them
      if (q_req.leaves >= 0 && c != candidates[r]) {
        q_req.cache->boundary().kept = std::move(list);
      }
      continue;
    }
    keep[r] = std::move(list);
    // A selection that keeps every row passes through (the plan's empty list).
    if (c == q_req.rows()) keep[r].clear();
  }
  const SegmentLayout next = PlanExactSegment(selecting.requests, keep);
  const std::vector<int32_t>& gather = next.source;
  for (int r = 0; r < B; ++r) {
    Req& q_req = reqs[r];
    const int first = next.begin[r];
    std::vector<int32_t> pos(next.rows[r]);
    for (int i = 0; i < next.rows[r]; ++i) pos[i] = q_req.pos[gather[first + i] - q_req.begin];
    q_len[r] = next.rows[r];
    q_begin[r] = first;
    q_req.begin = first;
    q_req.SetExactRows(std::move(pos), std::vector<int32_t>(next.index.begin() + first,
                                                            next.index.begin() + first +
                                                                next.rows[r]));
  }
  const int64_t t_out = next.total;
  kq->total = t_out;
  if (!selecting.compacts) {  // nothing dropped: same rows, renumbered for the next segment
    UP_RETURN_IF_ERROR(UploadSegment(reqs));
    if (any) {  // only segments' last chunks selected
      UP_RETURN_IF_ERROR(mark(ev_compact, false));
      if (drop_events_) {
        drop_events_->push_back(ev_score);
        drop_events_->push_back(ev_select);
        drop_events_->push_back(ev_compact);
      }
    }
    return OkStatus();
  }
  {
    UP_ASSIGN_OR_RETURN(const int32_t* d_gather, staging_.Put(gather, stream));
    // Compaction: the residual, the kept query (and gate) rows, their old mask coordinates.
    const int nxt = 1 - cur_;
    oc::GatherRows(ctx_, residual_[nxt].View(DType::kBF16, {t_out, H}),
                   residual_[cur_].View(DType::kBF16, {T, H}), d_gather);
    cur_ = nxt;
    oc::GatherRows(ctx_, q_kept_.View(DType::kBF16, {t_out, q_cols}),
                   Rows(Bf16(qkv_), DType::kBF16, T, q_cols, width), d_gather);
    UP_ASSIGN_OR_RETURN(auto coord_kept, staging_.Scratch(t_out));
    oc::GatherRows(ctx_, Rows(coord_kept.first, DType::kI32, t_out, 1, 1),
                   Rows(const_cast<int32_t*>(k_coord), DType::kI32, T, 1, 1), d_gather);
    kq->coord = coord_kept.first;
    kq->rows = Heads(Bf16(q_kept_), t_out, Hq, D, q_cols);
    UP_RETURN_IF_ERROR(UploadSegment(reqs));  // the next segment's positions and indices
    UP_RETURN_IF_ERROR(mark(ev_compact, false));
    if (drop_events_) {
      drop_events_->push_back(ev_score);
      drop_events_->push_back(ev_select);
      drop_events_->push_back(ev_compact);
    }
    kq->compacted = true;
  }
  return OkStatus();
}

Status CudaBackend::Mark(cudaEvent_t* event) {
  if (!drop_events_) return OkStatus();
  UP_CUDA_CHECK(cudaEventCreate(event));
  UP_CUDA_CHECK(cudaEventRecord(*event, ctx_.cuda().stream()));
  return OkStatus();
}

Status CudaBackend::BoundedDrop(const AttentionLayer& L, std::vector<Req>& reqs,
                              const DropLayer& drop, int segment, int64_t T, KeptQueries* kq) {
  const AttentionWeights& a = *L.host;
  cudaStream_t stream = ctx_.cuda().stream();
  const int64_t H = cfg_.hidden, Hq = a.n_heads, Hkv = a.n_kv_heads, D = a.head_dim;
  const int64_t qd = Hq * D, width = L.qkv.out;
  const int64_t q_cols = a.gated_output ? 2 * qd : qd;  // q | gate
  const int B = static_cast<int>(reqs.size());
  std::pair<cudaEvent_t, cudaEvent_t> ev_score{}, ev_select{}, ev_compact{};

  const Selecting selecting = SelectingRequests(reqs, drop, segment);
  const std::vector<const sparsity::SelectionParams*>& params = selecting.params;
  for (int r = 0; r < B; ++r) {
    if (selecting.selects[r] && !reqs[r].fresh) {
      return Internal("a sync-free drop got a request whose cache holds tokens (Begin's choice)");
    }
  }
  std::vector<int32_t> pass(B);  // device flags for CompactSegments: 1 = kept whole
  for (int r = 0; r < B; ++r) pass[r] = selecting.selects[r] ? 0 : 1;
  UP_RETURN_IF_ERROR(Grow(select_scratch_, selecting.scratch_bytes));
  UP_RETURN_IF_ERROR(Mark(&ev_score.first));
  const int32_t* counts = d_counts_;
  UP_ASSIGN_OR_RETURN(auto new_counts, staging_.Scratch(B));
  // Requests that pass through keep their counts; the selections overwrite the others'.
  UP_CUDA_CHECK(cudaMemcpyAsync(new_counts.first, counts, B * 4, cudaMemcpyDeviceToDevice, stream));
  UP_CUDA_CHECK(cudaMemsetAsync(importance_.data(), 0, T * 4, stream));
  for (int r = 0; r < B; ++r) {
    if (pass[r]) continue;
    // The observation queries: the last n true rows (count >= S + n > n for a selecting request).
    const int n_obs = params[r]->last_n;
    const int64_t b = reqs[r].begin;
    UP_ASSIGN_OR_RETURN(auto obs, staging_.Scratch(2 * static_cast<size_t>(n_obs)));
    int32_t* obs_rows = obs.first;
    int32_t* obs_coord = obs.first + n_obs;
    oc::SegmentTailRows(ctx_, obs_rows, d_cu_ + r, counts + r, 1, n_obs);
    oc::GatherRows(ctx_, q_kept_.View(DType::kBF16, {n_obs, qd}),
                   Rows(Bf16(qkv_), DType::kBF16, T, qd, width), obs_rows);
    oc::GatherRows(ctx_, Rows(obs_coord, DType::kI32, n_obs, 1, 1),
                   Rows(const_cast<int32_t*>(d_index_), DType::kI32, T, 1, 1), obs_rows);
    oc::AttentionImportance(ctx_, importance_.as<float>() + b,
                            Heads(Bf16(q_kept_), n_obs, Hq, D, qd),
                            Heads(Bf16(qkv_, b * width + q_cols), reqs[r].rows(), Hkv, D, width),
                            obs_coord, d_index_ + b, a.scale);
  }
  if (drop.comm != nullptr) {  // as SyncedDrop
    UP_RETURN_IF_ERROR(drop.comm->AllReduceDevice(importance_.data(), T, DType::kF32, stream));
  }
  UP_RETURN_IF_ERROR(Mark(&ev_score.second));
  UP_RETURN_IF_ERROR(Mark(&ev_select.first));
  for (int r = 0; r < B; ++r) {
    if (pass[r]) continue;
    oc::SelectTokens(ctx_, kept_rows_.as<int32_t>() + reqs[r].begin, new_counts.first + r,
                     importance_.as<float>() + reqs[r].begin, reqs[r].rows(), *params[r],
                     select_scratch_.data(), select_scratch_.size(), counts + r);
  }
  // The counts for the host's records, read after the forward's final sync.
  UP_CUDA_CHECK(cudaMemcpyAsync(d_kept_hist_ + static_cast<size_t>(segment) * B, new_counts.first,
                                B * 4, cudaMemcpyDeviceToDevice, stream));
  UP_RETURN_IF_ERROR(Mark(&ev_select.second));
  UP_RETURN_IF_ERROR(Mark(&ev_compact.first));

  // The next segment's layout from capacities alone (the plan): no sync.
  const SegmentLayout next = PlanBoundedSegment(selecting.requests);
  std::vector<int32_t> cu{0}, base(B);
  max_rows_ = 0;
  for (int r = 0; r < B; ++r) {
    Req& q = reqs[r];
    base[r] = selecting.requests[r].next_base;
    if (next.selected[r]) {
      q.n_min = next.rows_min[r];
      q.n = next.rows[r];
      q.exact = false;
      q.pos.clear();
      q.index.clear();
      q.selected_at.push_back(segment);
    } else if (q.exact) {  // kept whole: the same rows, renumbered for the next segment
      for (int i = 0; i < q.n; ++i) q.index[i] = base[r] + i;
    }
    kq->begin[r] = next.begin[r];
    kq->len[r] = q.n;
    q.begin = next.begin[r];
    cu.push_back(next.begin[r] + next.rows[r]);
    max_rows_ = std::max(max_rows_, q.n);
  }
  const int64_t t_out = cu.back();
  UP_ASSIGN_OR_RETURN(const int32_t* d_cu_next, staging_.Put(cu, stream));
  UP_ASSIGN_OR_RETURN(const int32_t* d_base, staging_.Put(base, stream));
  UP_ASSIGN_OR_RETURN(const int32_t* d_pass, staging_.Put(pass, stream));
  UP_ASSIGN_OR_RETURN(auto source, staging_.Scratch(t_out));
  UP_ASSIGN_OR_RETURN(auto new_pos, staging_.Scratch(t_out));
  UP_ASSIGN_OR_RETURN(auto new_index, staging_.Scratch(t_out));
  UP_ASSIGN_OR_RETURN(auto coord_kept, staging_.Scratch(t_out));
  oc::CompactSegments(ctx_, source.first, new_pos.first, kept_rows_.as<int32_t>(),
                      new_counts.first, d_cu_, d_cu_next, d_pos_, B, t_out, new_index.first,
                      d_base, d_pass);
  // The residual and the kept query (and gate) rows; padding rows become zeros.
  const int nxt = 1 - cur_;
  oc::GatherRows(ctx_, residual_[nxt].View(DType::kBF16, {t_out, H}),
                 residual_[cur_].View(DType::kBF16, {T, H}), source.first);
  cur_ = nxt;
  oc::GatherRows(ctx_, q_kept_.View(DType::kBF16, {t_out, q_cols}),
                 Rows(Bf16(qkv_), DType::kBF16, T, q_cols, width), source.first);
  // The kept queries' coordinates in the drop layer's (old) frame; padding rows at
  // kPaddingPosition, so each segment's query coordinates stay ascending.
  oc::GatherPositions(ctx_, coord_kept.first, kq->coord, source.first, t_out);
  kq->coord = coord_kept.first;
  kq->rows = Heads(Bf16(q_kept_), t_out, Hq, D, q_cols);
  kq->total = t_out;
  kq->compacted = true;
  d_pos_ = new_pos.first;
  d_index_ = new_index.first;
  d_cu_ = d_cu_next;
  d_counts_ = new_counts.first;
  UP_RETURN_IF_ERROR(Mark(&ev_compact.second));
  if (drop_events_) {
    drop_events_->push_back(ev_score);
    drop_events_->push_back(ev_select);
    drop_events_->push_back(ev_compact);
  }
  return OkStatus();
}

void CudaBackend::ReconcileBoundedCaches(std::vector<Req>& reqs,
                                       std::span<const SequenceStep> steps,
                                       const std::vector<int>& drops) {
  const int B = static_cast<int>(reqs.size());
  const int n_segments = static_cast<int>(drops.size()) + 1;
  for (int r = 0; r < B; ++r) {
    Req& q = reqs[r];
    // True rows per segment: the step's rows, then the count after each drop.
    std::vector<int> rows(n_segments);
    rows[0] = q.first_rows;
    for (int s = 1; s < n_segments; ++s) {
      rows[s] = h_kept_hist_[static_cast<size_t>(s - 1) * B + r];
    }
    // (A drop at the last layer opens no segment that holds layers: no entry of `added`.)
    for (int s = 0; s < n_segments && s < static_cast<int>(q.added.size()); ++s) {
      q.added[s] = rows[s];
    }
    for (size_t li = 0; li < q.appended.size(); ++li) {
      const int extra = q.appended[li] - rows[layer_segment_[li]];
      if (q.appended[li] > 0 && extra > 0) q.cache->DropTail(static_cast<int>(li), extra);
    }
    const SequenceStep& step = steps[q.step];
    if (step.kept) {
      // As the CPU records: only drops where the true alive count exceeded S + n (a capacity
      // above it does not mean the request selected there).
      const sparsity::SelectionParams& p =
          (step.selection ? step.selection : uniprefill_)->selection;
      for (int s : q.selected_at) {
        if (rows[s] > p.sink + p.last_n) step.kept->push_back({drops[s], rows[s + 1], rows[s]});
      }
    }
  }
}

}  // namespace uniprefill::cuda_backend
