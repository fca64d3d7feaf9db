// Segment-wise chunked prefill on the CUDA backend (cuda_backend_impl.h; the contract is
// model/packed_batch.h, SegmentChunk, and the CPU backend's ExchangeSegmentRows): at drop layer
// d_k, after its attention and post norm, the rows of chunks that end segment k - 1 leave for their
// caches' boundaries (device bf16 rows, DeviceBoundaryRows) and chunks of segment k enter from
// theirs; the residual, positions, alive indices and cu_seqlens are laid out again for the new
// rows. The selection itself (a segment's last chunk over all of the segment's rows) is
// SyncedDrop's; forwards with chunks never run the sync-free drops or graph capture.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/device_views.h"
#include "ops/cuda/cuda_dense_ops.h"

namespace uniprefill::cuda_backend {

namespace oc = ops::cuda;

namespace {

Result<std::unique_ptr<DeviceBoundaryRows>> NewBoundaryRows(int capacity, int64_t hidden) {
  auto rows = std::make_unique<DeviceBoundaryRows>();
  const size_t bytes = static_cast<size_t>(std::max(capacity, 1)) * hidden * 2;
  Result<DeviceBuffer> x = DeviceBuffer::Allocate(bytes);
  if (!x.ok()) {
    return ResourceExhausted("a segment-wise chunked prefill needs " +
                             std::to_string(bytes >> 20) + " MiB of GPU memory for " +
                             std::to_string(capacity) + " rows between segments: " +
                             x.status().message());
  }
  rows->x = std::move(*x);
  rows->capacity = capacity;
  return rows;
}

DeviceBoundaryRows& DeviceRows(const BoundaryRows& b) {
  return static_cast<DeviceBoundaryRows&>(*b.data);
}

}  // namespace

void CudaBackend::Retire(std::unique_ptr<BoundaryStorage> data) {
  if (data) retired_.push_back(std::move(static_cast<DeviceBoundaryRows&>(*data).x));
}

Status CudaBackend::EndSegment(SegmentBoundary& b) {
  const int64_t H = cfg_.hidden;
  BoundaryRows& out = b.collected;
  if (!b.kept.empty()) {
    const int n = static_cast<int>(b.kept.size());
    UP_ASSIGN_OR_RETURN(std::unique_ptr<DeviceBoundaryRows> kept, NewBoundaryRows(n, H));
    UP_ASSIGN_OR_RETURN(const int32_t* d_rows, staging_.Put(b.kept, ctx_.cuda().stream()));
    // bf16 [kept, H] = the collected rows [segment rows, H] at b.kept.
    oc::GatherRows(ctx_, Rows(kept->x.data(), DType::kBF16, n, H, H),
                   Rows(DeviceRows(out).x.data(), DType::kBF16, out.rows(), H, H), d_rows);
    std::vector<int32_t> pos(n);
    for (int i = 0; i < n; ++i) pos[i] = out.pos[b.kept[i]];
    Retire(std::move(out.data));
    out.data = std::move(kept);
    out.pos = std::move(pos);
  }
  out.consumed = 0;
  Retire(std::move(b.ready.data));  // read to the end by now
  b.ready = std::move(out);
  b.collected.Clear();
  b.kept.clear();
  b.segment_ended = false;
  return OkStatus();
}

Status CudaBackend::ExchangeSegmentRows(int segment) {
  std::vector<Req>& reqs = reqs_;
  const auto leaves = [&](const Req& q) { return q.leaves >= 0 && q.leaves + 1 == segment; };
  const auto enters = [&](const Req& q) { return segment > 0 && q.enters == segment; };
  if (std::none_of(reqs.begin(), reqs.end(),
                   [&](const Req& q) { return leaves(q) || enters(q); })) {
    return OkStatus();
  }
  cudaStream_t stream = ctx_.cuda().stream();
  const int64_t H = cfg_.hidden;
  const size_t row_bytes = static_cast<size_t>(H) * 2;
  // The drop layer's attention output joins the residual first: the leaving rows carry it (as
  // the next NormInput would add it; Add then RmsNorm rounds as AddRmsNorm does).
  uint16_t* x = Bf16(residual_[cur_]);  // bf16 [rows_, H]
  if (has_out_ && rows_ > 0) {
    const TensorView res = residual_[cur_].View(DType::kBF16, {rows_, H});
    oc::Add(ctx_, res, res, out_.View(DType::kBF16, {rows_, H}));
  }
  has_out_ = false;

  for (Req& q : reqs) {
    if (!leaves(q) || q.rows() == 0) continue;
    SegmentBoundary& b = q.cache->boundary();
    BoundaryRows& out = b.collected;
    if (!out.data) {  // the segment's first chunk: room for all of its rows
      UP_ASSIGN_OR_RETURN(out.data, NewBoundaryRows(q.chunk->segment_rows, H));
      out.segment = segment;
    }
    if (out.rows() + q.rows() > DeviceRows(out).capacity) {
      return Internal("segment-wise chunks brought more rows than their segment holds (" +
                      std::to_string(out.rows() + q.rows()) + " > " +
                      std::to_string(DeviceRows(out).capacity) + ")");
    }
    UP_CUDA_CHECK(cudaMemcpyAsync(DeviceRows(out).row(out.rows(), H), x + q.begin * H,
                                  row_bytes * q.rows(), cudaMemcpyDeviceToDevice, stream));
    out.pos.insert(out.pos.end(), q.pos.begin(), q.pos.end());
    if (b.segment_ended) UP_RETURN_IF_ERROR(EndSegment(b));
  }

  // The new rows, request by request: the others' rows as they were, the entering ones' from
  // their boundaries (alive indices continuing the segment in their caches).
  const int nxt = 1 - cur_;
  uint16_t* y = Bf16(residual_[nxt]);  // bf16 [new rows, H]
  int64_t total = 0;
  for (Req& q : reqs) {
    std::vector<int32_t> pos, index;
    if (enters(q)) {
      BoundaryRows& in = q.cache->boundary().ready;
      const int n = q.chunk->rows;  // PackedBatch::Build checked the boundary holds them
      UP_CUDA_CHECK(cudaMemcpyAsync(y + total * H, DeviceRows(in).row(in.consumed, H),
                                    row_bytes * n, cudaMemcpyDeviceToDevice, stream));
      pos.assign(in.pos.begin() + in.consumed, in.pos.begin() + in.consumed + n);
      const int base = q.cache->segment_length(segment);
      for (int i = 0; i < n; ++i) index.push_back(base + i);
      in.consumed += n;
      if (in.consumed == in.rows()) {
        Retire(std::move(in.data));
        in.Clear();
      }
    } else if (!leaves(q) && q.rows() > 0) {
      UP_CUDA_CHECK(cudaMemcpyAsync(y + total * H, x + q.begin * H, row_bytes * q.rows(),
                                    cudaMemcpyDeviceToDevice, stream));
      pos = q.pos;
      index = q.index;
    }
    q.begin = static_cast<int>(total);
    q.SetExactRows(std::move(pos), std::move(index));
    total += q.rows();
  }
  cur_ = nxt;
  rows_ = total;
  return UploadSegment(reqs);
}

}  // namespace uniprefill::cuda_backend
