// The CUDA backend (cuda_backend.h): its Load (weights: cuda_weights.h), the batch layout, the
// walk's norm / FFN / MoE steps, logits and cache commits. The mixers are in
// cuda_backend_mixers.cc, UniPrefill's drops in cuda_backend_drops.cc.
#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/device_views.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "io/dequant.h"
#include "ops/cuda/cuda_dense_ops.h"
#include "ops/cuda/cuda_linear_attention.h"
#include "ops/cuda/cuda_moe.h"
#include "ops/cuda/cuda_sampling.h"
#include "ops/cuda/cuda_uniprefill.h"
#include "ops/cuda/sm90/flash_attention_wgmma.h"
#include "ops/cuda/sm90/gated_gemm_cutlass.h"
#include "sparsity/drop_plan.h"

namespace uniprefill {
namespace cuda_backend {

namespace oc = ops::cuda;

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

Status CudaBackend::Load(const ProgressFn& progress, GpuAttention attention) {
  const cudaDeviceProp& props = ctx_.cuda().properties();
  wgmma_attention_ = (attention == GpuAttention::kAuto || attention == GpuAttention::kOurs) &&
                     ops::cuda::WgmmaAttentionAvailable(props.major, props.minor);
  // The fused gate | up GEMM (its weights interleaved below) where asked for
  // (UNIPREFILL_CUDA_GATED_GEMM=1), this build and device hold it and TMA can load the rows
  // (16-byte aligned: hidden a multiple of 8).
  gated_gemm_ = gated_gemm_asked_ && ops::cuda::GatedGemmAvailable(props.major, props.minor) &&
                cfg_.hidden % 8 == 0;
  if (attention == GpuAttention::kAuto || attention == GpuAttention::kCudnn) {
    ops::cuda::CudnnOptions cudnn_options;
    cudnn_options.implementation = cudnn_sdpa_;
    cudnn_options.autotune = cudnn_autotune_;
    Result<std::unique_ptr<ops::cuda::CudnnAttention>> cudnn =
        ops::cuda::CudnnAttention::Create(ctx_, cudnn_options);
    if (cudnn.ok()) {
      cudnn_ = std::move(*cudnn);
    } else if (attention == GpuAttention::kCudnn) {
      return cudnn.status();
    }  // kAuto without cuDNN: our kernel everywhere
  }
  const ModelDefinition& e = def_;
  embedding_scale_ = cfg_.embedding_scale;
  const int64_t H = cfg_.hidden;
  vocab_first_ = e.vocab_begin;
  vocab_rows_ = e.vocab_sharded() ? e.vocab_end - e.vocab_begin : cfg_.vocab_size;
  const int64_t V = vocab_rows_;
  if (e.token_embedding.is_random()) {
    UP_ASSIGN_OR_RETURN(DeviceLinear emb, Upload(ctx_, {&e.token_embedding}));
    embedding_ = std::move(emb.w);
  } else {
    const TensorView& table_view = e.token_embedding.parts[0];
    std::vector<float> table(static_cast<size_t>(V) * H);
    UP_RETURN_IF_ERROR(Dequantize(table_view.dtype, table_view.data, table.data(), V * H));
    UP_ASSIGN_OR_RETURN(DeviceLinear emb, UploadRows(table, V, H));
    embedding_ = std::move(emb.w);
  }
  weight_bytes_ += embedding_.size();
  head_is_embedding_ = cfg_.tied_embeddings;
  if (!head_is_embedding_) {
    UP_ASSIGN_OR_RETURN(head_, Upload(ctx_, {&e.head}));
    weight_bytes_ += head_.w.size();
  }
  output_norm_ = UploadF32(e.output_norm);
  layers_.resize(e.layers.size());
  for (size_t i = 0; i < e.layers.size(); ++i) {
    const LayerDefinition& x = e.layers[i];
    Layer& L = layers_[i];
    L.mixer_norm = UploadF32(x.mixer_norm);
    L.ffn_norm = UploadF32(x.ffn_norm);
    if (!x.post_mixer_norm.empty()) L.post_mixer_norm = UploadF32(x.post_mixer_norm);
    if (!x.post_ffn_norm.empty()) L.post_ffn_norm = UploadF32(x.post_ffn_norm);
    if (x.attention) {
      const AttentionWeights& a = *x.attention;
      L.attention = std::make_unique<AttentionLayer>();
      UP_RETURN_IF_ERROR(UploadAttention(ctx_, a, L.attention.get(), &weight_bytes_));
      max_qkv_ = std::max(max_qkv_, L.attention->qkv.out);
      max_attn_ = std::max<int64_t>(max_attn_, int64_t{a.n_heads} * a.head_dim);
    } else {
      const GatedDeltaNetWeights& d = *x.delta;
      L.delta = std::make_unique<DeltaLayer>();
      has_linear_ = true;
      UP_RETURN_IF_ERROR(UploadDelta(ctx_, d, L.delta.get(), &weight_bytes_));
      max_qkv_ = std::max(max_qkv_, L.delta->in_proj.out);
      max_attn_ = std::max<int64_t>(max_attn_, d.value_dim());
      max_conv_ = std::max<int64_t>(max_conv_, d.conv_dim());
      max_hv_ = std::max<int64_t>(max_hv_, d.n_v_heads);
    }
    if (x.ffn) {
      if (gated_gemm_) {  // gate row j at 2j, up row j at 2j + 1 (ops::cuda::GatedGemm)
        const std::vector<int64_t> order = oc::GatedWeightRowOrder(x.ffn->gate_up.out_features / 2);
        UP_ASSIGN_OR_RETURN(L.gate_up, Upload(ctx_, {&x.ffn->gate_up}, &order));
      } else {
        UP_ASSIGN_OR_RETURN(L.gate_up, Upload(ctx_, {&x.ffn->gate_up}));
      }
      UP_ASSIGN_OR_RETURN(L.down, Upload(ctx_, {&x.ffn->down}));
      L.activation = x.ffn->activation;
      max_ffn2_ = std::max(max_ffn2_, L.gate_up.out);
      weight_bytes_ += L.gate_up.w.size() + L.down.w.size();
    } else {
      L.moe = std::make_unique<MoeLayer>();
      UP_RETURN_IF_ERROR(UploadMoe(ctx_, *x.moe, L.moe.get(), &weight_bytes_));
    }
    if (progress) progress(static_cast<int64_t>(i + 1), static_cast<int64_t>(e.layers.size()));
  }
  pool_ = std::make_unique<CudaKvPool>(ctx_, ModelCacheLayout(cfg_, {}), kBlockTokens);
  ctx_.cuda().Synchronize();
  return OkStatus();
}

size_t StagingIntsPerLayer(int64_t rows, int requests, int max_tokens, int block_tokens) {
  return static_cast<size_t>(rows) +
         static_cast<size_t>(requests) * (max_tokens / block_tokens + 2 + 36 + 80) + 96;
}

Status CudaBackend::EnsureWork(int64_t T, int requests) {
  const int64_t H = cfg_.hidden;
  // The per-request buffers (logits f32 [batch, vocab] ~0.5 MB a request at a 128K vocabulary)
  // for a power of two of requests: each growth frees (a device sync) and allocates, and a
  // server's request count climbs one by one as requests arrive.
  const int batch = static_cast<int>(std::bit_ceil(static_cast<unsigned>(std::max(requests, 1))));
  for (DeviceBuffer* b : {&residual_[0], &residual_[1], &normed_, &out_}) {
    UP_RETURN_IF_ERROR(Grow(*b, T * H * 2));
  }
  // residual_ buffers must keep their contents across Ensure calls within a forward: EnsureWork
  // runs once per forward, before the embedding.
  UP_RETURN_IF_ERROR(Grow(qkv_, T * max_qkv_ * 2));
  UP_RETURN_IF_ERROR(Grow(q_kept_, T * max_qkv_ * 2));
  UP_RETURN_IF_ERROR(Grow(attn_, T * max_attn_ * 2));
  // [T, 2f] gate | up, or (the fused gated GEMM) [T, f]: ffn_pairs_ takes the pairs of the
  // forwards that do not run it (GatedFfn).
  UP_RETURN_IF_ERROR(Grow(ffn_, T * (gated_gemm_ ? max_ffn2_ / 2 : max_ffn2_) * 2));
  UP_RETURN_IF_ERROR(Grow(conv_, T * max_conv_ * 2));
  UP_RETURN_IF_ERROR(Grow(gbeta_, T * max_hv_ * 2 * 4));
  UP_RETURN_IF_ERROR(Grow(importance_, T * 4));
  UP_RETURN_IF_ERROR(Grow(kept_rows_, T * 4));
  UP_RETURN_IF_ERROR(Grow(kept_count_, batch * 4));
  UP_RETURN_IF_ERROR(Grow(last_hidden_, batch * H * 2));
  UP_RETURN_IF_ERROR(Grow(q_last_, batch * max_qkv_ * 2));
  UP_RETURN_IF_ERROR(Grow(logits_, static_cast<size_t>(batch) * cfg_.vocab_size * 2));
  if (def_.vocab_sharded()) {
    UP_RETURN_IF_ERROR(Grow(logits_local_, static_cast<size_t>(batch) * vocab_rows_ * 2));
    UP_RETURN_IF_ERROR(Grow(logits_gathered_, static_cast<size_t>(batch) * cfg_.vocab_size * 2));
  }
  UP_RETURN_IF_ERROR(Grow(logits_f32_, static_cast<size_t>(batch) * cfg_.vocab_size * 4));
  for (const Layer& L : layers_) {
    if (L.moe) {
      const oc::MoeDeviceWeights w = L.moe->View();
      UP_RETURN_IF_ERROR(Grow(moe_scratch_, oc::MoeScratchBytes(T, w)));
    }
    if (L.delta && T > oc::kDeltaRuleF32MaxSeqlen) {  // the split delta rule (long rows)
      const GatedDeltaNetWeights& d = *L.delta->host;
      UP_RETURN_IF_ERROR(
          Grow(delta_scratch_, oc::GatedDeltaRuleScratchBytes(T, d.n_v_heads, d.d_v)));
    }
  }
  return OkStatus();
}

Status CudaBackend::UploadSegment(const std::vector<Req>& reqs) {
  cudaStream_t stream = ctx_.cuda().stream();
  std::vector<int32_t> pos, index, cu{0}, slots;
  max_rows_ = 0;
  for (const Req& r : reqs) {
    pos.insert(pos.end(), r.pos.begin(), r.pos.end());
    index.insert(index.end(), r.index.begin(), r.index.end());
    // The linear layers' kernels never see a request without rows (a segment-wise chunk outside
    // its segment): an empty sequence must not touch its state.
    if (r.rows() == 0) continue;
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
  linear_batch_ = static_cast<int>(cu.size()) - 1;
  return OkStatus();
}

Result<bool> CudaBackend::Begin(DeviceContext& ctx, std::span<const SequenceStep> steps,
                                const UniPrefillConfig& uniprefill, int n_segments,
                                ForwardStats* stats) {
  if (&ctx != &ctx_ && ctx.device() != Device::kCuda) {
    return InvalidArgument("the CUDA model runs on its own CUDA context, not a CPU one");
  }
  const ModelConfig& c = cfg_;
  steps_ = steps;
  uniprefill_ = &uniprefill;
  stats_ = stats;
  drops_ = uniprefill.active_drop_layers();
  // Validation and positions / indices exactly as the CPU backend lays them out.
  UP_ASSIGN_OR_RETURN(PackedBatch batch, PackedBatch::Build(steps, c.vocab_size, 0, n_segments));
  const int B = batch.n_seqs();
  reqs_.clear();
  if (B == 0) return false;

  // Requests: fresh (empty cache) first, then the others.
  std::vector<Req>& reqs = reqs_;
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
      q.chunk = steps[r].chunk;
      q.enters = s.enters;
      q.leaves = s.leaves;
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
  // Segment-wise chunks: rows entering at later drop layers (the most rows any segment of this
  // forward can hold is T + entering) and the rows segments' last chunks select among.
  int64_t entering = 0, chunk_candidates = 0;
  chunked_ = false;
  for (Req& q : reqs) {
    if (q.fresh) ++fresh_;
    q.begin = begin;
    begin += q.rows();
    max_tokens = std::max(max_tokens, q.cache->max_tokens());
    const PackedBatch::Seq& s = batch.seq(q.step);
    ids.insert(ids.end(), batch.token_ids().begin() + s.begin, batch.token_ids().begin() + s.end);
    if (q.chunk == nullptr) continue;
    chunked_ = true;
    if (q.enters > 0) entering += q.chunk->rows;
    if (q.chunk->ends_segment) chunk_candidates += q.chunk->segment_rows;
  }
  const int64_t T = begin;
  const int64_t T_max = T + entering;
  rows_ = T;
  segment_ = 0;
  has_out_ = false;
  segment_rows_counted_ = false;

  // Sync-free drops or one host sync per drop: the plan's rule (sparsity/drop_plan.h; top-p's
  // kept count is unknown until read back; a forward where nobody selects, e.g. a decode batch,
  // keeps the plain path). UniPrefillConfig::drop_sync = kEveryDrop forces the synced path.
  std::vector<DropRequest> at_start;
  int max_last_n = uniprefill.selection.last_n;
  size_t cached_entries = 0;  // bounds what ScoreOverCache stages per drop
  for (size_t r = 0; r < steps.size(); ++r) {
    const SequenceStep& step = steps[r];
    const UniPrefillConfig& config = step.selection ? *step.selection : uniprefill;
    max_last_n = std::max(max_last_n, config.selection.last_n);
    DropRequest d;
    d.rows = d.rows_min = batch.seq(static_cast<int>(r)).rows();
    d.allow_drop = step.allow_drop;
    d.cache_holds_tokens = step.cache->length() > 0;
    d.fixed_ratio = config.selection.mode == sparsity::SelectionMode::kFixedRatio;
    d.params = &config.selection;
    if (Selects(d) && d.cache_holds_tokens) cached_entries += step.cache->length() + d.rows;
    // A segment's last chunk scores its segment's rows over the cache (at most all its tokens).
    if (step.chunk && step.chunk->ends_segment) {
      cached_entries += step.cache->length() + step.chunk->rows;
    }
    at_start.push_back(d);
  }
  // Chunks take the synced path: rows leave and enter at drop layers, laid out exactly.
  bounded_ = !chunked_ && PlanSyncFree(at_start, !drops_.empty(), uniprefill.drop_sync);
  layer_segment_.assign(c.n_layers, 0);

  // Staging for every small array of this forward: an upper bound of what the layers Put (each
  // Put pads to 4 ints). Per attention layer: slots, block tables, 5 per-request lists; per drop:
  // gather list, kept counts and rows, kept coordinates, the next segment's arrays (bounded: also
  // source rows, positions, indices, observation rows and coordinates, counts, bases, flags).
  // Chunks also stage, per drop, the selection's kept rows among every candidate and the
  // exchange's next segment (positions, indices, cu_seqlens, slots, a segment end's kept rows).
  const size_t bt = static_cast<size_t>(pool_->block_tokens());
  // (+ cuDNN attention's seq lens and offset arrays: for chunks over a cached prefix five arrays
  // of one or two entries per request, each padded to 4 ints, and the gather's row begins; split
  // prefixes: five arrays of 9 entries and four of 1-2, 76 ints, per request)
  const size_t per_layer = StagingIntsPerLayer(T_max, B, max_tokens, static_cast<int>(bt));
  const size_t per_drop =
      6 * T_max + 6 * B + 64 + 2 * cached_entries + 8 * B +
      (bounded_ ? 4 * T + 3 * B + B * (2 * max_last_n + 4) : 0) +
      (chunked_ ? 3 * T_max + 2 * chunk_candidates + 4 * B + 64 : 0);
  const size_t sampling = 6 * B + 16;  // SampleOnDevice: filters, uniforms, ids, logprobs
  const size_t last_rows = 6 * B + 32;  // KeepLastRows: gather, coordinates, UploadSegment's four
  UP_RETURN_IF_ERROR(staging_.Reserve(c.n_layers * per_layer + drops_.size() * per_drop +
                                          4 * T_max + 8 * B + drops_.size() * B + sampling +
                                          last_rows + 64,
                                      [this](cudaEvent_t e) { return WaitEvent(e); }));
  UP_RETURN_IF_ERROR(EnsureWork(T_max, B));
  cudaStream_t stream = ctx_.cuda().stream();
  events_.clear();
  drop_events_ = stats ? &events_ : nullptr;

  cur_ = 0;
  // Rows at the start and rows entering at later drop layers (segment-wise chunks past segment 0
  // start with none: their rows enter at their segment's drop layer).
  if (trace_) {
    // Each request's work unit: [segment (-1: every layer), rows, cached keys of its segment
    // before it, ends its segment (1/0)], what the scheduler priced the step by.
    std::string units = "[";
    for (const Req& q : reqs) {
      const int segment = q.chunk ? q.chunk->segment : -1;
      const int cached = q.chunk ? q.cache->segment_length(q.chunk->segment) : q.cache->length();
      units += (units.size() > 1 ? ", [" : "[") + std::to_string(segment) + ", " +
               std::to_string(q.chunk ? q.chunk->rows : q.first_rows) + ", " +
               std::to_string(cached) + ", " +
               (q.chunk && q.chunk->ends_segment ? "1" : "0") + "]";
    }
    UP_RETURN_IF_ERROR(trace_->Begin(stream, T_max, B, units + "]"));
  }
  if (GraphEligible()) UP_RETURN_IF_ERROR(BeginCapture());
  UP_ASSIGN_OR_RETURN(d_ids_, staging_.Put(ids, stream));
  UP_RETURN_IF_ERROR(UploadSegment(reqs));
  if (bounded_) {
    std::vector<int32_t> counts;
    for (const Req& q : reqs) counts.push_back(q.rows());
    UP_ASSIGN_OR_RETURN(d_counts_, staging_.Put(counts, stream));
    UP_ASSIGN_OR_RETURN(auto hist, staging_.Scratch(drops_.size() * B));
    d_kept_hist_ = hist.first;
    h_kept_hist_ = hist.second;
  }
  return true;
}

Status CudaBackend::Embed() {
  if (rows_ == 0) return OkStatus();  // only chunks of later segments
  const int64_t H = cfg_.hidden;
  oc::Embedding(ctx_, residual_[cur_].View(DType::kBF16, {rows_, H}),
                embedding_.View(DType::kBF16, {vocab_rows_, H}), d_ids_, embedding_scale_,
                static_cast<int32_t>(vocab_first_));
  if (!def_.vocab_sharded()) return OkStatus();
  // Each token's row is nonzero on the one rank that holds it: the sum is that row, exactly.
  if (comm_ == nullptr) return Internal("a vocabulary shard runs without its communicator");
  return comm_->AllReduceDevice(residual_[cur_].data(), rows_ * H, DType::kBF16,
                                ctx_.cuda().stream());
}

const DeviceBuffer& CudaBackend::NormWeight(int layer, NormSlot slot) const {
  const Layer& L = layers_[layer];
  switch (slot) {
    case NormSlot::kMixer: return L.mixer_norm;
    case NormSlot::kPostMixer: return L.post_mixer_norm;
    case NormSlot::kFfn: return L.ffn_norm;
    case NormSlot::kPostFfn: return L.post_ffn_norm;
  }
  return L.mixer_norm;
}

Status CudaBackend::NormInput(int layer, NormSlot slot) {
  if (rows_ == 0) {  // no rows in this segment (segment-wise chunks): nothing to run
    has_out_ = false;
    return OkStatus();
  }
  const int64_t H = cfg_.hidden;
  TensorView res = residual_[cur_].View(DType::kBF16, {rows_, H});
  TensorView normed = normed_.View(DType::kBF16, {rows_, H});
  const float* w = NormWeight(layer, slot).as<float>();
  if (has_out_) {  // normed = norm(x + the last block's output), x updated
    oc::AddRmsNorm(ctx_, normed, res, out_.View(DType::kBF16, {rows_, H}), w, cfg_.rms_eps);
  } else {
    oc::RmsNorm(ctx_, normed, res, w, cfg_.rms_eps);
  }
  has_out_ = false;
  return OkStatus();
}

Status CudaBackend::NormOutput(int layer, NormSlot slot) {
  if (rows_ == 0) return OkStatus();
  TensorView out = out_.View(DType::kBF16, {rows_, cfg_.hidden});
  oc::RmsNorm(ctx_, out, out, NormWeight(layer, slot).as<float>(), cfg_.rms_eps);
  return OkStatus();
}

Status CudaBackend::Attention(int layer, const DropLayer* drop, QueryRows queries) {
  if (rows_ == 0) {  // no rows in this segment yet: the drop only moves to the next
    layer_segment_[layer] = segment_;
    if (drop) ++segment_;
    return OkStatus();
  }
  TensorView out = out_.View(DType::kBF16, {rows_, cfg_.hidden});
  const bool into_residual = ResidualInGemm(layers_[layer].post_mixer_norm);
  UP_RETURN_IF_ERROR(AttentionMixer(layer, *layers_[layer].attention, reqs_, drop,
                                    uniprefill_->window_mode, segment_, &rows_, out, queries,
                                    into_residual));
  if (drop) ++segment_;
  has_out_ = !into_residual;
  return OkStatus();
}

Status CudaBackend::DeltaNet(int layer) {
  if (rows_ == 0) return OkStatus();
  TensorView out = out_.View(DType::kBF16, {rows_, cfg_.hidden});
  UP_RETURN_IF_ERROR(DeltaMixer(layer, *layers_[layer].delta, reqs_, rows_, out));
  has_out_ = true;
  return OkStatus();
}

Status CudaBackend::GatedFfn(int layer) {
  if (rows_ == 0) return OkStatus();
  const Layer& L = layers_[layer];
  const int64_t T = rows_, H = cfg_.hidden, f = L.gate_up.out / 2;
  TensorView normed = normed_.View(DType::kBF16, {T, H});
  if (gated_gemm_) {  // interleaved gate | up rows (Load); ffn_ holds [T, f]
    TensorView hidden = ffn_.View(DType::kBF16, {T, f});
    if (T >= gated_gemm_min_rows_ && !capturing_ &&
        oc::GatedGemmRuns(ctx_, normed, L.gate_up.view())) {
      oc::GatedGemm(ctx_, hidden, normed, L.gate_up.view(), L.activation, gated_gemm_variant_);
    } else {  // few rows or a captured decode: the [T, 2f] pairs in a buffer of their own
      UP_RETURN_IF_ERROR(Grow(ffn_pairs_, T * 2 * f * 2));
      TensorView pairs = ffn_pairs_.View(DType::kBF16, {T, 2 * f});
      oc::Gemm(ctx_, pairs, normed, L.gate_up.view());
      oc::GatedActivationPairs(ctx_, hidden, pairs, L.activation);
    }
    return DownProjection(L, hidden);
  }
  oc::Gemm(ctx_, ffn_.View(DType::kBF16, {T, 2 * f}), normed, L.gate_up.view());
  TensorView gate = Rows(Bf16(ffn_), DType::kBF16, T, f, 2 * f);
  oc::GatedActivation(ctx_, gate, gate, Rows(Bf16(ffn_, f), DType::kBF16, T, f, 2 * f),
                      L.activation);
  return DownProjection(L, gate);
}

Status CudaBackend::DownProjection(const Layer& L, const TensorView& hidden) {
  const int64_t T = rows_, H = cfg_.hidden;
  if (ResidualInGemm(L.post_ffn_norm)) {  // residual += hidden @ down^T in the epilogue
    oc::GemmAccumulate(ctx_, residual_[cur_].View(DType::kBF16, {T, H}), hidden, L.down.view());
    has_out_ = false;
  } else {
    oc::Gemm(ctx_, out_.View(DType::kBF16, {T, H}), hidden, L.down.view());
    has_out_ = true;
  }
  return OkStatus();
}

Status CudaBackend::Moe(int layer) {
  if (rows_ == 0) return OkStatus();
  const int64_t T = rows_, H = cfg_.hidden;
  // A captured decode step must not sync: our kernel there whatever was asked.
  oc::MoeGemm gemm = oc::MoeGemm::kOurs;
  if (moe_gemm_ == GpuMoeGemm::kOursMmaSync) gemm = oc::MoeGemm::kOursMmaSync;
  if (moe_gemm_ == GpuMoeGemm::kLibrary && !capturing_) gemm = oc::MoeGemm::kLibrary;
  oc::MoeForward(ctx_, out_.View(DType::kBF16, {T, H}), normed_.View(DType::kBF16, {T, H}),
                 layers_[layer].moe->View(), moe_scratch_.data(), moe_scratch_.size(), gemm);
  has_out_ = true;
  return OkStatus();
}

// The final norm of each request's last row (residual += out first), then the head: logits_f32_
// f32 [B, vocab] (a request without rows, a chunk whose rows all left at a drop, gets a zero row;
// its logits are not wanted).
Status CudaBackend::ComputeLogits(bool out_pending) {
  const ModelConfig& c = cfg_;
  const int64_t T = rows_, H = c.hidden;
  const int B = static_cast<int>(reqs_.size());
  cudaStream_t stream = ctx_.cuda().stream();
  TensorView normed = normed_.View(DType::kBF16, {T, H});
  if (out_pending) {
    oc::AddRmsNorm(ctx_, normed, residual_[cur_].View(DType::kBF16, {T, H}),
                   out_.View(DType::kBF16, {T, H}), output_norm_.as<float>(), c.rms_eps);
  } else {  // the last block's output projection added itself (ResidualInGemm)
    oc::RmsNorm(ctx_, normed, residual_[cur_].View(DType::kBF16, {T, H}), output_norm_.as<float>(),
                c.rms_eps);
  }
  const int32_t* d_last = nullptr;
  if (bounded_) {  // each request's last true row, from the device counts
    UP_ASSIGN_OR_RETURN(auto last, staging_.Scratch(B));
    oc::SegmentTailRows(ctx_, last.first, d_cu_, d_counts_, B, 1);
    d_last = last.first;
  } else {
    std::vector<int32_t> last;
    for (const Req& q : reqs_) last.push_back(q.rows() > 0 ? q.begin + q.rows() - 1 : -1);
    UP_ASSIGN_OR_RETURN(d_last, staging_.Put(last, stream));
  }
  TensorView last_h = last_hidden_.View(DType::kBF16, {B, H});
  oc::GatherRows(ctx_, last_h, normed, d_last);
  const TensorView head =
      head_is_embedding_ ? embedding_.View(DType::kBF16, {vocab_rows_, H}) : head_.view();
  if (!def_.vocab_sharded()) {
    oc::Gemm(ctx_, logits_.View(DType::kBF16, {B, c.vocab_size}), last_h, head);
  } else {
    // This rank's columns [B, Vr], every rank's gathered [world, B, Vr], then each block into its
    // columns of logits_ [B, V] (the shards are equal: ShardDefinition splits V evenly).
    if (comm_ == nullptr) return Internal("a vocabulary shard runs without its communicator");
    const int64_t Vr = vocab_rows_;
    oc::Gemm(ctx_, logits_local_.View(DType::kBF16, {B, Vr}), last_h, head);
    UP_RETURN_IF_ERROR(comm_->AllGatherDevice(logits_local_.data(), logits_gathered_.data(),
                                              B * Vr * 2, stream));
    for (int r = 0; r < comm_->world_size(); ++r) {
      UP_CUDA_CHECK(cudaMemcpy2DAsync(logits_.as<uint16_t>() + r * Vr, c.vocab_size * 2,
                                      logits_gathered_.as<uint16_t>() + r * B * Vr, Vr * 2,
                                      Vr * 2, B, cudaMemcpyDeviceToDevice, stream));
    }
  }
  oc::Bf16ToF32(ctx_, logits_f32_.as<float>(), logits_.data(),
                static_cast<int64_t>(B) * c.vocab_size);
  return OkStatus();
}

Status CudaBackend::Finish() {
  const ModelConfig& c = cfg_;
  const int B = static_cast<int>(reqs_.size());
  std::vector<Req>& reqs = reqs_;
  std::span<const SequenceStep> steps = steps_;
  const std::vector<int>& drops = drops_;
  cudaStream_t stream = ctx_.cuda().stream();
  // (A drop at the last layer opens no segment that holds layers: segment_ is then past them.)
  for (Req& q : reqs) {
    if (segment_ < static_cast<int>(q.added.size()) && !segment_rows_counted_) {
      q.added[segment_] += q.rows();
    }
  }
  if (stats_ != nullptr) stats_->last_layer_rows += static_cast<int>(rows_);

  // Final norm, each request's last row, logits: only when a request wants them. A prefill
  // chunk before its last wants none, and its head would be a 1 GB read at the 8B shape (0.24 ms
  // on an H200) for nothing. A vocabulary-split head always runs: its all-gather needs every
  // rank, and a follower's steps never ask for logits (rank 0 samples).
  const bool head_wanted =
      def_.vocab_sharded() || std::any_of(reqs.begin(), reqs.end(), [&](const Req& q) {
        return steps[q.step].logits != nullptr || steps[q.step].sampling != nullptr;
      });
  const bool out_pending = has_out_;
  has_out_ = false;
  if (head_wanted) {
    UP_RETURN_IF_ERROR(ComputeLogits(out_pending));
    if (stats_ != nullptr) stats_->head_rows += B;
  }
  const TensorView logits_f32 = logits_f32_.View(DType::kF32, {B, c.vocab_size});
  // Only what the steps ask for travels back: chosen ids, and logits rows where wanted.
  int32_t* h_ids = nullptr;
  float* h_logprobs = nullptr;
  const bool any_sampling = std::any_of(reqs.begin(), reqs.end(), [&](const Req& q) {
    return steps[q.step].sampling != nullptr;
  });
  if (any_sampling) UP_RETURN_IF_ERROR(SampleOnDevice(logits_f32, &h_ids, &h_logprobs));
  std::vector<int> want_logits;  // reqs indices
  for (int i = 0; i < B; ++i) {
    if (steps[reqs[i].step].logits) want_logits.push_back(i);
  }
  const size_t V = static_cast<size_t>(c.vocab_size);
  UP_ASSIGN_OR_RETURN(float* h_logits, host_logits_.Get(want_logits.size() * V));
  if (static_cast<int>(want_logits.size()) == B) {
    UP_CUDA_CHECK(cudaMemcpyAsync(h_logits, logits_f32_.data(), B * V * 4,
                                  cudaMemcpyDeviceToHost, stream));
  } else {
    for (size_t j = 0; j < want_logits.size(); ++j) {
      UP_CUDA_CHECK(cudaMemcpyAsync(h_logits + j * V, logits_f32_.as<float>() + want_logits[j] * V,
                                    V * 4, cudaMemcpyDeviceToHost, stream));
    }
  }
  if (bounded_) {
    UP_CUDA_CHECK(cudaMemcpyAsync(h_kept_hist_, d_kept_hist_, drops.size() * B * 4,
                                  cudaMemcpyDeviceToHost, stream));
  }
  if (capturing_) UP_RETURN_IF_ERROR(LaunchCaptured());
  // The forward's one host sync (with fixed-ratio drops, its only one), unless nothing goes back
  // to the host: a prefill chunk before its last then returns while the GPU runs it, and the
  // engine schedules and launches the next step meanwhile (stream order keeps the steps in
  // order; the staging's halves keep the next forward's uploads off this one's).
  const bool sync = sync_every_forward_ || any_sampling || !want_logits.empty() || bounded_ ||
                    stats_ != nullptr;
  if (trace_) UP_RETURN_IF_ERROR(trace_->Launched(stream, sync));
  if (sync) {
    UP_RETURN_IF_ERROR(WaitStream(stream));
    retired_.clear();
    if (trace_) UP_RETURN_IF_ERROR(trace_->Synced());
  } else {
    UP_RETURN_IF_ERROR(staging_.MarkInFlight(stream));
  }
  if (bounded_) ReconcileBoundedCaches(reqs, steps, drops);
  for (size_t j = 0; j < want_logits.size(); ++j) {
    std::memcpy(steps[reqs[want_logits[j]].step].logits, h_logits + j * V, 4 * V);
  }
  for (int i = 0; i < B && any_sampling; ++i) {
    const StepSampling* s = steps[reqs[i].step].sampling;
    if (s == nullptr) continue;
    if (s->token) *s->token = h_ids[i];
    if (s->logprob) *s->logprob = h_logprobs[i];
  }
  // Commit every cache; sliding pages behind the window go back (windows over alive indices).
  for (Req& q : reqs) {
    q.cache->Commit(static_cast<int>(steps[q.step].tokens.size()), q.added);
    if (uniprefill_->window_mode == WindowMode::kAliveIndex) {
      for (int i = 0; i < c.n_layers; ++i) {
        const Layer& L = layers_[i];
        if (L.attention && L.attention->host->window > 0) {
          q.cache->ReleaseBehindWindow(i, L.attention->host->window);
        }
      }
    }
  }
  if (stats_) {
    for (size_t e = 0; e < events_.size(); ++e) {
      float ms = 0;
      UP_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[e].first, events_[e].second));
      UP_CUDA_CHECK(cudaEventDestroy(events_[e].first));
      UP_CUDA_CHECK(cudaEventDestroy(events_[e].second));
      double* slot = e % 3 == 0   ? &stats_->scoring_s
                     : e % 3 == 1 ? &stats_->selection_s
                                  : &stats_->compaction_s;
      *slot += ms / 1000.0;
    }
  }
  drop_events_ = nullptr;
  return OkStatus();
}

CudaBackend::~CudaBackend() {
  Abandon();
  for (auto& [batch, exec] : graph_execs_) cudaGraphExecDestroy(exec);
  if (wait_event_ != nullptr) cudaEventDestroy(wait_event_);
}

bool CudaBackend::GraphEligible() const {
  // (Tensor parallel: collectives may synchronise their stream, which a capture forbids.)
  if (!decode_graphs_ || fresh_ > 0 || bounded_ || chunked_ || stats_ != nullptr ||
      comm_ != nullptr) {
    return false;
  }
  for (const Req& q : reqs_) {
    if (q.rows() != 1) return false;
  }
  // A one-row request never selects (Selects needs more rows than S + n), so no drop syncs.
  return true;
}

Status CudaBackend::BeginCapture() {
  // Nothing in the step may synchronise: the pool must not grow mid-capture (each request may
  // open one block per attention layer).
  int attention_layers = 0;
  for (const Layer& L : layers_) attention_layers += L.attention != nullptr;
  UP_RETURN_IF_ERROR(pool_->ReserveFreeBlocks(static_cast<int>(reqs_.size()) * attention_layers));
  // Relaxed: a work buffer that grows mid-step may still cudaMalloc (Grow keeps the old one alive).
  UP_CUDA_CHECK(cudaStreamBeginCapture(ctx_.cuda().stream(), cudaStreamCaptureModeRelaxed));
  capturing_ = true;
  return OkStatus();
}

Status CudaBackend::LaunchCaptured() {
  cudaStream_t stream = ctx_.cuda().stream();
  cudaGraph_t graph = nullptr;
  capturing_ = false;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (ended != cudaSuccess) {
    // Something in the step was not capturable: this step is lost (its requests fail), later
    // decode steps run kernel by kernel.
    (void)cudaGetLastError();
    decode_graphs_ = false;
    std::fprintf(stderr,
                 "uniprefill: a decode step could not be captured as a CUDA graph (%s); decode "
                 "runs without graphs from here on\n",
                 cudaGetErrorString(ended));
    return Internal(std::string("CUDA graph capture of a decode step failed: ") +
                    cudaGetErrorString(ended));
  }
  const int batch = static_cast<int>(reqs_.size());
  auto it = std::find_if(graph_execs_.begin(), graph_execs_.end(),
                         [&](const auto& e) { return e.first == batch; });
  cudaError_t err = cudaSuccess;
  if (it != graph_execs_.end()) {
    // Same topology as the last step of this batch size: only the nodes' parameters change.
    cudaGraphExecUpdateResultInfo info;
    if (cudaGraphExecUpdate(it->second, graph, &info) != cudaSuccess) {
      (void)cudaGetLastError();  // clears the update's error; re-instantiate below
      cudaGraphExecDestroy(it->second);
      graph_execs_.erase(it);
      it = graph_execs_.end();
    }
  }
  if (it == graph_execs_.end()) {
    cudaGraphExec_t exec = nullptr;
    err = cudaGraphInstantiate(&exec, graph, 0);
    if (err == cudaSuccess) it = graph_execs_.insert(graph_execs_.end(), {batch, exec});
  }
  if (err == cudaSuccess) err = cudaGraphLaunch(it->second, stream);
  cudaGraphDestroy(graph);
  UP_CUDA_CHECK(err);
  return OkStatus();
}

void CudaBackend::Abandon() {
  if (!capturing_) return;
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(ctx_.cuda().stream(), &graph) == cudaSuccess && graph) {
    cudaGraphDestroy(graph);
  }
  (void)cudaGetLastError();
  retired_.clear();
}

