// The CUDA backend's mixers (cuda_backend_impl.h): attention (projections, q/k-norm, RoPE, the
// step's keys and values into the cache, then flash / paged decode / cache attention and the
// output projection; a drop layer hands its queries to cuda_backend_drops.cc first) and Gated
// DeltaNet.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
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
#include "backend/cuda/cuda_glue_kernels.h"
#include "backend/cuda/device_views.h"
#include "backend/cuda/wgmma_attention_views.h"
#include "ops/cuda/cuda_attention.h"
#include "ops/cuda/cuda_cache_attention.h"
#include "ops/cuda/cuda_dense_ops.h"
#include "ops/cuda/cuda_linear_attention.h"
#include "ops/cuda/cuda_paged_attention.h"
#include "ops/cuda/sm90/flash_attention_wgmma.h"

namespace uniprefill::cuda_backend {

namespace oc = ops::cuda;

Status CudaBackend::DeltaMixer(int layer_index, const DeltaLayer& L, const std::vector<Req>& reqs,
                             int64_t T, TensorView out) {
  const GatedDeltaNetWeights& d = *L.host;
  const int64_t hk = d.n_k_heads, hv = d.n_v_heads, dk = d.d_k, dv = d.d_v;
  const int64_t key_dim = d.key_dim(), value_dim = d.value_dim(), conv_dim = d.conv_dim();
  const int64_t width = L.in_proj.out;  // conv_dim + value_dim + 2 hv
  oc::Gemm(ctx_, qkv_.View(DType::kBF16, {T, width}), normed_.View(DType::kBF16, {T, cfg_.hidden}),
           L.in_proj.view());
  float* g = gbeta_.as<float>();
  float* beta = g + T * hv;
  cuda_backend::DeltaNetGates(ctx_, g, beta,
                            Rows(Bf16(qkv_, conv_dim + value_dim), DType::kBF16, T, hv, width),
                            Rows(Bf16(qkv_, conv_dim + value_dim + hv), DType::kBF16, T, hv, width),
                            L.a_log.as<float>(), L.dt_bias.as<float>());
  const int ordinal = pool_->linear_ordinal(layer_index);
  oc::LinearAttentionBatch seqs;
  seqs.cu_seqlens = d_cu_;
  seqs.seq_lens = bounded_ ? d_counts_ : nullptr;  // bounded segments end in padding rows
  seqs.state_slots = d_slots_;
  seqs.batch = linear_batch_;  // the requests with rows (UploadSegment)
  seqs.max_seqlen = max_rows_;
  TensorView conv = conv_.View(DType::kBF16, {T, conv_dim});
  oc::CausalConv1dSilu(ctx_, conv, Rows(Bf16(qkv_), DType::kBF16, T, conv_dim, width),
                       L.conv_w.View(DType::kF32, {conv_dim, d.conv_kernel}),
                       pool_->conv_state(ordinal), seqs);
  TensorView q = Heads(Bf16(conv_), T, hk, dk, conv_dim);
  TensorView k = Heads(Bf16(conv_, key_dim), T, hk, dk, conv_dim);
  TensorView v = Heads(Bf16(conv_, 2 * key_dim), T, hv, dv, conv_dim);
  oc::L2NormalizeHeads(ctx_, q, kL2NormEps, 1.0f / std::sqrt(static_cast<float>(dk)));
  oc::L2NormalizeHeads(ctx_, k, kL2NormEps);
  TensorView core = Heads(Bf16(attn_), T, hv, dv, value_dim);
  // LoadOptions::gpu_delta_rule may force one kernel (diagnostics; default auto).
  oc::DeltaRuleKernel kernel = oc::DeltaRuleKernel::kAuto;
  switch (delta_rule_) {
    case DeltaRuleChoice::kAuto: break;
    case DeltaRuleChoice::kChunked: kernel = oc::DeltaRuleKernel::kChunked; break;
    case DeltaRuleChoice::kRecurrent: kernel = oc::DeltaRuleKernel::kRecurrent; break;
    case DeltaRuleChoice::kChunkedTensorCore:
      kernel = oc::DeltaRuleKernel::kChunkedTensorCore;
      break;
    case DeltaRuleChoice::kChunkedTensorCoreSplit:
      kernel = oc::DeltaRuleKernel::kChunkedTensorCoreSplit;
      break;
  }
  oc::GatedDeltaRule(ctx_, core, q, k, v,
                     TensorView::Contiguous(g, DType::kF32, {T, hv}, Device::kCuda),
                     TensorView::Contiguous(beta, DType::kF32, {T, hv}, Device::kCuda),
                     pool_->recurrent_state(ordinal), seqs, kernel, delta_scratch_.data(),
                     delta_scratch_.size());
  // Gated RMSNorm per value head: norm(core) * w * silu(z), written over z's columns.
  oc::RmsNorm(ctx_, core, core, L.norm.as<float>(), d.eps);
  TensorView z = Rows(Bf16(qkv_, conv_dim), DType::kBF16, T, value_dim, width);
  oc::GatedActivation(ctx_, z, z, Rows(Bf16(attn_), DType::kBF16, T, value_dim, value_dim),
                      ops::Activation::kSilu);
  oc::Gemm(ctx_, out, z, L.out_proj.view());
  return OkStatus();
}

Result<bool> CudaBackend::WgmmaPrefill(const std::vector<int>& which, const TensorView& q,
                                       const TensorView& k, const TensorView& v,
                                       const TensorView& attn, const KeptQueries& kq,
                                       const ops::AttentionParams& params,
                                       const DropKeys* drop_keys) {
  const int n = static_cast<int>(which.size());
  // A sync-free batch's true counts are on the device, one per request in order: the requests
  // must be consecutive to take them as one array (fresh requests come first, so they are).
  for (int i = 1; i < n && bounded_; ++i) {
    if (which[i] != which[0] + i) return false;
  }
  cudaStream_t stream = ctx_.cuda().stream();
  std::vector<int32_t> begin(n), len(n);
  int max_rows = 0;
  for (int i = 0; i < n; ++i) {
    begin[i] = kq.begin[which[i]];
    len[i] = kq.len[which[i]];  // capacities of a sync-free batch (its true counts are below)
    max_rows = std::max(max_rows, len[i]);
  }
  oc::WgmmaAttentionProblem p = WgmmaProblemOf(q, k, v, attn, params.scale, wgmma_choices_);
  UP_ASSIGN_OR_RETURN(p.seq_begin, staging_.Put(begin, stream));
  if (bounded_) {
    p.seq_len = d_counts_ + which[0];
  } else {
    UP_ASSIGN_OR_RETURN(p.seq_len, staging_.Put(len, stream));
  }
  if (drop_keys != nullptr) {  // kept queries over the drop layer's every key
    std::vector<int32_t> k_begin(n), k_len(n);
    for (int i = 0; i < n; ++i) {
      k_begin[i] = drop_keys->begin[which[i]];
      k_len[i] = drop_keys->len[which[i]];
    }
    UP_ASSIGN_OR_RETURN(p.k_seq_begin, staging_.Put(k_begin, stream));
    if (bounded_) {
      p.k_seq_len = drop_keys->counts + which[0];
    } else {
      UP_ASSIGN_OR_RETURN(p.k_seq_len, staging_.Put(k_len, stream));
    }
    p.q_coord = kq.coord;
    p.k_coord = drop_keys->coord;
  }
  p.batch = n;
  p.max_seqlen = max_rows;
  if (!ops::cuda::WgmmaAttentionCovers(p)) return false;
  UP_CUDA_CHECK(ops::cuda::LaunchFlashAttentionWgmma(p, stream));
  return true;
}

Result<bool> CudaBackend::CudnnPrefill(const std::vector<int>& which, const TensorView& q,
                                       const TensorView& k, const TensorView& v,
                                       const TensorView& attn, const KeptQueries& kq,
                                       const ops::AttentionParams& params) {
  int max_rows = 0;
  for (int r : which) max_rows = std::max(max_rows, kq.len[r]);
  // Serving (PrepareServing): one request per call on the budget's graph, built before serving.
  if (const int bucket = ServeRowsBucket(max_rows); bucket > 0) {
    for (int r : which) {
      UP_ASSIGN_OR_RETURN(bool ran, CudnnPrefillSet({r}, q, k, v, attn, kq, params, bucket));
      if (!ran) return false;  // the caller's fallback recomputes every request of `which`
    }
    return true;
  }
  return CudnnPrefillSet(which, q, k, v, attn, kq, params, 0);
}

Result<bool> CudaBackend::CudnnPrefillSet(const std::vector<int>& which, const TensorView& q,
                                          const TensorView& k, const TensorView& v,
                                          const TensorView& attn, const KeptQueries& kq,
                                          const ops::AttentionParams& params, int rows_bucket) {
  cudaStream_t stream = ctx_.cuda().stream();
  const int fresh = static_cast<int>(which.size());
  std::vector<int32_t> begin(fresh + 1), len(fresh);
  int max_rows = 0;
  for (int i = 0; i < fresh; ++i) {
    begin[i] = kq.begin[which[i]];
    len[i] = kq.len[which[i]];
    max_rows = std::max(max_rows, len[i]);
  }
  begin[fresh] = begin[fresh - 1] + len[fresh - 1];
  ops::cuda::CudnnVarlen vb;
  vb.batch = fresh;
  vb.max_rows = max_rows;
  vb.rows_bucket = rows_bucket;
  if (bounded_) {
    // True counts (the rest of each capacity is padding): fresh requests come first, so `which`
    // is 0..fresh-1 or, one at a time, a single request.
    vb.seq_len = d_counts_ + which[0];
  } else {
    UP_ASSIGN_OR_RETURN(vb.seq_len, staging_.Put(len, stream));
  }
  // Ragged offsets: each sequence's first row in elements of its view.
  auto offsets = [&](const TensorView& view) {
    return staging_.Put(ops::cuda::RaggedOffsets(begin, view.stride[0]), stream);
  };
  UP_ASSIGN_OR_RETURN(vb.q_offsets, offsets(q));
  UP_ASSIGN_OR_RETURN(vb.k_offsets, offsets(k));
  UP_ASSIGN_OR_RETURN(vb.v_offsets, offsets(v));
  UP_ASSIGN_OR_RETURN(vb.o_offsets, offsets(attn));
  return CudnnRan(cudnn_->Run(ctx_, attn, q, k, v, vb, params), "attention");
}

bool CudaBackend::CudnnRan(const Status& st, const char* what) {
  if (st.ok()) return true;
  // A shape cuDNN has no plan for falls back alone (said once: a repeat comes back Unavailable);
  // a plan that fails to run retires cuDNN for the model.
  if (st.code() == ErrorCode::kUnavailable) return false;
  const bool shape_only = st.code() == ErrorCode::kUnimplemented;
  std::fprintf(stderr,
               "uniprefill: cuDNN %s cannot run %s (%s); using the engine's own kernel %s\n", what,
               shape_only ? "this attention shape" : "this model's prefill", st.message().c_str(),
               shape_only ? "for it" : "from here on");
  if (!shape_only) cudnn_.reset();
  return false;
}

bool CudaBackend::PrefixKernelsCover(int64_t head_dim, int window) const {
  return window == 0 && (cudnn_ != nullptr || HopperKernelCovers(head_dim, window));
}

Result<bool> CudaBackend::PrefixPrefill(int li, int hkv, const std::vector<int>& which,
                                        const TensorView& q, const TensorView& attn,
                                        const KeptQueries& kq,
                                        const ops::AttentionParams& params) {
  cudaStream_t stream = ctx_.cuda().stream();
  const int n = static_cast<int>(which.size());
  const int64_t kv_dim = pool_->kv().dim(3), d = q.dim(2);
  if (kv_dim % 8 != 0) return false;  // the gather copies 16 bytes at a time
  // A request whose pages of this layer are one run of blocks (CudaSequenceCache::
  // contiguous_pages: told its prefill's length, the cache lays them out so) has its keys and
  // values in one piece of the pool's K and V planes: cuDNN reads them in place. The others are
  // copied out of the pool into contiguous rows first (GatherCacheRows); cuDNN's paged SDPA
  // (RunPaged) ran at half the rate on the H200 (32K prompt in 2K chunks, attention 1.36 s paged
  // vs 0.68 s whole; docs/serving.md), and the copy moves 2 x the prefix's K/V once per chunk.
  const TensorView pool = pool_->kv();
  const int bt = pool_->block_tokens();
  int max_blocks = 1, max_kv = 0;
  std::vector<int32_t> q_len(n), kv_len(n), q_begin(n), kv_row(n, 0), gather_begin{0};
  std::vector<const uint16_t*> k_base(n, nullptr), v_base(n, nullptr);
  std::vector<char> in_place(n, 0);
  std::vector<int32_t> table;
  for (int i = 0; i < n; ++i) {
    const Req& r = reqs_[which[i]];
    q_len[i] = kq.len[which[i]];
    kv_len[i] = r.cache->count(li);
    q_begin[i] = kq.begin[which[i]];
    const std::vector<int32_t>& bl = r.cache->blocks(li);
    if (r.cache->contiguous_pages(li) * bt >= kv_len[i] && kv_len[i] > 0) {
      const uint16_t* planes = static_cast<const uint16_t*>(pool.data);
      k_base[i] = planes + int64_t{bl[0]} * pool.stride[0];
      v_base[i] = k_base[i] + pool.stride[1];
      in_place[i] = 1;
      continue;
    }
    max_blocks = std::max<int>(max_blocks, static_cast<int>(bl.size()));
  }
  std::vector<int> gathered;
  for (int i = 0; i < n; ++i) {
    if (in_place[i]) continue;
    kv_row[i] = gather_begin.back();
    gather_begin.push_back(gather_begin.back() + kv_len[i]);
    max_kv = std::max(max_kv, kv_len[i]);
    const std::vector<int32_t>& bl = reqs_[which[i]].cache->blocks(li);
    table.resize(table.size() + max_blocks, 0);
    std::copy(bl.begin(), bl.end(), table.end() - max_blocks);
    gathered.push_back(i);
  }
  if (!gathered.empty()) {
    const int64_t keys = gather_begin.back();
    UP_RETURN_IF_ERROR(Grow(prefix_kv_, static_cast<size_t>(2 * keys * kv_dim * 2)));
    uint16_t* k_data = Bf16(prefix_kv_);
    uint16_t* v_data = Bf16(prefix_kv_, keys * kv_dim);
    UP_ASSIGN_OR_RETURN(const int32_t* d_table, staging_.Put(table, stream));
    UP_ASSIGN_OR_RETURN(const int32_t* d_begin, staging_.Put(gather_begin, stream));
    GatherCacheRows(ctx_, Rows(k_data, DType::kBF16, keys, kv_dim, kv_dim),
                    Rows(v_data, DType::kBF16, keys, kv_dim, kv_dim), pool, d_table, max_blocks,
                    d_begin, static_cast<int>(gathered.size()), max_kv);
    for (int i : gathered) k_base[i] = k_data, v_base[i] = v_data;
  }
  // One call per request (cuDNN's graphs are keyed by batch size, query-row bucket and key-row
  // bucket, and a server's mix of chunks would otherwise meet every batch size too; each graph's
  // first build autotunes and stalls its step. A server keys them by its budget and context
  // instead, PrepareServing: one graph per attention shape, built before the first request),
  // except that our kernel, which builds nothing, may take them all at once (below).
  const int64_t gathered_keys = gather_begin.back();
  // UNIPREFILL_CUDA_PREFIX_ONE_LAUNCH: the requests whose keys are in one buffer (the pool's
  // planes, read in place, or the gathered copy) in one launch of our kernel, instead of one
  // launch (with its uploads, and its split merge) each.
  std::vector<char> done(n, 0);
  if (prefix_one_launch_ && n > 1 && HopperKernelCovers(d, params.window) &&
      !(split_on_cudnn_ && cudnn_)) {
    const uint16_t* planes = static_cast<const uint16_t*>(pool.data);
    for (const bool place : {true, false}) {
      std::vector<int32_t> begins, lens, key_rows, key_lens;
      std::vector<int> group;
      for (int i = 0; i < n; ++i) {
        if (static_cast<bool>(in_place[i]) != place) continue;
        group.push_back(i);
        begins.push_back(q_begin[i]);
        lens.push_back(q_len[i]);
        key_lens.push_back(kv_len[i]);
        // In place: the request's first key is row (block * block_tokens) of the planes.
        key_rows.push_back(place ? static_cast<int32_t>((k_base[i] - planes) / kv_dim)
                                 : kv_row[i]);
      }
      if (group.size() < 2) continue;
      const int64_t rows = place ? pool.stride[1] / kv_dim : gathered_keys;
      const uint16_t* k_rows = place ? planes : k_base[group[0]];
      const uint16_t* v_rows = place ? planes + pool.stride[1] : v_base[group[0]];
      const TensorView k = Heads(const_cast<uint16_t*>(k_rows), rows, hkv, d, kv_dim);
      const TensorView v = Heads(const_cast<uint16_t*>(v_rows), rows, hkv, d, kv_dim);
      UP_ASSIGN_OR_RETURN(const bool ran, WgmmaPrefixBatch(q, attn, begins, lens, k, v, key_rows,
                                                           key_lens, 0, params.scale));
      if (!ran) continue;  // the loop below runs them one by one
      for (int i : group) {
        done[i] = 1;
        if (place && stats_ != nullptr) ++stats_->prefix_reads_in_place;
      }
    }
  }
  for (int i = 0; i < n; ++i) {
    if (done[i]) continue;
    // Heads of the request's rows: [rows, Hkv, D], rows kv_dim apart (kv_dim >= Hkv * D).
    const int64_t rows = in_place[i] ? kv_len[i] : gathered_keys;
    const TensorView k = Heads(const_cast<uint16_t*>(k_base[i]), rows, hkv, d, kv_dim);
    const TensorView v = Heads(const_cast<uint16_t*>(v_base[i]), rows, hkv, d, kv_dim);
    if (in_place[i] && stats_ != nullptr) ++stats_->prefix_reads_in_place;
    // A short chunk deep in a long prompt: split-KV (cuda_backend_split_kv.cc), on our kernel
    // where it runs the chunk (unless UNIPREFILL_CUDA_SPLIT_ON_CUDNN asks for cuDNN's pieces),
    // else on cuDNN.
    const int prefix = kv_len[i] - q_len[i];
    const int hq = static_cast<int>(q.dim(1));
    const bool ours = HopperKernelCovers(d, params.window);
    const bool ours_splits = ours && !(split_on_cudnn_ && cudnn_);
    const int pieces = cudnn_ && !ours_splits ? PrefixPieces(q_len[i], hq, prefix, !ours) : 0;
    if (pieces > 0) {
      UP_ASSIGN_OR_RETURN(const bool split, SplitPrefixAttention(q, attn, q_begin[i], q_len[i], k,
                                                                 v, kv_row[i], prefix, pieces,
                                                                 params));
      if (split) {
        if (stats_ != nullptr) ++stats_->split_prefix_attentions;
        continue;
      }
      if (!cudnn_) return false;
      cudnn_splits_usable_ = false;  // cuDNN has no plan for the pieces: run chunks whole
    }
    // Our Hopper kernel where it covers the layer (its keys, the prefix then the chunk's own, are
    // consecutive rows of k / v), else cuDNN's.
    if (ours) {
      const int splits = ours_splits ? WgmmaPrefixSplits(q_len[i], hq, prefix) : 1;
      UP_ASSIGN_OR_RETURN(const bool ran,
                          WgmmaPrefixAttention(q, attn, q_begin[i], q_len[i], k, v, kv_row[i],
                                               kv_len[i], splits, params.scale));
      if (ran) continue;  // (split ones counted by WgmmaPrefixBatch)
    }
    if (!cudnn_) return false;
    ops::cuda::CudnnPrefixBatch pb;
    UP_ASSIGN_OR_RETURN(pb.q_len, staging_.Put(std::vector<int32_t>{q_len[i]}, stream));
    UP_ASSIGN_OR_RETURN(pb.kv_len, staging_.Put(std::vector<int32_t>{kv_len[i]}, stream));
    const std::vector<int32_t> q_rows = {q_begin[i], q_begin[i] + q_len[i]};
    const std::vector<int32_t> kv_rows = {kv_row[i], kv_row[i] + kv_len[i]};
    UP_ASSIGN_OR_RETURN(pb.q_offsets,
                        staging_.Put(ops::cuda::RaggedOffsets(q_rows, q.stride[0]), stream));
    UP_ASSIGN_OR_RETURN(pb.o_offsets,
                        staging_.Put(ops::cuda::RaggedOffsets(q_rows, attn.stride[0]), stream));
    UP_ASSIGN_OR_RETURN(pb.k_offsets,
                        staging_.Put(ops::cuda::RaggedOffsets(kv_rows, kv_dim), stream));
    pb.v_offsets = pb.k_offsets;
    pb.batch = 1;
    pb.max_q_rows = q_len[i];
    pb.max_kv_rows = kv_len[i];
    // Serving: the graph PrepareServing built (a whole prompt beyond the budget: its own).
    if (ServeRowsBucket(q_len[i]) > 0 && kv_len[i] <= serve_kv_bucket_) {
      pb.q_rows_bucket = ServeRowsBucket(q_len[i]);
      pb.kv_rows_bucket = serve_kv_bucket_;
    }
    // On a failure the caller's fallback recomputes every request of `which`.
    if (!CudnnRan(cudnn_->RunPrefix(ctx_, attn, q, k, v, pb, params), "prefix attention")) {
      return false;
    }
  }
  return true;
}

Status CudaBackend::DecodeRun(int li, int hkv, const std::vector<int>& run,
                              const TensorView& q_rows, const int32_t* q_coord,
                              const std::vector<int>& q_begin, bool by_position,
                              const TensorView& attn, const ops::AttentionParams& ap) {
  // One query row per request, rows contiguous from the run's first request's.
  cudaStream_t stream = ctx_.cuda().stream();
  const int n = static_cast<int>(run.size());
  int max_blocks = 1, max_len = 0;
  for (int r : run) {
    max_blocks = std::max<int>(max_blocks, reqs_[r].cache->blocks(li).size());
    max_len = std::max(max_len, reqs_[r].cache->count(li));
  }
  std::vector<int32_t> tables(static_cast<size_t>(n) * max_blocks, -1), lens(n);
  for (int i = 0; i < n; ++i) {
    const std::vector<int32_t>& bl = reqs_[run[i]].cache->blocks(li);
    std::copy(bl.begin(), bl.end(), tables.begin() + static_cast<size_t>(i) * max_blocks);
    lens[i] = reqs_[run[i]].cache->count(li);
  }
  UP_ASSIGN_OR_RETURN(const std::vector<const int32_t*> uploaded,
                      staging_.PutAll({&tables, &lens}, stream));
  const int32_t* d_tables = uploaded[0];
  const int32_t* d_lens = uploaded[1];
  const int64_t first = q_begin[run[0]];
  oc::PagedDecodeBatch pb;
  pb.block_tables = d_tables;
  pb.max_blocks_per_seq = max_blocks;
  pb.seq_lens = d_lens;
  pb.q_pos = q_coord + first;
  pb.max_seq_len = max_len;
  const int Hq = static_cast<int>(q_rows.shape[1]), D = static_cast<int>(q_rows.shape[2]);
  const size_t bytes =
      oc::PagedDecodeAttentionScratchBytes(ctx_, n, Hq, hkv, D, std::max(max_len, 1));
  UP_RETURN_IF_ERROR(Grow(decode_scratch_, bytes));
  TensorView q_dec = q_rows;
  q_dec.data = static_cast<uint16_t*>(q_rows.data) + first * q_rows.stride[0];
  q_dec.shape[0] = n;
  oc::PagedDecodeAttention(ctx_, attn.Slice0(first, n), q_dec, pool_->kv(),
                           pool_->coords(by_position), pb, ap, decode_scratch_.data(),
                           decode_scratch_.size());
  return OkStatus();
}

Status CudaBackend::AttentionMixer(int li, const AttentionLayer& L, std::vector<Req>& reqs,
                                   const DropLayer* drop, WindowMode window_mode, int segment,
                                   int64_t* rows, TensorView out, QueryRows queries,
                                   bool add_to_residual) {
  const AttentionWeights& a = *L.host;
  cudaStream_t stream = ctx_.cuda().stream();
  const int64_t T = *rows, H = cfg_.hidden;
  const int64_t Hq = a.n_heads, Hkv = a.n_kv_heads, D = a.head_dim;
  const int64_t qd = Hq * D, kvd = Hkv * D, width = L.qkv.out;
  const int64_t q_cols = a.gated_output ? 2 * qd : qd;  // q | gate
  const int B = static_cast<int>(reqs.size());
  oc::Gemm(ctx_, qkv_.View(DType::kBF16, {T, width}), normed_.View(DType::kBF16, {T, H}),
           L.qkv.view());
  TensorView q = Heads(Bf16(qkv_), T, Hq, D, width);
  TensorView k = Heads(Bf16(qkv_, q_cols), T, Hkv, D, width);
  TensorView v = Heads(Bf16(qkv_, q_cols + kvd), T, Hkv, D, width);
  if (L.q_norm.size()) oc::RmsNorm(ctx_, q, q, L.q_norm.as<float>(), a.norm_eps);
  if (L.k_norm.size()) oc::RmsNorm(ctx_, k, k, L.k_norm.as<float>(), a.norm_eps);
  // k's heads follow q's in the row (no output gate): one launch rotates both and appends the
  // keys and values (RopePagedKvAppend, below; UNIPREFILL_CUDA_SEPARATE_ROPE=1: the rotation in
  // a launch of its own, as before the 28th session).
  const bool rope_in_append = q_cols == qd && !separate_rope_;
  if (!rope_in_append && q_cols == qd) {
    // One launch rotates q and k (the same angles per token; each head's arithmetic as in two
    // launches). A decode layer's second launch was ~2-4 us of latency on an H200.
    oc::Rope(ctx_, Heads(Bf16(qkv_), T, Hq + Hkv, D, width), d_pos_, L.inv_freq.as<float>(),
             a.rot_dims, a.rope_style);
  } else if (!rope_in_append) {  // q | gate | k: not adjacent, two launches
    oc::Rope(ctx_, q, d_pos_, L.inv_freq.as<float>(), a.rot_dims, a.rope_style);
    oc::Rope(ctx_, k, d_pos_, L.inv_freq.as<float>(), a.rot_dims, a.rope_style);
  }

  // The step's keys and values into each request's cache blocks.
  // A fresh request's sliding-window prefill reads the step's own keys (flash attention), so only
  // the entries later queries can see are stored (windows over alive indices).
  const bool fast_d = D == 64 || D == 128 || D == 256;
  const bool by_position = window_mode == WindowMode::kPosition && a.window > 0;
  // The last layer: only each request's last row is attended for (KeepLastRows, below), as a
  // decode over the cache.
  const bool last_only = queries == QueryRows::kLastOfEach;
  std::vector<int32_t> slots;
  slots.reserve(T);
  layer_segment_[li] = segment;
  for (Req& r : reqs) {
    int first_stored = 0;
    if (r.fresh && fast_d && a.window > 0 && !by_position) {
      // From the fewest rows it may have on: a bounded segment's true count is >= n_min.
      first_stored = r.cache->count(li) + r.n_min - a.window + 1;
      // The last row itself, attended for from the cache, sees one entry more.
      if (last_only) first_stored = std::max(r.cache->count(li), first_stored - 1);
    }
    // A segment-wise chunk's segment rows size the run of blocks the layer takes (in place
    // prefix reads, PrefixPrefill); dense prefills told the cache their length.
    UP_RETURN_IF_ERROR(r.cache->AppendSlots(li, r.rows(), first_stored, &slots,
                                            r.chunk != nullptr ? r.chunk->segment_rows : 0));
    r.appended[li] = r.rows();
  }
  UP_ASSIGN_OR_RETURN(const int32_t* d_slots, staging_.Put(slots, stream));
  // Keys, values and both coordinates of each slot (position, alive index) in one launch (with
  // the rotation of q and k where rope_in_append).
  if (rope_in_append) {
    oc::RopePagedKvAppend(ctx_, Heads(Bf16(qkv_), T, Hq + Hkv, D, width), static_cast<int>(Hkv),
                          d_pos_, L.inv_freq.as<float>(), a.rot_dims, a.rope_style, pool_->kv(),
                          pool_->coords(true), Rows(v.data, DType::kBF16, T, kvd, width),
                          d_slots, d_pos_, pool_->coords(false), d_index_);
  } else {
    oc::PagedKvAppend(ctx_, pool_->kv(), pool_->coords(true),
                      Rows(k.data, DType::kBF16, T, kvd, width),
                      Rows(v.data, DType::kBF16, T, kvd, width), d_slots, d_pos_,
                      pool_->coords(false), d_index_);
  }

  const int32_t* k_coord = by_position ? d_pos_ : d_index_;  // this step's keys, pre-compaction
  DropKeys drop_keys;  // the keys a drop layer's kept queries attend (its rows before the drop)
  drop_keys.coord = k_coord;
  drop_keys.counts = d_counts_;
  std::vector<int> k_len(B);
  KeptQueries kq;  // the query rows that get an output
  kq.rows = q;
  kq.coord = k_coord;
  kq.begin.resize(B);
  kq.len.resize(B);
  kq.total = T;
  for (int r = 0; r < B; ++r) {
    kq.begin[r] = reqs[r].begin;
    kq.len[r] = k_len[r] = reqs[r].rows();
  }
  drop_keys.begin = kq.begin;
  drop_keys.len = k_len;

  if (drop != nullptr) {
    UP_RETURN_IF_ERROR(bounded_ ? BoundedDrop(L, reqs, *drop, segment, T, &kq)
                                : SyncedDrop(L, reqs, *drop, segment, T, &kq));
    *rows = kq.total;
  }
  // (A step of one row per request, decodes, has no row to leave out.)
  const bool keeps_last =
      last_only && std::any_of(reqs.begin(), reqs.end(), [](const Req& r) { return r.rows() > 1; });
  if (keeps_last) {
    UP_RETURN_IF_ERROR(KeepLastRows(L, reqs, drop != nullptr ? segment + 1 : segment, &kq));
    *rows = kq.total;
  }
  const int64_t t_out = kq.total;
  const TensorView& q_rows = kq.rows;
  const int32_t* q_coord = kq.coord;
  const std::vector<int>& q_begin = kq.begin;
  const std::vector<int>& q_len = kq.len;

  // Attention of the kept query rows. attn bf16 [t_out, Hq, D].
  TensorView attn = attn_.View(DType::kBF16, {t_out, Hq, D});
  ops::AttentionParams ap;
  ap.scale = a.scale;
  ap.window = a.window;
  const int fresh = fast_d ? fresh_ : 0;  // requests served by flash attention (or cuDNN's)
  // Of those and of the others, the ones with query rows: a segment-wise chunk outside its
  // segment has none, and no kernel gets an empty sequence.
  std::vector<int> fresh_rows, other_rows;
  for (int r = 0; r < B; ++r) {
    // (The last layer's last rows of fresh requests read the cache as decodes do.)
    if (q_len[r] > 0) (r < fresh && !keeps_last ? fresh_rows : other_rows).push_back(r);
  }
  bool own_done = false, cudnn_done = false;
  // Our Hopper kernel: causal self-attention by row index, which equals causal by position for
  // any strictly ascending positions (a dense prefill's, or the kept tokens' after a drop).
  if (!fresh_rows.empty() && HopperKernelCovers(D, a.window) && !kq.compacted) {
    UP_ASSIGN_OR_RETURN(own_done, WgmmaPrefill(fresh_rows, q_rows, k, v, attn, kq, ap));
  }
  // A drop layer's kept queries (compacted before their attention, so the dropped rows' outputs
  // are never computed) over the layer's every key, masked by their coordinates: the same kernel
  // (UNIPREFILL_CUDA_KEPT_QUERIES_ON_FLASH=1: FlashAttention below, at about half its rate).
  if (!fresh_rows.empty() && HopperKernelCovers(D, a.window) && kq.compacted &&
      !kept_queries_on_flash_) {
    UP_ASSIGN_OR_RETURN(own_done, WgmmaPrefill(fresh_rows, q_rows, k, v, attn, kq, ap, &drop_keys));
  }
  // cuDNN's masks take each fresh request's row indices for coordinates (a window is a band on
  // them). k_coord / q_coord equal those (up to order, which is all causality sees) for uncompacted
  // queries: causal layers in any segment; windows by alive index in any segment (a fresh
  // request's indices are 0..n-1: 0-based in segment 0, renumbered from next_base = 0 after each
  // drop); windows by position only in segment 0 (later segments keep the kept tokens' gapped
  // positions).
  const bool rows_are_coords = a.window == 0 || !by_position || segment == 0;
  if (!fresh_rows.empty() && !own_done && cudnn_ && !kq.compacted && rows_are_coords) {
    UP_ASSIGN_OR_RETURN(cudnn_done, CudnnPrefill(fresh_rows, q_rows, k, v, attn, kq, ap));
  }
  if (!fresh_rows.empty() && !own_done && !cudnn_done) {
    std::vector<int32_t> cu_q{0}, cu_k{0};
    int max_q = 0, max_k = 0;
    for (int r : fresh_rows) {
      cu_q.push_back(cu_q.back() + q_len[r]);
      cu_k.push_back(cu_k.back() + k_len[r]);
      max_q = std::max(max_q, q_len[r]);
      max_k = std::max(max_k, k_len[r]);
    }
    UP_ASSIGN_OR_RETURN(const int32_t* d_cu_q, staging_.Put(cu_q, stream));
    UP_ASSIGN_OR_RETURN(const int32_t* d_cu_k, staging_.Put(cu_k, stream));
    oc::VarlenBatch vb;
    vb.cu_seqlens_q = d_cu_q;
    vb.cu_seqlens_k = d_cu_k;
    vb.batch = static_cast<int>(fresh_rows.size());
    vb.max_seqlen_q = max_q;
    vb.max_seqlen_k = max_k;
    oc::FlashAttention(ctx_, attn, q_rows, k, v, q_coord, k_coord, vb, ap);
  }
  // Chunks of a prefill over its earlier chunks (full attention, queries uncompacted: the newest
  // entries of the layer's cache): our Hopper kernel or cuDNN's fused attention over the cache
  // read in place or copied into rows (PrefixPrefill; our cache kernel took 8-18x as long). The
  // rest (decodes, windows, kept queries of a drop over a cache) runs below.
  if (!other_rows.empty() && fast_d && PrefixKernelsCover(D, a.window)) {
    std::vector<int> paged, rest;
    for (int r : other_rows) {
      const bool newest = q_len[r] > 1 && q_len[r] == reqs[r].appended[li];
      (newest ? paged : rest).push_back(r);
    }
    bool done = false;
    if (!paged.empty()) {
      UP_ASSIGN_OR_RETURN(done, PrefixPrefill(li, static_cast<int>(Hkv), paged, q_rows, attn, kq,
                                              ap));
    }
    if (done) other_rows = std::move(rest);
  }
  // Decode rows (one query each) run the paged decode kernel in runs of contiguous rows.
  std::vector<int> cache_rows;
  {
    std::vector<int> run;
    const auto flush = [&]() -> Status {
      if (!run.empty()) {
        UP_RETURN_IF_ERROR(DecodeRun(li, static_cast<int>(Hkv), run, q_rows, q_coord, q_begin,
                                     by_position, attn, ap));
      }
      run.clear();
      return OkStatus();
    };
    for (int r : other_rows) {
      const bool decode = fast_d && q_len[r] == 1;
      if (decode && (run.empty() || q_begin[r] == q_begin[run.back()] + 1)) {
        run.push_back(r);
        continue;
      }
      UP_RETURN_IF_ERROR(flush());
      if (decode) {
        run.push_back(r);
      } else {
        cache_rows.push_back(r);
      }
    }
    UP_RETURN_IF_ERROR(flush());
  }
  other_rows = std::move(cache_rows);
  if (!other_rows.empty()) {
    // The other requests over their cache blocks.
    const int n = static_cast<int>(other_rows.size());
    int max_blocks = 1, max_len = 0, max_q = 0;
    for (int r : other_rows) {
      max_blocks = std::max<int>(max_blocks, reqs[r].cache->blocks(li).size());
      max_len = std::max(max_len, reqs[r].cache->count(li));
      max_q = std::max(max_q, q_len[r]);
    }
    std::vector<int32_t> tables(static_cast<size_t>(n) * max_blocks, -1), lens(n), starts(n),
        qlens(n);
    for (int i = 0; i < n; ++i) {
      const int r = other_rows[i];
      const std::vector<int32_t>& bl = reqs[r].cache->blocks(li);
      std::copy(bl.begin(), bl.end(), tables.begin() + static_cast<size_t>(i) * max_blocks);
      lens[i] = reqs[r].cache->count(li);
      starts[i] = q_begin[r];
      qlens[i] = q_len[r];
    }
    UP_ASSIGN_OR_RETURN(const std::vector<const int32_t*> uploaded,
                        staging_.PutAll({&tables, &lens, &starts, &qlens}, stream));
    const int32_t* d_tables = uploaded[0];
    const int32_t* d_lens = uploaded[1];
    const int32_t* d_starts = uploaded[2];
    const int32_t* d_qlens = uploaded[3];
    oc::CacheAttentionBatch cb;
    cb.q_start = d_starts;
    cb.q_len = d_qlens;
    cb.q_coord = q_coord;
    cb.block_tables = d_tables;
    cb.max_blocks_per_seq = max_blocks;
    cb.seq_lens = d_lens;
    cb.batch = n;
    cb.max_q_len = max_q;
    cb.max_seq_len = max_len;
    oc::CacheAttention(ctx_, attn, q_rows, pool_->kv(), pool_->coords(by_position), cb, ap);
  }
  if (a.gated_output) {
    const TensorView gate = kq.compacted ? Heads(Bf16(q_kept_, qd), t_out, Hq, D, q_cols)
                                      : Heads(Bf16(qkv_, qd), t_out, Hq, D, width);
    cuda_backend::SigmoidGateMul(ctx_, attn, gate);
  }
  const TensorView attn_rows = attn_.View(DType::kBF16, {t_out, qd});
  if (add_to_residual) {  // residual += attn @ o^T (the residual as compacted by a drop)
    oc::GemmAccumulate(ctx_, residual_[cur_].View(DType::kBF16, {t_out, H}), attn_rows, L.o.view());
    return OkStatus();
  }
  TensorView o_out = out;
  o_out.shape[0] = t_out;
  oc::Gemm(ctx_, o_out, attn_rows, L.o.view());
  return OkStatus();
}

}  // namespace uniprefill::cuda_backend
