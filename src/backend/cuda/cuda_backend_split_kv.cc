// Split-KV for prefill chunks over a deep cached prefix: on our Hopper kernel
// (WgmmaPrefixSplits, when; WgmmaPrefixAttention, how: the kernel's own key splits and a merge;
// several requests in one launch: WgmmaBatchSplits, WgmmaPrefixBatch),
// else on cuDNN (PrefixPieces, when; ops/cuda/cudnn_split_prefix.h, how; the why
// ops/cuda/cudnn_attention.h).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/cuda/cuda_context.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/device_views.h"
#include "backend/cuda/wgmma_attention_views.h"
#include "core/cuda/cuda_check.h"
#include "ops/attention_split_plan.h"
#include "ops/cuda/cuda_attention_merge.h"
#include "ops/cuda/cudnn_split_prefix.h"
#include "ops/cuda/sm90/flash_attention_wgmma.h"

namespace uniprefill::cuda_backend {

namespace {

// Pieces per split prefix: a fixed count, so one cuDNN graph (built before serving) runs every
// split. Measured on the H200 (8B shape, 32/8 heads x 128; CudnnSplitPrefixThroughputTest): 4
// and 8 pieces within 3% of each other, 15 slower.
constexpr int kPrefixPieces = 8;
// Split when the last wave of (query tile, head) CTAs fills less than this share of it ...
constexpr double kMinWaveFill = 0.9;
// ... or, where cuDNN would run the chunk whole, when the prefix is at least this deep: over 128K
// keys split-KV won 1.05-1.10x against cuDNN's whole chunk even where the waves were full (1024
// and 2048 rows), over 32K it lost up to 3% (512 rows). Not against our Hopper kernel, which runs
// a whole prefill faster than cuDNN (8B shape, 128K: 10.6 vs 11.6 s): served beside 16 short
// decodes, a 130K prompt whose deep chunks were split on cuDNN took 1.28x its whole prefill.
constexpr int kDeepPrefix = 65536;
}  // namespace

int CudaBackend::PrefixPieces(int q_rows, int hq, int prefix, bool whole_on_cudnn) const {
  if (!cudnn_splits_usable_ || prefix_split_min_keys_ <= 0 ||
      prefix < kPrefixPieces * prefix_split_min_keys_) {
    return 0;
  }
  if (whole_on_cudnn && prefix >= kDeepPrefix) return kPrefixPieces;
  const int sms = ctx_.cuda().sm_count();
  const int64_t ctas = int64_t{(q_rows + kCudnnQueryTile - 1) / kCudnnQueryTile} * hq;
  const int64_t waves = (ctas + sms - 1) / sms;
  const double fill = static_cast<double>(ctas) / static_cast<double>(waves * sms);
  return fill < kMinWaveFill ? kPrefixPieces : 0;
}

int CudaBackend::WgmmaPrefixSplits(int q_rows, int hq, int prefix) const {
  const int64_t tiles = int64_t{(q_rows + kOurQueryTile - 1) / kOurQueryTile} * hq;
  return WgmmaSplitsFor(tiles, int64_t{prefix} + q_rows);
}

int CudaBackend::WgmmaSplitsFor(int64_t tiles, int64_t keys) const {
  if (prefix_split_min_keys_ <= 0) return 1;
  const int sms = ctx_.cuda().sm_count();
  // A wave's time is one CTA's (one CTA per SM, each over its split's keys): the time of s splits
  // is waves(s) / s of the whole chunk's wave time, i.e. 1 / fill(s) up to a constant.
  const auto fill = [&](int splits) {
    const int64_t ctas = tiles * splits, waves = (ctas + sms - 1) / sms;
    return static_cast<double>(ctas) / static_cast<double>(waves * sms);
  };
  int best = 1;
  const int most = static_cast<int>(
      std::min<int64_t>(ops::cuda::kMaxAttentionPieces, keys / prefix_split_min_keys_));
  for (int splits = 2; splits <= most && fill(best) < kMinWaveFill; ++splits) {
    if (fill(splits) > fill(best)) best = splits;
  }
  return best;
}

int CudaBackend::WgmmaBatchSplits(const std::vector<int32_t>& q_len,
                                  const std::vector<int32_t>& kv_len, int hq) {
  if (prefix_split_min_keys_ <= 0) return 1;
  std::vector<int64_t> problem{hq};
  std::vector<ops::SplitPlanChunk> chunks;
  int64_t max_keys = 0;
  for (size_t i = 0; i < q_len.size(); ++i) {
    problem.push_back(q_len[i]);
    problem.push_back(kv_len[i]);
    chunks.push_back({q_len[i], kv_len[i]});
    max_keys = std::max<int64_t>(max_keys, kv_len[i]);
  }
  if (problem == batch_splits_for_) return batch_splits_;
  ops::SplitPlanShape shape;
  shape.heads = hq;
  shape.sms = ctx_.cuda().sm_count();
  shape.tile_rows = kOurQueryTile;
  shape.max_splits = static_cast<int>(
      std::min<int64_t>(ops::cuda::kMaxAttentionPieces, max_keys / prefix_split_min_keys_));
  batch_splits_ = std::max(1, ops::PlanKeySplits(chunks, shape));
  batch_splits_for_ = std::move(problem);
  return batch_splits_;
}

Result<bool> CudaBackend::WgmmaPrefixAttention(const TensorView& q, const TensorView& attn,
                                               int q_row, int q_len, const TensorView& k,
                                               const TensorView& v, int kv_row, int kv_len,
                                               int splits, float scale) {
  // One request is a batch of one over its own rows: the same problem, uploads and merge.
  return WgmmaPrefixBatch(q, attn, {q_row}, {q_len}, k, v, {kv_row}, {kv_len}, splits, scale);
}

Result<bool> CudaBackend::SplitPrefixAttention(const TensorView& q, const TensorView& attn,
                                               int q_row, int q_len, const TensorView& k,
                                               const TensorView& v, int kv_row, int prefix,
                                               int pieces, const ops::AttentionParams& params) {
  cudaStream_t stream = ctx_.cuda().stream();
  ops::cuda::SplitPrefix s;
  s.q_row = q_row;
  s.q_len = q_len;
  s.kv_row = kv_row;
  s.prefix = prefix;
  s.pieces = pieces;
  // Serving: the graphs PrepareServing built (query rows: the step budget's; pieces' keys: the
  // context); otherwise powers of two.
  s.q_rows_bucket = ServeRowsBucket(q_len);
  if (serve_kv_bucket_ > 0 && prefix <= serve_kv_bucket_) s.kv_rows_bucket = serve_kv_bucket_;
  UP_RETURN_IF_ERROR(Grow(split_scratch_, ops::cuda::SplitPrefixScratchBytes(s, q.dim(1),
                                                                             q.dim(2))));
  const auto upload = [&](const std::vector<int32_t>& a) { return staging_.Put(a, stream); };
  return CudnnRan(ops::cuda::RunSplitPrefix(ctx_, *cudnn_, attn, q, k, v, s, params,
                                            split_scratch_.data(), upload),
                  "split prefix attention");
}

Status CudaBackend::WarmSplitGraphs(const TensorView& q, const TensorView& attn,
                                    const TensorView& k, const TensorView& v, int64_t K,
                                    const ops::AttentionParams& params) {
  if (prefix_split_min_keys_ <= 0 || !cudnn_) return OkStatus();
  const int rows = static_cast<int>(q.dim(0));
  if (K < rows + kPrefixPieces) return OkStatus();
  UP_ASSIGN_OR_RETURN(const bool ran, SplitPrefixAttention(q, attn, 0, rows, k, v, 0,
                                                           static_cast<int>(K - rows),
                                                           kPrefixPieces, params));
  if (!ran && cudnn_) cudnn_splits_usable_ = false;  // no plan for the pieces: chunks run whole
  return OkStatus();
}

Result<bool> CudaBackend::WgmmaPrefixBatch(const TensorView& q, const TensorView& attn,
                                           const std::vector<int32_t>& q_begin,
                                           const std::vector<int32_t>& q_len, const TensorView& k,
                                           const TensorView& v,
                                           const std::vector<int32_t>& kv_row,
                                           const std::vector<int32_t>& kv_len, int splits,
                                           float scale) {
  cudaStream_t stream = ctx_.cuda().stream();
  const int n = static_cast<int>(q_len.size());
  const int64_t hq = q.dim(1), d = q.dim(2);
  // The rows of q / attn from the first request's to the last's (rows between them, e.g. another
  // request's, are neither read into any output nor written; the split's partial outputs are
  // sized by these rows) and the whole k / v buffer; each request addressed by its row offsets.
  int first = q_begin[0], last = q_begin[0] + q_len[0];
  int max_q = 0;
  int64_t tiles = 0, max_keys = 0;
  for (int i = 0; i < n; ++i) {
    first = std::min(first, q_begin[i]);
    last = std::max(last, q_begin[i] + q_len[i]);
    max_q = std::max(max_q, q_len[i]);
    max_keys = std::max<int64_t>(max_keys, kv_len[i]);
    tiles += int64_t{(q_len[i] + kOurQueryTile - 1) / kOurQueryTile} * hq;
  }
  const int64_t rows = last - first;
  TensorView q_span = q, attn_span = attn;
  q_span.data = static_cast<uint16_t*>(q.data) + first * q.stride[0];
  q_span.shape[0] = rows;
  attn_span.data = static_cast<uint16_t*>(attn.data) + first * attn.stride[0];
  attn_span.shape[0] = rows;
  std::vector<int32_t> begin(q_begin);
  for (int32_t& b : begin) b -= first;
  ops::cuda::WgmmaAttentionProblem p =
      WgmmaProblemOf(q_span, k, v, attn_span, scale, wgmma_choices_);
  UP_ASSIGN_OR_RETURN(const std::vector<const int32_t*> uploaded,
                      staging_.PutAll({&begin, &q_len, &kv_row, &kv_len}, stream));
  p.seq_begin = uploaded[0];
  p.seq_len = uploaded[1];
  p.k_seq_begin = uploaded[2];
  p.k_seq_len = uploaded[3];
  p.batch = n;
  p.max_seqlen = max_q;
  // One split count for all: a short request's splits past its keys write only that (weight 0).
  if (splits <= 0) {
    splits = n > 1 ? WgmmaBatchSplits(q_len, kv_len, static_cast<int>(hq))
                   : WgmmaSplitsFor(tiles, max_keys);
  }
  if (splits > 1) {
    // bf16 [splits, rows, Hq, D] partial outputs, then f32 [splits, Hq, rows] log-sum-exps, over
    // the span's rows (the kernel indexes them by each request's first row in it).
    const size_t partial_bytes = static_cast<size_t>(splits * rows * hq * d * 2);
    UP_RETURN_IF_ERROR(Grow(split_scratch_, partial_bytes + static_cast<size_t>(splits * hq *
                                                                                rows * 4)));
    p.splits = splits;
    p.partial = static_cast<__nv_bfloat16*>(split_scratch_.data());
    p.lse = reinterpret_cast<float*>(static_cast<unsigned char*>(split_scratch_.data()) +
                                     partial_bytes);
  }
  if (!ops::cuda::WgmmaAttentionCovers(p)) return false;
  UP_CUDA_CHECK(ops::cuda::LaunchFlashAttentionWgmma(p, stream));
  if (splits > 1) {
    const auto* partial = reinterpret_cast<const uint16_t*>(p.partial);
    for (int i = 0; i < n; ++i) {
      TensorView out = attn_span;
      out.data = static_cast<uint16_t*>(attn_span.data) + begin[i] * attn.stride[0];
      out.shape[0] = q_len[i];
      ops::cuda::MergeAttentionPieces(ctx_, out, partial + begin[i] * hq * d, rows,
                                      p.lse + begin[i], rows, splits);
    }
    if (stats_ != nullptr) stats_->split_prefix_attentions += n;
  }
  return true;
}

}  // namespace uniprefill::cuda_backend
