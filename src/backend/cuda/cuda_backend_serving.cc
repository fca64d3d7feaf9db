// CudaBackend::PrepareServing: cuDNN attention graphs keyed by the server's step budget and
// context, built and autotuned before the first request.
//
// Why: each cuDNN graph is built and every plan timed on its first call (cudnn_attention.h). Keyed
// by powers of two of the query and prefix rows, a chunked 32K prefill meets five prefix graphs
// and a server meets them inside its steps: those steps stall for the builds (the dense run of
// issue 18's 4 x 32K load, the first on its server, missed the ITL goal; the UniPrefill run after
// it met it). Keyed by the budget (query rows) and the context (prefix rows), a model has one
// self-attention graph per attention shape and window, and one prefix graph per attention shape.
#include <cuda_runtime.h>

#include <algorithm>
#include <set>
#include <tuple>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/device_views.h"

namespace uniprefill::cuda_backend {

namespace {

// The prefix length the prefix graphs are timed at when built (their plans serve every length up
// to the context): long enough to rank the plans the way long prompts' chunks run them.
constexpr int kWarmPrefixRows = 16384;

}  // namespace

int CudaBackend::ServeRowsBucket(int rows) const {
  for (int b : serve_rows_buckets_) {
    if (rows <= b) return b;
  }
  return 0;
}

Status CudaBackend::PrepareServing(int max_step_rows, int max_context) {
  if (max_step_rows < 1 || max_context < 1) {
    return InvalidArgument("PrepareServing: step rows and context must be positive");
  }
  const int step_rows = std::min(max_step_rows, max_context);
  if (serve_kv_bucket_ > 0 && serve_kv_bucket_ != max_context) {
    return InvalidArgument("PrepareServing: every step budget must share one context");
  }
  serve_kv_bucket_ = max_context;
  if (std::find(serve_rows_buckets_.begin(), serve_rows_buckets_.end(), step_rows) !=
      serve_rows_buckets_.end()) {
    return OkStatus();  // prepared before
  }
  serve_rows_buckets_.insert(
      std::upper_bound(serve_rows_buckets_.begin(), serve_rows_buckets_.end(), step_rows),
      step_rows);
  if (!cudnn_) return OkStatus();
  cudaStream_t stream = ctx_.cuda().stream();
  const int64_t R = step_rows;
  const int64_t K = std::min<int64_t>(max_context, std::max<int64_t>(R, kWarmPrefixRows));
  // One graph per distinct (heads, head dim, row layout, scale, window): warm each once.
  std::set<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, float, int>> seen;
  for (const Layer& layer : layers_) {
    if (!layer.attention || !cudnn_) continue;
    const AttentionLayer& L = *layer.attention;
    const AttentionWeights& a = *L.host;
    const int64_t Hq = a.n_heads, Hkv = a.n_kv_heads, D = a.head_dim;
    if (D != 64 && D != 128 && D != 256) continue;  // our kernel runs those
    const int64_t width = L.qkv.out, qd = Hq * D, kvd = Hkv * D;
    const int64_t q_cols = a.gated_output ? 2 * qd : qd;
    if (!seen.emplace(Hq, Hkv, D, width, q_cols, a.scale, a.window).second) continue;

    UP_RETURN_IF_ERROR(staging_.Reserve(256));  // nothing in flight: synced below
    // Zero rows of the step's layouts: qkv bf16 [R, width], attention out bf16 [R, Hq, D].
    UP_ASSIGN_OR_RETURN(DeviceBuffer qkv, DeviceBuffer::Allocate(R * width * 2));
    UP_ASSIGN_OR_RETURN(DeviceBuffer out, DeviceBuffer::Allocate(R * qd * 2));
    UP_CUDA_CHECK(cudaMemsetAsync(qkv.data(), 0, qkv.size(), stream));
    const TensorView q = Heads(Bf16(qkv), R, Hq, D, width);
    const TensorView k = Heads(Bf16(qkv, q_cols), R, Hkv, D, width);
    const TensorView v = Heads(Bf16(qkv, q_cols + kvd), R, Hkv, D, width);
    const TensorView attn = out.View(DType::kBF16, {R, Hq, D});
    ops::AttentionParams ap;
    ap.scale = a.scale;
    ap.window = a.window;
    const std::vector<int32_t> rows = {0, static_cast<int32_t>(R)};
    ops::cuda::CudnnVarlen vb;
    vb.batch = 1;
    vb.max_rows = vb.rows_bucket = static_cast<int>(R);
    UP_ASSIGN_OR_RETURN(vb.seq_len, staging_.Put(std::vector<int32_t>{vb.max_rows}, stream));
    UP_ASSIGN_OR_RETURN(vb.q_offsets, staging_.Put(ops::cuda::RaggedOffsets(rows, width), stream));
    vb.k_offsets = vb.v_offsets = vb.q_offsets;
    UP_ASSIGN_OR_RETURN(vb.o_offsets, staging_.Put(ops::cuda::RaggedOffsets(rows, qd), stream));
    CudnnRan(cudnn_->Run(ctx_, attn, q, k, v, vb, ap), "attention");
    if (cudnn_ && a.window == 0) {  // prefixes run full attention only
      UP_RETURN_IF_ERROR(WarmPrefixGraph(L, q, attn, vb, K, max_context));
    }
    // The buffers are freed at scope end: the stream must be done with them.
    UP_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  return OkStatus();
}

Status CudaBackend::WarmPrefixGraph(const AttentionLayer& L, const TensorView& q,
                                    const TensorView& attn, const ops::cuda::CudnnVarlen& vb,
                                    int64_t K, int max_context) {
  cudaStream_t stream = ctx_.cuda().stream();
  const AttentionWeights& a = *L.host;
  const int64_t Hkv = a.n_kv_heads, D = a.head_dim, kv_dim = pool_->kv().dim(3);
  ops::AttentionParams ap;
  ap.scale = a.scale;
  // The R queries are the last of K cached keys, bf16 [2, K, kv_dim].
  const int64_t R = q.dim(0);
  UP_ASSIGN_OR_RETURN(DeviceBuffer prefix, DeviceBuffer::Allocate(2 * K * kv_dim * 2));
  UP_CUDA_CHECK(cudaMemsetAsync(prefix.data(), 0, prefix.size(), stream));
  const TensorView pk = Heads(Bf16(prefix), K, Hkv, D, kv_dim);
  const TensorView pv = Heads(Bf16(prefix, K * kv_dim), K, Hkv, D, kv_dim);
  ops::cuda::CudnnPrefixBatch pb;
  pb.batch = 1;
  pb.max_q_rows = pb.q_rows_bucket = static_cast<int>(R);
  pb.max_kv_rows = static_cast<int>(K);
  pb.kv_rows_bucket = max_context;
  UP_ASSIGN_OR_RETURN(pb.q_len, staging_.Put(std::vector<int32_t>{pb.max_q_rows}, stream));
  UP_ASSIGN_OR_RETURN(pb.kv_len, staging_.Put(std::vector<int32_t>{pb.max_kv_rows}, stream));
  pb.q_offsets = vb.q_offsets;
  pb.o_offsets = vb.o_offsets;
  const std::vector<int32_t> keys = {0, static_cast<int32_t>(K)};
  UP_ASSIGN_OR_RETURN(pb.k_offsets, staging_.Put(ops::cuda::RaggedOffsets(keys, kv_dim), stream));
  pb.v_offsets = pb.k_offsets;
  CudnnRan(cudnn_->RunPrefix(ctx_, attn, q, pk, pv, pb, ap), "prefix attention");
  UP_RETURN_IF_ERROR(WarmSplitGraphs(q, attn, pk, pv, K, ap));
  UP_CUDA_CHECK(cudaStreamSynchronize(stream));  // before `prefix` is freed
  return OkStatus();
}

}  // namespace uniprefill::cuda_backend
