// RunSplitPrefix (cudnn_split_prefix.h): the pieces' batch, the chunk's own causal call, the merge.
#include "ops/cuda/cudnn_split_prefix.h"

#include <algorithm>
#include <string>

#include "ops/cuda/cuda_attention_merge.h"

namespace uniprefill::ops::cuda {

namespace {

int64_t QueryBucket(const SplitPrefix& s) {
  if (s.q_rows_bucket > 0) return s.q_rows_bucket;
  int64_t b = 64;  // cudnn_attention.cc's default bucket: a power of two, at least 64
  while (b < s.q_len) b *= 2;
  return b;
}

}  // namespace

size_t SplitPrefixScratchBytes(const SplitPrefix& s, int64_t hq, int64_t d) {
  const int64_t rows = (s.pieces + 1) * QueryBucket(s);
  return static_cast<size_t>(rows * hq * d * 2 + rows * hq * 4);
}

Status RunSplitPrefix(DeviceContext& ctx, CudnnAttention& cudnn, TensorView out, TensorView q,
                      TensorView k, TensorView v, const SplitPrefix& s,
                      const AttentionParams& params, void* scratch, const UploadInts& upload) {
  if (s.pieces < 1 || s.pieces + 1 > kMaxAttentionPieces || s.prefix < s.pieces || s.q_len < 1) {
    return InvalidArgument("split prefix attention: " + std::to_string(s.pieces) +
                           " pieces of a " + std::to_string(s.prefix) + "-key prefix for " +
                           std::to_string(s.q_len) + " queries");
  }
  const int64_t hq = q.dim(1), d = q.dim(2), qb = QueryBucket(s);
  const int64_t piece_elems = qb * hq * d;
  // bf16 [(pieces + 1) qb, Hq, D]: piece p's outputs from row p qb; then f32 [pieces + 1, Hq, qb].
  TensorView partial = TensorView::Contiguous(scratch, DType::kBF16, {(s.pieces + 1) * qb, hq, d},
                                              Device::kCuda);
  float* lse = reinterpret_cast<float*>(static_cast<uint16_t*>(scratch) +
                                        (s.pieces + 1) * piece_elems);

  // The prefix's pieces: near-equal runs of keys, every piece with the chunk's query rows.
  const int n = s.pieces;
  std::vector<int32_t> q_len(n, s.q_len), kv_len(n), q_off(n + 1), k_off(n + 1), o_off(n + 1);
  int begin = 0, longest = 0;
  for (int p = 0; p < n; ++p) {
    kv_len[p] = s.prefix / n + (p < s.prefix % n ? 1 : 0);
    longest = std::max(longest, kv_len[p]);
    q_off[p] = static_cast<int32_t>(s.q_row * q.stride[0]);
    k_off[p] = static_cast<int32_t>((s.kv_row + begin) * k.stride[0]);
    o_off[p] = static_cast<int32_t>(p * piece_elems);
    begin += kv_len[p];
  }
  q_off[n] = static_cast<int32_t>((s.q_row + s.q_len) * q.stride[0]);  // the ends: unread
  k_off[n] = static_cast<int32_t>((s.kv_row + s.prefix) * k.stride[0]);
  o_off[n] = static_cast<int32_t>(n * piece_elems);
  CudnnPrefixBatch pieces;
  pieces.batch = n;
  pieces.causal = false;
  pieces.stats = lse;
  pieces.max_q_rows = s.q_len;
  pieces.q_rows_bucket = static_cast<int>(qb);
  pieces.max_kv_rows = longest;
  pieces.kv_rows_bucket = s.kv_rows_bucket;
  UP_ASSIGN_OR_RETURN(pieces.q_len, upload(q_len));
  UP_ASSIGN_OR_RETURN(pieces.kv_len, upload(kv_len));
  UP_ASSIGN_OR_RETURN(pieces.q_offsets, upload(q_off));
  UP_ASSIGN_OR_RETURN(pieces.k_offsets, upload(k_off));
  pieces.v_offsets = pieces.k_offsets;
  UP_ASSIGN_OR_RETURN(pieces.o_offsets, upload(o_off));
  UP_RETURN_IF_ERROR(cudnn.RunPrefix(ctx, partial, q, k, v, pieces, params));

  // The chunk over its own keys, causal: piece n.
  const auto span = [&](int32_t first, int64_t row_elems) {
    return upload({first, static_cast<int32_t>(first + s.q_len * row_elems)});
  };
  CudnnPrefixBatch own;
  own.batch = 1;
  own.stats = lse + n * hq * qb;
  own.max_q_rows = own.max_kv_rows = s.q_len;
  own.q_rows_bucket = own.kv_rows_bucket = static_cast<int>(qb);
  UP_ASSIGN_OR_RETURN(own.q_len, upload({s.q_len}));
  own.kv_len = own.q_len;
  UP_ASSIGN_OR_RETURN(own.q_offsets, span(q_off[0], q.stride[0]));
  UP_ASSIGN_OR_RETURN(own.k_offsets, span(k_off[n], k.stride[0]));
  own.v_offsets = own.k_offsets;
  UP_ASSIGN_OR_RETURN(own.o_offsets, span(o_off[n], hq * d));
  UP_RETURN_IF_ERROR(cudnn.RunPrefix(ctx, partial, q, k, v, own, params));

  TensorView rows = out;  // bf16 [q_len, Hq, D]: the chunk's rows
  rows.data = static_cast<uint16_t*>(out.data) + s.q_row * out.stride[0];
  rows.shape[0] = s.q_len;
  MergeAttentionPieces(ctx, rows, static_cast<const uint16_t*>(partial.data), qb, lse, qb, n + 1);
  return OkStatus();
}

}  // namespace uniprefill::ops::cuda