Status CudaBackend::SampleOnDevice(const TensorView& logits, int32_t** ids, float** logprobs) {
  const int B = static_cast<int>(reqs_.size());
  const int64_t V = cfg_.vocab_size;
  cudaStream_t stream = ctx_.cuda().stream();
  // Rows without a request for a token get greedy filters (their id is not read).
  std::vector<oc::SamplingRow> rows(B);
  std::vector<float> uniforms(B, 0.0f);
  bool all_greedy = true;
  for (int i = 0; i < B; ++i) {
    const StepSampling* s = steps_[reqs_[i].step].sampling;
    if (s == nullptr) continue;
    if (!(s->uniform >= 0.0f && s->uniform < 1.0f)) {
      return InvalidArgument("request " + std::to_string(reqs_[i].step) +
                             ": StepSampling::uniform must lie in [0, 1)");
    }
    rows[i] = {s->temperature, s->top_k, s->top_p, s->min_p};
    uniforms[i] = s->uniform;
    all_greedy = all_greedy && s->temperature <= 0.0f;
  }
  UP_ASSIGN_OR_RETURN(auto id_scratch, staging_.Scratch(B));
  UP_ASSIGN_OR_RETURN(auto lp_scratch, staging_.Scratch(B));
  float* d_logprobs = reinterpret_cast<float*>(lp_scratch.first);
  if (all_greedy) {
    const size_t bytes = oc::ArgMaxScratchBytes(ctx_, B, V);
    UP_RETURN_IF_ERROR(Grow(argmax_scratch_, bytes));
    oc::ArgMax(ctx_, id_scratch.first, d_logprobs, logits, argmax_scratch_.data(), bytes);
  } else {
    if (V > oc::MaxSampleVocab(ctx_)) {
      return InvalidArgument("on-device sampling holds at most " +
                             std::to_string(oc::MaxSampleVocab(ctx_)) +
                             " vocabulary entries per row on this GPU; this model has " +
                             std::to_string(V) + ": sample the host logits instead");
    }
    // SamplingRow is four 4-byte fields: staged as ints like every small array.
    static_assert(sizeof(oc::SamplingRow) == 16);
    std::vector<int32_t> row_words(4 * static_cast<size_t>(B)), uniform_words(B);
    std::memcpy(row_words.data(), rows.data(), row_words.size() * 4);
    std::memcpy(uniform_words.data(), uniforms.data(), uniform_words.size() * 4);
    UP_ASSIGN_OR_RETURN(const int32_t* d_rows, staging_.Put(row_words, stream));
    UP_ASSIGN_OR_RETURN(const int32_t* d_uniforms, staging_.Put(uniform_words, stream));
    oc::Sample(ctx_, id_scratch.first, d_logprobs, logits,
               reinterpret_cast<const oc::SamplingRow*>(d_rows),
               reinterpret_cast<const float*>(d_uniforms));
  }
  UP_CUDA_CHECK(cudaMemcpyAsync(id_scratch.second, id_scratch.first, B * 4,
                                cudaMemcpyDeviceToHost, stream));
  UP_CUDA_CHECK(cudaMemcpyAsync(lp_scratch.second, lp_scratch.first, B * 4,
                                cudaMemcpyDeviceToHost, stream));
  *ids = id_scratch.second;
  *logprobs = reinterpret_cast<float*>(lp_scratch.second);
  return OkStatus();
}

}  // namespace cuda_backend

Result<std::unique_ptr<LayerBackend>> MakeCudaBackend(const ModelDefinition& definition,
                                                      DeviceContext& ctx,
                                                      const LoadOptions& options) {
  if (ctx.device() != Device::kCuda) {
    return InvalidArgument("MakeCudaBackend needs a CUDA context");
  }
  auto backend = std::make_unique<cuda_backend::CudaBackend>(
      definition, ctx, options.gpu_delta_rule, options.gpu_decode_graphs, options.gpu_moe_gemm);
  backend->set_prefix_split_min_keys(options.gpu_prefix_split_min_keys);
  backend->set_cudnn_autotune(options.gpu_cudnn_autotune);
  UP_ASSIGN_OR_RETURN(cuda_backend::CudaDiagnostics diagnostics,
                      cuda_backend::DiagnosticsFromEnvironment());
  backend->set_diagnostics(std::move(diagnostics));
  UP_RETURN_IF_ERROR(backend->Load(options.progress, options.gpu_attention));
  return std::unique_ptr<LayerBackend>(std::move(backend));
}

}  // namespace uniprefill
