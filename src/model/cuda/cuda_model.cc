// The CUDA model (model/cuda/cuda_model.h): its Load (weights: cuda_model_weights.h) and the device
// forward (batch layout, attention and DeltaNet mixers, UniPrefill drops, logits).
#include "model/cuda/cuda_model.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "io/dequant.h"
#include "model/cuda/cuda_kv_cache.h"
#include "model/cuda/cuda_model_kernels.h"
#include "model/cuda/cuda_model_weights.h"
#include "model/cuda/device_views.h"
#include "model/cuda/pinned_staging.h"
#include "model/packed_batch.h"
#include "ops/cuda/cuda_attention.h"
#include "ops/cuda/cuda_cache_attention.h"
#include "ops/cuda/cuda_dense_ops.h"
#include "ops/cuda/cuda_linear_attention.h"
#include "ops/cuda/cuda_moe.h"
#include "ops/cuda/cuda_paged_attention.h"
#include "ops/cuda/cuda_uniprefill.h"

namespace uniprefill {
namespace {

namespace oc = ops::cuda;
using cuda_model::AttentionLayer;
using cuda_model::Bf16;
using cuda_model::Heads;
using cuda_model::Rows;
using cuda_model::DeltaLayer;
using cuda_model::DeviceLinear;
using cuda_model::Layer;
using cuda_model::MoeLayer;
using cuda_model::Upload;
using cuda_model::UploadF32;
using cuda_model::UploadRows;

constexpr int kBlockTokens = 16;  // device KV pages (the serving engine may fix another size)
constexpr float kL2NormEps = 1e-6f;


// Grows b to at least `bytes`, zero-filled: rows a kernel never writes (the padding rows of
// bounded segments) then hold zeros or values of earlier layers, never NaN bit patterns. The fill
// goes on the forward's own stream (non-blocking: a legacy-stream memset would race its kernels).
Status Ensure(DeviceBuffer& b, size_t bytes, cudaStream_t stream) {
  if (b.size() >= bytes) return OkStatus();
  b = DeviceBuffer();
  UP_ASSIGN_OR_RETURN(b, DeviceBuffer::Allocate(std::max<size_t>(bytes, 256)));
  UP_CUDA_CHECK(cudaMemsetAsync(b.data(), 0, b.size(), stream));
  return OkStatus();
}

// One request of a forward, as the host tracks it.
struct Req {
  int step = 0;
  CudaSequenceCache* cache = nullptr;
  bool fresh = false;               // its cache held nothing before this step
  int begin = 0;                    // first device row (current segment)
  // Rows it owns in the current segment. After a sync-free drop (bounded segments) n is only a
  // capacity: the true count is on the device, between n_min and n, and pos / index are unknown.
  int n = 0, n_min = 0;
  int first_rows = 0;  // the step's rows (segment 0 is always exact)
  bool exact = true;
  std::vector<int32_t> pos, index;  // exact: its alive rows' positions and alive indices
  std::vector<int> added;           // rows appended per segment
  std::vector<int> appended;        // entries appended per attention layer (bounded: capacities)
  std::vector<int> selected_at;     // bounded: the segments whose drop it selected in
  int rows() const { return n; }
  void SetExactRows(std::vector<int32_t> p, std::vector<int32_t> i) {
    pos = std::move(p);
    index = std::move(i);
    n = n_min = static_cast<int>(pos.size());
    exact = true;
  }
};

class CudaModel final : public Model {
 public:
  CudaModel(std::unique_ptr<Model> host, DeviceContext& ctx)
      : host_(std::move(host)), ctx_(ctx), cfg_(host_->config()) {}

  Status Load(const ProgressFn& progress);

  const ModelConfig& config() const override { return cfg_; }
  size_t resident_weight_bytes() const override { return weight_bytes_; }
  Device device() const override { return Device::kCuda; }
  std::unique_ptr<SequenceCache> NewCache(int max_tokens,
                                          const std::vector<int>& drop_layers) const override {
    return std::make_unique<CudaSequenceCache>(CacheLayoutFor(drop_layers), max_tokens,
                                               pool_.get());
  }
  Status FixCachePool(int num_blocks, int block_tokens) override {
    pool_ = std::make_unique<CudaKvPool>(ctx_, CacheLayoutFor({}), block_tokens);
    return pool_->FixCapacity(num_blocks);
  }
  Status ForwardBatch(DeviceContext& ctx, std::span<const SequenceStep> steps,
                      const UniPrefillConfig& uniprefill, const ProgressFn& progress,
                      ForwardStats* stats) override;

 private:
  Status EnsureWork(int64_t rows, int batch);
  Status Grow(DeviceBuffer& b, size_t bytes) { return Ensure(b, bytes, ctx_.cuda().stream()); }

  // Uploads the current segment's per-row arrays and per-request lists.
  Status UploadSegment(const std::vector<Req>& reqs);
  Status AttentionMixer(int layer_index, const AttentionLayer& L, std::vector<Req>& reqs,
                        const DropLayer* drop, WindowMode window_mode, int segment, int64_t* rows,
                        TensorView out);
  // The query side of a drop: which rows get an attention output, where, at which coordinates.
  struct KeptQueries {
    TensorView rows;
    const int32_t* coord = nullptr;
    std::vector<int> begin, len;
    int64_t total = 0;
    bool compacted = false;  // rows are gathered kept rows (q_kept_)
  };
  // A fixed-ratio drop without a host sync (bounded segments, ops/cuda/cuda_uniprefill.h): the
  // kept counts stay on the device; later launches are sized by FixedRatioCapacity; the host
  // learns the counts after the forward's final sync (ReconcileBoundedCaches).
  Status BoundedDrop(const AttentionLayer& L, std::vector<Req>& reqs, const DropLayer& drop,
                     int segment, int64_t T, KeptQueries* kept);
  // After the final sync: true segment lengths, cache entry counts and kept records.
  void ReconcileBoundedCaches(std::vector<Req>& reqs, std::span<const SequenceStep> steps,
                              const std::vector<int>& drops);
  Status Mark(cudaEvent_t* event);
  Status DeltaMixer(int layer_index, const DeltaLayer& L, const std::vector<Req>& reqs,
                    int64_t rows, TensorView out);

