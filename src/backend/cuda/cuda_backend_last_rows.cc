// The last layer's queries on the CUDA backend (QueryRows::kLastOfEach, layer_backend.h): once
// every row's key and value is cached, only each request's last row goes on (its query, its
// residual row), the others end here; the attention then runs those rows as decodes over the
// cache (AttentionMixer), the FFN and the final norm on one row per request.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
// (after the context: cuda_backend_impl.h's inline members use it)
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/device_views.h"
#include "ops/cuda/cuda_dense_ops.h"
#include "ops/cuda/cuda_uniprefill.h"

namespace uniprefill::cuda_backend {

namespace oc = ops::cuda;

Status CudaBackend::KeepLastRows(const AttentionLayer& L, std::vector<Req>& reqs, int segment,
                                 KeptQueries* kq) {
  const AttentionWeights& a = *L.host;
  cudaStream_t stream = ctx_.cuda().stream();
  const int64_t H = cfg_.hidden, Hq = a.n_heads, D = a.head_dim;
  const int64_t qd = Hq * D;
  const int64_t q_cols = a.gated_output ? 2 * qd : qd;  // q | gate
  const int64_t now = kq->total;                        // the query rows so far
  const int B = static_cast<int>(reqs.size());
  // Of those, each request's last: known on the host, or in a sync-free forward (capacities with
  // padding rows after the true ones) each request's last true row, found on the device.
  std::vector<int32_t> gather;
  for (int r = 0; r < B; ++r) {
    Req& q = reqs[r];
    // Every row was cached: Finish must not count the one row left again. (A drop at the last
    // layer opens no segment that holds layers: nothing to count there. A sync-free forward's
    // counts are settled by ReconcileBoundedCaches.)
    if (segment < static_cast<int>(q.added.size())) q.added[segment] += q.rows();
    kq->begin[r] = static_cast<int>(gather.size());
    kq->len[r] = q.rows() > 0 ? 1 : 0;
    if (q.rows() > 0) {
      gather.push_back(q.begin + q.rows() - 1);
      if (q.exact) {
        q.SetExactRows({q.pos.back()}, {q.index.back()});
      } else {
        q.n = q.n_min = 1;  // its true last row (its position stays on the device)
      }
    } else {
      q.SetExactRows({}, {});
    }
    q.begin = kq->begin[r];
  }
  segment_rows_counted_ = true;
  const int64_t t_out = static_cast<int64_t>(gather.size());
  const int32_t* d_gather = nullptr;
  if (bounded_) {  // every request has rows (no segment-wise chunks)
    UP_ASSIGN_OR_RETURN(auto last, staging_.Scratch(B));
    oc::SegmentTailRows(ctx_, last.first, d_cu_, d_counts_, B, 1);
    d_gather = last.first;
  } else {
    UP_ASSIGN_OR_RETURN(d_gather, staging_.Put(gather, stream));
  }
  // The residual, the query (and gate) rows and their mask coordinates of the layer's keys
  // (a sync-free cache's padding entries sit at kPaddingPosition: hidden from every real row).
  const int nxt = 1 - cur_;
  oc::GatherRows(ctx_, residual_[nxt].View(DType::kBF16, {t_out, H}),
                 residual_[cur_].View(DType::kBF16, {now, H}), d_gather);
  cur_ = nxt;
  // (Through q_last_: the rows may come from q_kept_ itself, after a drop.)
  oc::GatherRows(ctx_, q_last_.View(DType::kBF16, {t_out, q_cols}),
                 Rows(kq->rows.data, DType::kBF16, now, q_cols, kq->rows.stride[0]), d_gather);
  UP_CUDA_CHECK(cudaMemcpyAsync(q_kept_.data(), q_last_.data(), t_out * q_cols * 2,
                                cudaMemcpyDeviceToDevice, stream));
  UP_ASSIGN_OR_RETURN(auto coord, staging_.Scratch(t_out));
  oc::GatherRows(ctx_, Rows(coord.first, DType::kI32, t_out, 1, 1),
                 Rows(const_cast<int32_t*>(kq->coord), DType::kI32, now, 1, 1), d_gather);
  kq->coord = coord.first;
  kq->rows = Heads(Bf16(q_kept_), t_out, Hq, D, q_cols);
  kq->total = t_out;
  kq->compacted = true;
  if (!bounded_) return UploadSegment(reqs);  // positions, indices and cu_seqlens, as a drop
  // Sync-free: one true row per request from here on (the head's SegmentTailRows reads these).
  std::vector<int32_t> cu(B + 1), ones(B, 1);
  for (int r = 0; r <= B; ++r) cu[r] = r;
  UP_ASSIGN_OR_RETURN(d_cu_, staging_.Put(cu, stream));
  UP_ASSIGN_OR_RETURN(d_counts_, staging_.Put(ones, stream));
  linear_batch_ = B;
  max_rows_ = 1;
  return OkStatus();
}

}  // namespace uniprefill::cuda_backend