  std::unique_ptr<Model> host_;
  DeviceContext& ctx_;
  ModelConfig cfg_;
  int64_t weight_bytes_ = 0;
  mutable std::unique_ptr<CudaKvPool> pool_;

  DeviceBuffer embedding_;  // bf16 [V, hidden]
  DeviceLinear head_;       // bf16 [V, hidden] (may alias embedding_ when tied: then empty)
  bool head_is_embedding_ = false;
  float embedding_scale_ = 1.0f;
  bool has_linear_ = false;  // any Gated DeltaNet layer (state slots needed)
  DeviceBuffer output_norm_;
  std::vector<Layer> layers_;

  // Work buffers (grow-only).
  int64_t max_qkv_ = 0, max_attn_ = 0, max_ffn2_ = 0, max_conv_ = 0, max_hv_ = 0;
  DeviceBuffer residual_[2], normed_, out_, qkv_, q_kept_, attn_, ffn_, conv_, gbeta_;
  DeviceBuffer importance_, kept_rows_, kept_count_, select_scratch_, moe_scratch_, decode_scratch_,
      logits_, logits_f32_, last_hidden_;
  int cur_ = 0;  // live residual buffer
  cuda_model::PinnedStaging staging_;

  // The current segment's device arrays (staging regions).
  const int32_t* d_pos_ = nullptr;
  const int32_t* d_index_ = nullptr;
  const int32_t* d_cu_ = nullptr;     // [B + 1] every request
  const int32_t* d_slots_ = nullptr;  // [B] linear state slots
  int max_rows_ = 0;                  // longest request's rows
  int fresh_ = 0;                     // requests [0, fresh_) are fresh
  // Sync-free drops (every selecting request is fixed-ratio): the current true row counts, the
  // counts after each drop (device, and the pinned host copy read after the final sync), and the
  // segment each attention layer wrote.
  bool bounded_ = false;
  const int32_t* d_counts_ = nullptr;  // [B]
  int32_t* d_kept_hist_ = nullptr;     // [drops][B]
  int32_t* h_kept_hist_ = nullptr;
  std::vector<int> layer_segment_;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>>* drop_events_ = nullptr;
};

Status CudaModel::Load(const ProgressFn& progress) {
  UP_ASSIGN_OR_RETURN(ModelExport e, host_->Export());
  embedding_scale_ = e.embedding_scale;
  const int64_t H = cfg_.hidden, V = cfg_.vocab_size;
  {
    std::vector<float> table(static_cast<size_t>(V) * H);
    UP_RETURN_IF_ERROR(
        Dequantize(e.token_embedding.dtype, e.token_embedding.data, table.data(), V * H));
    UP_ASSIGN_OR_RETURN(DeviceLinear emb, UploadRows(table, V, H));
    embedding_ = std::move(emb.w);
    weight_bytes_ += embedding_.size();
  }
  head_is_embedding_ = e.head->parts.size() == 1 && e.head->parts[0].data == e.token_embedding.data;
  if (!head_is_embedding_) {
    UP_ASSIGN_OR_RETURN(head_, Upload({e.head}));
    weight_bytes_ += head_.w.size();
  }
  output_norm_ = UploadF32(*e.output_norm);
  layers_.resize(e.layers.size());
  for (size_t i = 0; i < e.layers.size(); ++i) {
    const ExportedLayer& x = e.layers[i];
    Layer& L = layers_[i];
    L.mixer_norm = UploadF32(*x.mixer_norm);
    L.ffn_norm = UploadF32(*x.ffn_norm);
    if (x.post_mixer_norm) L.post_mixer_norm = UploadF32(*x.post_mixer_norm);
    if (x.post_ffn_norm) L.post_ffn_norm = UploadF32(*x.post_ffn_norm);
    if (x.attention) {
      const AttentionWeights& a = *x.attention;
      L.attention = std::make_unique<AttentionLayer>();
      UP_RETURN_IF_ERROR(cuda_model::UploadAttention(a, L.attention.get(), &weight_bytes_));
      max_qkv_ = std::max(max_qkv_, L.attention->qkv.out);
      max_attn_ = std::max<int64_t>(max_attn_, int64_t{a.n_heads} * a.head_dim);
    } else {
      const GatedDeltaNetWeights& d = *x.delta;
      L.delta = std::make_unique<DeltaLayer>();
      has_linear_ = true;
      UP_RETURN_IF_ERROR(cuda_model::UploadDelta(d, L.delta.get(), &weight_bytes_));
      max_qkv_ = std::max(max_qkv_, L.delta->in_proj.out);
      max_attn_ = std::max<int64_t>(max_attn_, d.value_dim());
      max_conv_ = std::max<int64_t>(max_conv_, d.conv_dim());
      max_hv_ = std::max<int64_t>(max_hv_, d.n_v_heads);
    }
    if (x.ffn) {
      UP_ASSIGN_OR_RETURN(L.gate_up, Upload({&x.ffn->gate_up}));
      UP_ASSIGN_OR_RETURN(L.down, Upload({&x.ffn->down}));
      L.activation = x.ffn->activation;
      max_ffn2_ = std::max(max_ffn2_, L.gate_up.out);
      weight_bytes_ += L.gate_up.w.size() + L.down.w.size();
    } else {
      L.moe = std::make_unique<MoeLayer>();
      UP_RETURN_IF_ERROR(cuda_model::UploadMoe(*x.moe, L.moe.get(), &weight_bytes_));
    }
    if (progress) progress(static_cast<int64_t>(i + 1), static_cast<int64_t>(e.layers.size()));
  }
  pool_ = std::make_unique<CudaKvPool>(ctx_, CacheLayoutFor({}), kBlockTokens);
  ctx_.cuda().Synchronize();
  return OkStatus();
}

Status CudaModel::EnsureWork(int64_t T, int batch) {
  const int64_t H = cfg_.hidden;
  for (DeviceBuffer* b : {&residual_[0], &residual_[1], &normed_, &out_}) {
    UP_RETURN_IF_ERROR(Grow(*b, T * H * 2));
  }
  // residual_ buffers must keep their contents across Ensure calls within a forward: EnsureWork
  // runs once per forward, before the embedding.
  UP_RETURN_IF_ERROR(Grow(qkv_, T * max_qkv_ * 2));
  UP_RETURN_IF_ERROR(Grow(q_kept_, T * max_qkv_ * 2));
  UP_RETURN_IF_ERROR(Grow(attn_, T * max_attn_ * 2));
  UP_RETURN_IF_ERROR(Grow(ffn_, T * max_ffn2_ * 2));
  UP_RETURN_IF_ERROR(Grow(conv_, T * max_conv_ * 2));
  UP_RETURN_IF_ERROR(Grow(gbeta_, T * max_hv_ * 2 * 4));
  UP_RETURN_IF_ERROR(Grow(importance_, T * 4));
  UP_RETURN_IF_ERROR(Grow(kept_rows_, T * 4));
  UP_RETURN_IF_ERROR(Grow(kept_count_, batch * 4));
  UP_RETURN_IF_ERROR(Grow(last_hidden_, batch * H * 2));
  UP_RETURN_IF_ERROR(Grow(logits_, static_cast<size_t>(batch) * cfg_.vocab_size * 2));
  UP_RETURN_IF_ERROR(Grow(logits_f32_, static_cast<size_t>(batch) * cfg_.vocab_size * 4));
  for (const Layer& L : layers_) {
    if (L.moe) {
      const oc::MoeDeviceWeights w = L.moe->View();
      UP_RETURN_IF_ERROR(Grow(moe_scratch_, oc::MoeScratchBytes(T, w)));
    }
  }
  return OkStatus();
}

Status CudaModel::UploadSegment(const std::vector<Req>& reqs) {
  cudaStream_t stream = ctx_.cuda().stream();
  std::vector<int32_t> pos, index, cu{0}, slots;
  max_rows_ = 0;
  for (const Req& r : reqs) {
    pos.insert(pos.end(), r.pos.begin(), r.pos.end());
    index.insert(index.end(), r.index.begin(), r.index.end());
    cu.push_back(cu.back() + r.rows());
    max_rows_ = std::max(max_rows_, r.rows());
    if (has_linear_) {
      UP_ASSIGN_OR_RETURN(int slot, r.cache->StateSlot());
      slots.push_back(slot);
    }
  }
  UP_ASSIGN_OR_RETURN(d_pos_, staging_.Put(pos, stream));
  UP_ASSIGN_OR_RETURN(d_index_, staging_.Put(index, stream));
  UP_ASSIGN_OR_RETURN(d_cu_, staging_.Put(cu, stream));
  UP_ASSIGN_OR_RETURN(d_slots_, staging_.Put(slots, stream));
  return OkStatus();
}

Status CudaModel::DeltaMixer(int layer_index, const DeltaLayer& L, const std::vector<Req>& reqs,
                             int64_t T, TensorView out) {
  const GatedDeltaNetWeights& d = *L.host;
  const int64_t hk = d.n_k_heads, hv = d.n_v_heads, dk = d.d_k, dv = d.d_v;
  const int64_t key_dim = d.key_dim(), value_dim = d.value_dim(), conv_dim = d.conv_dim();
  const int64_t width = L.in_proj.out;  // conv_dim + value_dim + 2 hv
  oc::Gemm(ctx_, qkv_.View(DType::kBF16, {T, width}), normed_.View(DType::kBF16, {T, cfg_.hidden}),
           L.in_proj.view());
  float* g = gbeta_.as<float>();
  float* beta = g + T * hv;
  cuda_model::DeltaNetGates(ctx_, g, beta,
                            Rows(Bf16(qkv_, conv_dim + value_dim), DType::kBF16, T, hv, width),
                            Rows(Bf16(qkv_, conv_dim + value_dim + hv), DType::kBF16, T, hv, width),
                            L.a_log.as<float>(), L.dt_bias.as<float>());
  const int ordinal = pool_->linear_ordinal(layer_index);
  oc::LinearAttentionBatch seqs;
  seqs.cu_seqlens = d_cu_;
  seqs.seq_lens = bounded_ ? d_counts_ : nullptr;  // bounded segments end in padding rows
  seqs.state_slots = d_slots_;
  seqs.batch = static_cast<int>(reqs.size());
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
  // UNIPREFILL_DELTA_RULE_KERNEL=chunked|recurrent forces one kernel (diagnostics; default auto).
  oc::DeltaRuleKernel kernel = oc::DeltaRuleKernel::kAuto;
  if (const char* e = std::getenv("UNIPREFILL_DELTA_RULE_KERNEL")) {
    if (std::string(e) == "chunked") kernel = oc::DeltaRuleKernel::kChunked;
    if (std::string(e) == "recurrent") kernel = oc::DeltaRuleKernel::kRecurrent;
  }
  oc::GatedDeltaRule(ctx_, core, q, k, v,
                     TensorView::Contiguous(g, DType::kF32, {T, hv}, Device::kCuda),
                     TensorView::Contiguous(beta, DType::kF32, {T, hv}, Device::kCuda),
                     pool_->recurrent_state(ordinal), seqs, kernel);
  // Gated RMSNorm per value head: norm(core) * w * silu(z), written over z's columns.
  oc::RmsNorm(ctx_, core, core, L.norm.as<float>(), d.eps);
  TensorView z = Rows(Bf16(qkv_, conv_dim), DType::kBF16, T, value_dim, width);
  oc::GatedActivation(ctx_, z, z, Rows(Bf16(attn_), DType::kBF16, T, value_dim, value_dim),
                      ops::Activation::kSilu);
  oc::Gemm(ctx_, out, z, L.out_proj.view());
  return OkStatus();
}

Status CudaModel::AttentionMixer(int li, const AttentionLayer& L, std::vector<Req>& reqs,
                                 const DropLayer* drop, WindowMode window_mode, int segment,
                                 int64_t* rows, TensorView out) {
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
  oc::Rope(ctx_, q, d_pos_, L.inv_freq.as<float>(), a.rot_dims, a.rope_style);
  oc::Rope(ctx_, k, d_pos_, L.inv_freq.as<float>(), a.rot_dims, a.rope_style);

  // The step's keys and values into each request's cache blocks.
  // A fresh request's sliding-window prefill reads the step's own keys (flash attention), so only
  // the entries later queries can see are stored (windows over alive indices).
  const bool fast_d = D == 64 || D == 128 || D == 256;
  const bool by_position = window_mode == WindowMode::kPosition && a.window > 0;
  std::vector<int32_t> slots;
  slots.reserve(T);
  layer_segment_[li] = segment;
  for (Req& r : reqs) {
    int first_stored = 0;
    if (r.fresh && fast_d && a.window > 0 && !by_position) {
      // From the fewest rows it may have on: a bounded segment's true count is >= n_min.
      first_stored = r.cache->count(li) + r.n_min - a.window + 1;
    }
    UP_RETURN_IF_ERROR(r.cache->AppendSlots(li, r.rows(), first_stored, &slots));
    r.appended[li] = r.rows();
  }
  UP_ASSIGN_OR_RETURN(const int32_t* d_slots, staging_.Put(slots, stream));
  oc::PagedKvAppend(ctx_, pool_->kv(), pool_->coords(true),
                    Rows(k.data, DType::kBF16, T, kvd, width),
                    Rows(v.data, DType::kBF16, T, kvd, width), d_slots, nullptr);
  cuda_model::WriteSlotMeta(ctx_, pool_->meta(), pool_->block_tokens(), d_slots, d_pos_, d_index_,
                            T);

  const int32_t* k_coord = by_position ? d_pos_ : d_index_;  // this step's keys, pre-compaction
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

  if (drop != nullptr && bounded_) {
    UP_RETURN_IF_ERROR(BoundedDrop(L, reqs, *drop, segment, T, &kq));
    *rows = kq.total;
  } else if (drop != nullptr) {
    std::vector<int>& q_begin = kq.begin;
    std::vector<int>& q_len = kq.len;
    std::pair<cudaEvent_t, cudaEvent_t> ev_score{}, ev_select{}, ev_compact{};
    auto mark = [&](std::pair<cudaEvent_t, cudaEvent_t>& p, bool first) {
      return Mark(first ? &p.first : &p.second);
    };
    // Which prefill requests select (the others pass through to the next segment whole).
    std::vector<char> eligible(B, 0);
    std::vector<const sparsity::SelectionParams*> params(B);
    bool any = false;
    for (int r = 0; r < B; ++r) {
      const SequenceStep& step = drop->steps[reqs[r].step];
      const UniPrefillConfig* config = step.selection ? step.selection : drop->config;
      params[r] = &config->selection;
      const int n = reqs[r].rows();
      if (n <= params[r]->sink + params[r]->last_n || !step.allow_drop) continue;
      if (!reqs[r].fresh) {
        return Unimplemented(
            "UniPrefill on the GPU selects from a whole prompt: a request whose cache already "
            "holds tokens cannot drop (send the prompt in one step, or disable UniPrefill for it)");
      }
      eligible[r] = 1;
      any = true;
    }
    if (any) UP_RETURN_IF_ERROR(mark(ev_score, true));
    if (any) UP_CUDA_CHECK(cudaMemsetAsync(importance_.data(), 0, T * 4, stream));
    for (int r = 0; r < B && any; ++r) {
      if (!eligible[r]) continue;
      const int n = reqs[r].rows();
      const int64_t n_obs = std::min<int64_t>(params[r]->last_n, n);
      const int64_t b = reqs[r].begin;
      oc::AttentionImportance(ctx_, importance_.as<float>() + b,
                              Heads(Bf16(qkv_, (b + n - n_obs) * width), n_obs, Hq, D, width),
                              Heads(Bf16(qkv_, b * width + q_cols), n, Hkv, D, width),
                              d_index_ + b + n - n_obs, d_index_ + b, a.scale);
    }
    std::pair<int32_t*, int32_t*> counts{}, kept{};
    if (any) {
      UP_RETURN_IF_ERROR(mark(ev_score, false));
      UP_RETURN_IF_ERROR(mark(ev_select, true));
      size_t scratch_bytes = 0;
      for (int r = 0; r < B; ++r) {
        if (eligible[r]) {
          scratch_bytes =
              std::max(scratch_bytes, oc::SelectTokensScratchBytes(reqs[r].rows(), *params[r]));
        }
      }
      UP_RETURN_IF_ERROR(Grow(select_scratch_, scratch_bytes));
      for (int r = 0; r < B; ++r) {
        if (!eligible[r]) continue;
        oc::SelectTokens(ctx_, kept_rows_.as<int32_t>() + reqs[r].begin,
                         kept_count_.as<int32_t>() + r, importance_.as<float>() + reqs[r].begin,
                         reqs[r].rows(), *params[r], select_scratch_.data(),
                         select_scratch_.size());
      }
      // The one host sync of a drop layer: the kept rows decide every later shape.
      UP_ASSIGN_OR_RETURN(counts, staging_.Scratch(B));
      UP_ASSIGN_OR_RETURN(kept, staging_.Scratch(T));
      UP_CUDA_CHECK(cudaMemcpyAsync(counts.second, kept_count_.data(), B * 4,
                                    cudaMemcpyDeviceToHost, stream));
      UP_CUDA_CHECK(
          cudaMemcpyAsync(kept.second, kept_rows_.data(), T * 4, cudaMemcpyDeviceToHost, stream));
      UP_CUDA_CHECK(cudaStreamSynchronize(stream));
      if (drop->stats) ++drop->stats->drop_host_syncs;
      UP_RETURN_IF_ERROR(mark(ev_select, false));
      UP_RETURN_IF_ERROR(mark(ev_compact, true));
    }

    // The next segment on the host: kept rows, their positions, their new alive indices.
    std::vector<int32_t> gather;
    int begin = 0;
    for (int r = 0; r < B; ++r) {
      Req& q_req = reqs[r];
      const int n = q_req.rows();
      q_req.added[segment] += n;
      std::vector<int32_t> keep;
      if (eligible[r]) {
        const int c = counts.second[r];
        keep.assign(kept.second + q_req.begin, kept.second + q_req.begin + c);
        const SequenceStep& step = drop->steps[q_req.step];
        if (step.kept) step.kept->push_back({drop->layer, c, n});
      } else {
        keep.resize(n);
        std::iota(keep.begin(), keep.end(), 0);
      }
      std::vector<int32_t> pos, index;
      const int base = q_req.cache->segment_length(segment + 1);
      for (size_t i = 0; i < keep.size(); ++i) {
        gather.push_back(q_req.begin + keep[i]);
        pos.push_back(q_req.pos[keep[i]]);
        index.push_back(base + static_cast<int>(i));
      }
      q_len[r] = static_cast<int>(keep.size());
      q_begin[r] = begin;
      q_req.begin = begin;
      q_req.SetExactRows(std::move(pos), std::move(index));
      begin += q_len[r];
    }
    const int64_t t_out = begin;
    kq.total = t_out;
    if (!any) {  // nothing dropped: same rows, renumbered for the next segment
      UP_RETURN_IF_ERROR(UploadSegment(reqs));
      *rows = t_out;
    } else {
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
      kq.coord = coord_kept.first;
      kq.rows = Heads(Bf16(q_kept_), t_out, Hq, D, q_cols);
      UP_RETURN_IF_ERROR(UploadSegment(reqs));  // the next segment's positions and indices
      UP_RETURN_IF_ERROR(mark(ev_compact, false));
      if (drop_events_) {
        drop_events_->push_back(ev_score);
        drop_events_->push_back(ev_select);
        drop_events_->push_back(ev_compact);
      }
      *rows = t_out;
      kq.compacted = true;
    }
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
  const int fresh = fast_d ? fresh_ : 0;  // requests served by flash attention
  if (fresh > 0) {
    std::vector<int32_t> cu_q{0}, cu_k{0};
    int max_q = 0, max_k = 0;
    for (int r = 0; r < fresh; ++r) {
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
    vb.batch = fresh;
    vb.max_seqlen_q = max_q;
    vb.max_seqlen_k = max_k;
    oc::FlashAttention(ctx_, attn, q_rows, k, v, q_coord, k_coord, vb, ap);
  }
  if (fresh < B) {
    // The other requests over their cache blocks.
    const int n = B - fresh;
    int max_blocks = 1, max_len = 0, max_q = 0;
    bool single = true;
    for (int r = fresh; r < B; ++r) {
      max_blocks = std::max<int>(max_blocks, reqs[r].cache->blocks(li).size());
      max_len = std::max(max_len, reqs[r].cache->count(li));
      max_q = std::max(max_q, q_len[r]);
      single = single && q_len[r] == 1;
    }
    std::vector<int32_t> tables(static_cast<size_t>(n) * max_blocks, -1), lens(n), starts(n),
        qlens(n);
    for (int r = fresh; r < B; ++r) {
      const std::vector<int32_t>& bl = reqs[r].cache->blocks(li);
      std::copy(bl.begin(), bl.end(), tables.begin() + static_cast<size_t>(r - fresh) * max_blocks);
      lens[r - fresh] = reqs[r].cache->count(li);
      starts[r - fresh] = q_begin[r];
      qlens[r - fresh] = q_len[r];
    }
    UP_ASSIGN_OR_RETURN(const int32_t* d_tables, staging_.Put(tables, stream));
    UP_ASSIGN_OR_RETURN(const int32_t* d_lens, staging_.Put(lens, stream));
    const TensorView coords = pool_->coords(by_position);
    if (single && fast_d) {
      // One query row per request, rows contiguous from q_begin[fresh].
      const int64_t first = q_begin[fresh];
      oc::PagedDecodeBatch pb;
      pb.block_tables = d_tables;
      pb.max_blocks_per_seq = max_blocks;
      pb.seq_lens = d_lens;
      pb.q_pos = q_coord + first;
      pb.max_seq_len = max_len;
      const size_t bytes =
          oc::PagedDecodeAttentionScratchBytes(ctx_, n, Hq, Hkv, D, std::max(max_len, 1));
      UP_RETURN_IF_ERROR(Grow(decode_scratch_, bytes));
      TensorView q_dec = q_rows;
      q_dec.data = static_cast<uint16_t*>(q_rows.data) + first * q_rows.stride[0];
      q_dec.shape[0] = n;
      oc::PagedDecodeAttention(ctx_, attn.Slice0(first, n), q_dec, pool_->kv(), coords, pb, ap,
                               decode_scratch_.data(), decode_scratch_.size());
    } else {
      UP_ASSIGN_OR_RETURN(const int32_t* d_starts, staging_.Put(starts, stream));
      UP_ASSIGN_OR_RETURN(const int32_t* d_qlens, staging_.Put(qlens, stream));
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
      oc::CacheAttention(ctx_, attn, q_rows, pool_->kv(), coords, cb, ap);
    }
  }
  if (a.gated_output) {
    const TensorView gate = kq.compacted ? Heads(Bf16(q_kept_, qd), t_out, Hq, D, q_cols)
                                      : Heads(Bf16(qkv_, qd), t_out, Hq, D, width);
    cuda_model::SigmoidGateMul(ctx_, attn, gate);
  }
  TensorView o_out = out;
  o_out.shape[0] = t_out;
  oc::Gemm(ctx_, o_out, attn_.View(DType::kBF16, {t_out, qd}), L.o.view());
  return OkStatus();
}

Status CudaModel::Mark(cudaEvent_t* event) {
  if (!drop_events_) return OkStatus();
  UP_CUDA_CHECK(cudaEventCreate(event));
  UP_CUDA_CHECK(cudaEventRecord(*event));
  return OkStatus();
}

Status CudaModel::BoundedDrop(const AttentionLayer& L, std::vector<Req>& reqs,
                              const DropLayer& drop, int segment, int64_t T, KeptQueries* kq) {
  const AttentionWeights& a = *L.host;
  cudaStream_t stream = ctx_.cuda().stream();
  const int64_t H = cfg_.hidden, Hq = a.n_heads, Hkv = a.n_kv_heads, D = a.head_dim;
  const int64_t qd = Hq * D, width = L.qkv.out;
  const int64_t q_cols = a.gated_output ? 2 * qd : qd;  // q | gate
  const int B = static_cast<int>(reqs.size());
  std::pair<cudaEvent_t, cudaEvent_t> ev_score{}, ev_select{}, ev_compact{};

  // Which requests select: the exact path's rule, with capacities for lengths (a request whose
  // true count is <= S + n keeps everything on the device).
  std::vector<int32_t> pass(B, 1);
  std::vector<const sparsity::SelectionParams*> params(B);
  size_t scratch_bytes = 0;
  for (int r = 0; r < B; ++r) {
    const SequenceStep& step = drop.steps[reqs[r].step];
    const UniPrefillConfig* config = step.selection ? step.selection : drop.config;
    params[r] = &config->selection;
    if (reqs[r].rows() <= params[r]->sink + params[r]->last_n || !step.allow_drop) continue;
    if (!reqs[r].fresh) {
      return Unimplemented(
          "UniPrefill on the GPU selects from a whole prompt: a request whose cache already "
          "holds tokens cannot drop (send the prompt in one step, or disable UniPrefill for it)");
    }
    pass[r] = 0;
    scratch_bytes =
        std::max(scratch_bytes, oc::SelectTokensScratchBytes(reqs[r].rows(), *params[r]));
  }
  UP_RETURN_IF_ERROR(Grow(select_scratch_, scratch_bytes));
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

  // The next segment's layout from capacities alone: no sync.
  std::vector<int32_t> cu{0}, base(B);
  max_rows_ = 0;
  for (int r = 0; r < B; ++r) {
    Req& q = reqs[r];
    base[r] = q.cache->segment_length(segment + 1);
    if (!pass[r]) {
      q.n_min = static_cast<int>(oc::FixedRatioMinimum(q.n_min, *params[r]));
      q.n = static_cast<int>(oc::FixedRatioCapacity(q.n, *params[r]));
      q.exact = false;
      q.pos.clear();
      q.index.clear();
      q.selected_at.push_back(segment);
    } else if (q.exact) {  // kept whole: the same rows, renumbered for the next segment
      for (int i = 0; i < q.n; ++i) q.index[i] = base[r] + i;
    }
    kq->begin[r] = cu.back();
    kq->len[r] = q.n;
    q.begin = cu.back();
    cu.push_back(cu.back() + q.n);
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

void CudaModel::ReconcileBoundedCaches(std::vector<Req>& reqs,
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
    for (int s = 0; s < n_segments; ++s) q.added[s] = rows[s];
    for (size_t li = 0; li < q.appended.size(); ++li) {
      const int extra = q.appended[li] - rows[layer_segment_[li]];
      if (q.appended[li] > 0 && extra > 0) q.cache->DropTail(static_cast<int>(li), extra);
    }
    const SequenceStep& step = steps[q.step];
    if (step.kept) {
      for (int s : q.selected_at) step.kept->push_back({drops[s], rows[s + 1], rows[s]});
    }
  }
}

Status CudaModel::ForwardBatch(DeviceContext& ctx, std::span<const SequenceStep> steps,
                               const UniPrefillConfig& uniprefill, const ProgressFn& progress,
                               ForwardStats* stats) {
  if (&ctx != &ctx_ && ctx.device() != Device::kCuda) {
    return InvalidArgument("the CUDA model runs on its own CUDA context, not a CPU one");
  }
  const ModelConfig& c = cfg_;
  const std::vector<int> drops = uniprefill.active_drop_layers();
  UP_RETURN_IF_ERROR(ValidateUniPrefillConfig(uniprefill, c));
  const int n_segments =
      CacheLayout::WithDropLayers(std::vector<CacheLayerSpec>(c.n_layers), drops).n_segments;
  // Validation and positions / indices exactly as the host forward lays them out.
  UP_ASSIGN_OR_RETURN(PackedBatch batch, PackedBatch::Build(steps, c.vocab_size, 0, n_segments));
  const int B = batch.n_seqs();
  if (B == 0) return OkStatus();

  // Requests: fresh (empty cache) first, then the others.
  std::vector<Req> reqs;
  for (int pass = 0; pass < 2; ++pass) {
    for (int r = 0; r < B; ++r) {
      auto* cache = dynamic_cast<CudaSequenceCache*>(steps[r].cache);
      if (cache == nullptr) {
        return InvalidArgument("request " + std::to_string(r) +
                               ": its cache was not made by this CUDA model's NewCache");
      }
      if (cache->empty() != (pass == 0)) continue;
      Req q;
      q.step = r;
      q.cache = cache;
      q.fresh = cache->empty();
      const PackedBatch::Seq& s = batch.seq(r);
      q.SetExactRows(std::vector<int32_t>(batch.positions() + s.begin, batch.positions() + s.end),
                     std::vector<int32_t>(batch.indices() + s.begin, batch.indices() + s.end));
      q.first_rows = q.rows();
      q.added.assign(n_segments, 0);
      q.appended.assign(c.n_layers, 0);
      reqs.push_back(std::move(q));
    }
  }
  fresh_ = 0;
  int max_tokens = 0;
  std::vector<int32_t> ids;
  int begin = 0;
  for (Req& q : reqs) {
    if (q.fresh) ++fresh_;
    q.begin = begin;
    begin += q.rows();
    max_tokens = std::max(max_tokens, q.cache->max_tokens());
    const PackedBatch::Seq& s = batch.seq(q.step);
    ids.insert(ids.end(), batch.token_ids().begin() + s.begin, batch.token_ids().begin() + s.end);
  }
  int64_t T = begin;

  // Sync-free drops when some request may select and every such request does so at a fixed
  // ratio (top-p's kept count is unbounded until known; a forward where nobody selects, e.g. a
  // decode batch, keeps the plain path). UNIPREFILL_GPU_DROP_SYNC=1 forces the synced path
  // (diagnostics and tests).
  bool any_selects = false, all_fixed = true;
  int max_last_n = uniprefill.selection.last_n;
  for (size_t r = 0; r < steps.size(); ++r) {
    const SequenceStep& step = steps[r];
    const UniPrefillConfig& config = step.selection ? *step.selection : uniprefill;
    max_last_n = std::max(max_last_n, config.selection.last_n);
    if (!step.allow_drop) continue;
    if (config.selection.mode != sparsity::SelectionMode::kFixedRatio) all_fixed = false;
    if (batch.seq(static_cast<int>(r)).rows() > config.selection.sink + config.selection.last_n) {
      any_selects = true;
    }
  }
  bounded_ = !drops.empty() && any_selects && all_fixed;
  if (const char* e = std::getenv("UNIPREFILL_GPU_DROP_SYNC"); e && std::string(e) == "1") {
    bounded_ = false;
  }
  layer_segment_.assign(c.n_layers, 0);

  // Staging for every small array of this forward: an upper bound of what the layers Put (each
  // Put pads to 4 ints). Per attention layer: slots, block tables, 5 per-request lists; per drop:
  // gather list, kept counts and rows, kept coordinates, the next segment's arrays (bounded: also
  // source rows, positions, indices, observation rows and coordinates, counts, bases, flags).
  const size_t bt = static_cast<size_t>(pool_->block_tokens());
  const size_t per_layer = T + B * (max_tokens / bt + 2) + 7 * B + 64;
  const size_t per_drop = 6 * T + 6 * B + 64 + (bounded_ ? 4 * T + 3 * B + B * (2 * max_last_n + 4) : 0);
  UP_RETURN_IF_ERROR(staging_.Reserve(c.n_layers * per_layer + drops.size() * per_drop + 4 * T +
                                      8 * B + drops.size() * B + 64));
  UP_RETURN_IF_ERROR(EnsureWork(T, B));
  cudaStream_t stream = ctx_.cuda().stream();
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> events;
  drop_events_ = stats ? &events : nullptr;

  cur_ = 0;
  UP_ASSIGN_OR_RETURN(const int32_t* d_ids, staging_.Put(ids, stream));
  UP_RETURN_IF_ERROR(UploadSegment(reqs));
  if (bounded_) {
    std::vector<int32_t> counts;
    for (const Req& q : reqs) counts.push_back(q.rows());
    UP_ASSIGN_OR_RETURN(d_counts_, staging_.Put(counts, stream));
    UP_ASSIGN_OR_RETURN(auto hist, staging_.Scratch(drops.size() * B));
    d_kept_hist_ = hist.first;
    h_kept_hist_ = hist.second;
  }
  const int64_t H = c.hidden;
  oc::Embedding(ctx_, residual_[cur_].View(DType::kBF16, {T, H}),
                embedding_.View(DType::kBF16, {c.vocab_size, H}), d_ids, embedding_scale_);
  size_t next_drop = 0;
  int segment = 0;
  for (int i = 0; i < c.n_layers; ++i) {
    const Layer& L = layers_[i];
    TensorView res = residual_[cur_].View(DType::kBF16, {T, H});
    TensorView normed = normed_.View(DType::kBF16, {T, H});
    TensorView out = out_.View(DType::kBF16, {T, H});
    // normed = mixer_norm(x + the previous layer's output).
    if (i == 0) {
      oc::RmsNorm(ctx_, normed, res, L.mixer_norm.as<float>(), c.rms_eps);
    } else {
      oc::AddRmsNorm(ctx_, normed, res, out, L.mixer_norm.as<float>(), c.rms_eps);
    }
    DropLayer drop;
    const bool is_drop = next_drop < drops.size() && drops[next_drop] == i;
    if (is_drop) {
      drop.layer = i;
      drop.config = &uniprefill;
      drop.steps = steps;
      drop.stats = stats;
      ++next_drop;
    }
    if (L.attention) {
      UP_RETURN_IF_ERROR(AttentionMixer(i, *L.attention, reqs, is_drop ? &drop : nullptr,
                                        uniprefill.window_mode, segment, &T, out));
    } else {
      UP_RETURN_IF_ERROR(DeltaMixer(i, *L.delta, reqs, T, out));
    }
    if (is_drop) ++segment;
    res = residual_[cur_].View(DType::kBF16, {T, H});
    normed = normed_.View(DType::kBF16, {T, H});
    out = out_.View(DType::kBF16, {T, H});
    if (L.post_mixer_norm.size())
      oc::RmsNorm(ctx_, out, out, L.post_mixer_norm.as<float>(), c.rms_eps);
    oc::AddRmsNorm(ctx_, normed, res, out, L.ffn_norm.as<float>(), c.rms_eps);
    if (L.moe) {
      oc::MoeForward(ctx_, out, normed, L.moe->View(), moe_scratch_.data(), moe_scratch_.size());
    } else {
      const int64_t f = L.gate_up.out / 2;
      oc::Gemm(ctx_, ffn_.View(DType::kBF16, {T, 2 * f}), normed, L.gate_up.view());
      TensorView gate = Rows(Bf16(ffn_), DType::kBF16, T, f, 2 * f);
      oc::GatedActivation(ctx_, gate, gate, Rows(Bf16(ffn_, f), DType::kBF16, T, f, 2 * f),
                          L.activation);
      oc::Gemm(ctx_, out, gate, L.down.view());
    }
    if (L.post_ffn_norm.size()) oc::RmsNorm(ctx_, out, out, L.post_ffn_norm.as<float>(), c.rms_eps);
    if (progress) progress(i + 1, c.n_layers);
  }
  for (Req& q : reqs) q.added[segment] += q.rows();

  // Final norm, each request's last row, logits.
  TensorView normed = normed_.View(DType::kBF16, {T, H});
  oc::AddRmsNorm(ctx_, normed, residual_[cur_].View(DType::kBF16, {T, H}),
                 out_.View(DType::kBF16, {T, H}), output_norm_.as<float>(), c.rms_eps);
  const int32_t* d_last = nullptr;
  if (bounded_) {  // each request's last true row, from the device counts
    UP_ASSIGN_OR_RETURN(auto last, staging_.Scratch(B));
    oc::SegmentTailRows(ctx_, last.first, d_cu_, d_counts_, B, 1);
    d_last = last.first;
  } else {
    std::vector<int32_t> last;
    for (const Req& q : reqs) last.push_back(q.begin + q.rows() - 1);
    UP_ASSIGN_OR_RETURN(d_last, staging_.Put(last, stream));
  }
  TensorView last_h = last_hidden_.View(DType::kBF16, {B, H});
  oc::GatherRows(ctx_, last_h, normed, d_last);
  const TensorView head =
      head_is_embedding_ ? embedding_.View(DType::kBF16, {c.vocab_size, H}) : head_.view();
  oc::Gemm(ctx_, logits_.View(DType::kBF16, {B, c.vocab_size}), last_h, head);
  oc::Bf16ToF32(ctx_, logits_f32_.as<float>(), logits_.data(),
                static_cast<int64_t>(B) * c.vocab_size);
  std::vector<float> logits(static_cast<size_t>(B) * c.vocab_size);
  UP_CUDA_CHECK(cudaMemcpyAsync(logits.data(), logits_f32_.data(), logits.size() * 4,
                                cudaMemcpyDeviceToHost, stream));
  if (bounded_) {
    UP_CUDA_CHECK(cudaMemcpyAsync(h_kept_hist_, d_kept_hist_, drops.size() * B * 4,
                                  cudaMemcpyDeviceToHost, stream));
  }
  // The forward's one host sync (with fixed-ratio drops, its only one).
  UP_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (bounded_) ReconcileBoundedCaches(reqs, steps, drops);
  for (int i = 0; i < B; ++i) {
    float* dst = steps[reqs[i].step].logits;
    if (dst)
      std::memcpy(dst, logits.data() + static_cast<size_t>(i) * c.vocab_size, 4 * c.vocab_size);
  }
  // Commit every cache; sliding pages behind the window go back (windows over alive indices).
  for (Req& q : reqs) {
    q.cache->Commit(static_cast<int>(steps[q.step].tokens.size()), q.added);
    if (uniprefill.window_mode == WindowMode::kAliveIndex) {
      for (int i = 0; i < c.n_layers; ++i) {
        const Layer& L = layers_[i];
        if (L.attention && L.attention->host->window > 0) {
          q.cache->ReleaseBehindWindow(i, L.attention->host->window);
        }
      }
    }
  }
  if (stats) {
    for (size_t e = 0; e < events.size(); ++e) {
      float ms = 0;
      UP_CUDA_CHECK(cudaEventElapsedTime(&ms, events[e].first, events[e].second));
      UP_CUDA_CHECK(cudaEventDestroy(events[e].first));
      UP_CUDA_CHECK(cudaEventDestroy(events[e].second));
      double* slot = e % 3 == 0   ? &stats->scoring_s
                     : e % 3 == 1 ? &stats->selection_s
                                  : &stats->compaction_s;
      *slot += ms / 1000.0;
    }
  }
  drop_events_ = nullptr;
  return OkStatus();
}

}  // namespace

Result<std::unique_ptr<Model>> MakeCudaModel(std::unique_ptr<Model> host, DeviceContext& ctx,
                                             const ProgressFn& progress) {
  if (ctx.device() != Device::kCuda) {
    return InvalidArgument("MakeCudaModel needs a CUDA context");
  }
  auto model = std::make_unique<CudaModel>(std::move(host), ctx);
  UP_RETURN_IF_ERROR(model->Load(progress));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace uniprefill
