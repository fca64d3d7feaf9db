// The CUDA backend's private declarations, shared by its source files: cuda_backend.cc (load, batch
// layout, the walk's norm / FFN / MoE steps, logits and commits), cuda_backend_mixers.cc (the
// attention and Gated DeltaNet mixers), cuda_backend_drops.cc (UniPrefill drops: synced, and
// sync-free over bounded segments) and cuda_backend_chunks.cc (segment-wise chunked prefill: rows
// leaving for and entering from the caches' boundaries). Not for use outside src/backend/cuda.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "core/cuda/cuda_context.h"
#include "core/cuda/device_buffer.h"
#include "dist/communicator.h"
#include "backend/cuda/cuda_kv_cache.h"
#include "backend/cuda/cuda_weights.h"
#include "backend/cuda/pinned_staging.h"
#include "backend/cuda/cuda_diagnostics.h"
#include "backend/cuda/step_trace.h"
#include "backend/cuda/wgmma_attention_views.h"
#include "model/layer_backend.h"
#include "model/model.h"
#include "model/model_definition.h"
#include "model/packed_batch.h"
#include "ops/cuda/cudnn_attention.h"

namespace uniprefill::cuda_backend {

// Device KV pages (the serving engine may fix another size).
inline constexpr int kBlockTokens = 16;
inline constexpr float kL2NormEps = 1e-6f;

// Grows b to at least `bytes`, zero-filled on `stream` (see cuda_model.cc).
Status Ensure(DeviceBuffer& b, size_t bytes, cudaStream_t stream);
// What one attention layer of a forward stages at most (CudaBackend::Begin's bound): its rows'
// slots, and per request a block table of the longest cache (max_tokens entries) and its lists.
size_t StagingIntsPerLayer(int64_t rows, int requests, int max_tokens, int block_tokens);

// A request's boundary rows on the device (segment-wise chunks, kv/sequence_cache.h):
// bf16 [capacity, hidden], the residual's dtype.
class DeviceBoundaryRows final : public BoundaryStorage {
 public:
  size_t bytes() const override { return x.size(); }
  uint16_t* row(int64_t i, int64_t hidden) const { return x.as<uint16_t>() + i * hidden; }
  DeviceBuffer x;
  int capacity = 0;
};

// One request of a forward, as the host tracks it.
// Query rows per CTA of the kernels that run a chunk over its cached prefix: each CTA attends
// every key for its tile however few of its rows are real. Ours: flash_attention_wgmma.cu's
// kBlockM. cuDNN's fused kernel on sm_90 (head dim 128): chunks of 256 / 384 / 512 rows over 32K
// keys ran at 287 / 424 / 553 TFLOP/s (64 / 96 / 128 CTAs on 132 SMs). Used to count waves
// (cuda_backend_split_kv.cc) and to price chunks in whole tiles (PrefixAttentionCosts).
inline constexpr int kOurQueryTile = 128;
inline constexpr int kCudnnQueryTile = 128;

struct Req {
  int step = 0;
  CudaSequenceCache* cache = nullptr;
  bool fresh = false;               // its cache held nothing before this step
  // A segment-wise chunk (else nullptr): its rows enter at drop layer d_enters (0: the embedding;
  // 0 rows before) and leave at d_{leaves + 1} (-1: they reach the logits; 0 rows after).
  const SegmentChunk* chunk = nullptr;
  int enters = 0, leaves = -1;
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

class CudaBackend final : public LayerBackend {
 public:
  CudaBackend(const ModelDefinition& def, DeviceContext& ctx, DeltaRuleChoice delta_rule,
              bool decode_graphs, GpuMoeGemm moe_gemm)
      : def_(def), ctx_(ctx), cfg_(def.config), delta_rule_(delta_rule), moe_gemm_(moe_gemm),
        decode_graphs_(decode_graphs) {}
  ~CudaBackend() override;

  // Uploads the weights; with GpuAttention::kCudnn / kAuto also makes the cuDNN attention (for kCudnn
  // an error if this
  // build or machine has no cuDNN).
  Status Load(const ProgressFn& progress, GpuAttention attention);
  // Tensor parallel (dist/communicator.h): a rank's shard of the model; the walk calls ReduceOut
  // after each row-parallel block, and the drops all-reduce their block scores on the device.
  // The communicator needs device collectives (NCCL, or staged for tests).
  Status SetTensorParallel(dist::Communicator* comm) override;
  Status ReduceOut(dist::Communicator& comm) override;
  // The host waits of a step: plain syncs, or under tensor parallelism the communicator's
  // bounded wait (dist::Communicator::WaitForDevice), so that a rank that died or hangs ends a
  // step in Unavailable within the timeout instead of stalling this rank forever.
  Status WaitStream(cudaStream_t stream);
  Status WaitEvent(cudaEvent_t event);
  // LoadOptions::gpu_prefix_split_min_keys (0: never split a chunk's prefix).
  void set_prefix_split_min_keys(int keys) { prefix_split_min_keys_ = keys; }
  // LoadOptions::gpu_cudnn_autotune; before Load.
  void set_cudnn_autotune(bool on) { cudnn_autotune_ = on; }
  // What the environment asks for (cuda_diagnostics.h), set once by MakeCudaBackend.
  void set_diagnostics(CudaDiagnostics d) {
    trace_ = std::move(d.trace);
    sync_every_forward_ = d.sync_every_forward;
    prefix_copy_ = d.prefix_copy;
    split_on_cudnn_ = d.split_on_cudnn;
    untiled_price_ = d.untiled_price;
    decodes_as_rows_ = d.decodes_as_rows;
    weight_floor_ = d.weight_floor;
    small_pieces_ = d.small_pieces;
    prefix_one_launch_ = d.prefix_one_launch;
    separate_rope_ = d.separate_rope;
    kept_queries_on_flash_ = d.kept_queries_on_flash;
    residual_in_gemm_ = d.residual_in_gemm;
    gated_gemm_asked_ = d.gated_gemm;
    gated_gemm_min_rows_ = d.gated_gemm_min_rows;
    gated_gemm_variant_ = d.gated_gemm_variant;
    ctx_.cuda().SetGemmMaxRows(d.gemm_max_rows);
    align_step_rows_ = d.align_step_rows;
    gemm_tune_ = d.gemm_tune;
    staging_.set_separate_uploads(d.separate_uploads);
    cudnn_sdpa_ = d.cudnn_sdpa;
    if (d.attention_slowdown > 0) {  // FLOPs at that rate, no copy cost: never measured
      prefix_cost_ = PrefixAttentionCost{d.attention_slowdown, 0.0};
      slowdown_fixed_ = true;
    }
    prefix_cost_.tile_overshoot = d.tile_overshoot;
    wgmma_choices_.tile_order = d.wgmma_group_order
                                    ? ops::cuda::WgmmaTileOrder::kKvGroupLongestFirst
                                    : ops::cuda::WgmmaTileOrder::kHeadMajor;
    wgmma_choices_.skip_unit_rescale = d.wgmma_skip_unit_rescale;
    wgmma_choices_.schedule = d.wgmma_schedule;
  }

  Device device() const override { return Device::kCuda; }
  size_t resident_weight_bytes() const override { return weight_bytes_; }
  std::unique_ptr<SequenceCache> NewCache(const CacheLayout& layout,
                                          int max_tokens) const override {
    return std::make_unique<CudaSequenceCache>(layout, max_tokens, pool_.get(),
                                               /*runs=*/!prefix_copy_);
  }
  Status FixCachePool(const CacheLayout& layout, int num_blocks, int block_tokens) override {
    pool_ = std::make_unique<CudaKvPool>(ctx_, layout, block_tokens);
    return pool_->FixCapacity(num_blocks);
  }

  Result<bool> Begin(DeviceContext& ctx, std::span<const SequenceStep> steps,
                     const UniPrefillConfig& uniprefill, int n_segments,
                     ForwardStats* stats) override;
  Status Embed() override;
  Status NormInput(int layer, NormSlot slot) override;
  Status NormOutput(int layer, NormSlot slot) override;
  Status Attention(int layer, const DropLayer* drop, QueryRows queries) override;
  Status DeltaNet(int layer) override;
  Status GatedFfn(int layer) override;
  Status Moe(int layer) override;
  Status ExchangeSegmentRows(int segment) override;
  Status PrepareServing(int max_step_rows, int max_context) override;
  bool supports_segment_chunks() const override { return true; }
  PrefixAttentionCost PrefixAttentionCosts() const override { return prefix_cost_; }
  Status Finish() override;
  void Abandon() override;
  // A stream sync (not while a graph is being captured: the capture must not be broken).
  Status Synchronize() override {
    return capturing_ ? OkStatus() : WaitStream(ctx_.cuda().stream());
  }
  // The step trace's phase event (StepTrace::Mark), when it asks for phases; never inside a
  // graph capture (an event recorded there would time nothing).
  Status MarkPhase(WalkPhase phase) override {
    if (!trace_ || !trace_->phases() || capturing_) return OkStatus();
    return trace_->Mark(ctx_.cuda().stream(), WalkPhaseName(phase));
  }

 private:
  const DeviceBuffer& NormWeight(int layer, NormSlot slot) const;
  // Finish's final norm and head (logits_f32_ f32 [requests, vocab]); out_pending: out_ holds the
  // last block's output, not yet in the residual.
  Status ComputeLogits(bool out_pending);
  Status EnsureWork(int64_t rows, int batch);
  // During a graph capture the replaced buffer stays alive until the step's sync: nodes captured
  // before the growth still point into it.
  Status Grow(DeviceBuffer& b, size_t bytes) {
    if (capturing_ && b.size() < bytes) retired_.push_back(std::move(b));
    return Ensure(b, bytes, ctx_.cuda().stream());
  }
  // Decode steps as CUDA graphs (LoadOptions::gpu_decode_graphs): whether this step qualifies
  // (every request one token, none fresh, nobody selecting), and the capture around its work.
  bool GraphEligible() const;
  Status BeginCapture();
  // Ends the capture and launches the step's graph (the batch size's executable, updated).
  Status LaunchCaptured();

  // Uploads the current segment's per-row arrays and per-request lists.
  Status UploadSegment(const std::vector<Req>& reqs);
  // Segment-wise chunks (cuda_backend_chunks.cc): a segment's last chunk left, so its collected
  // rows shrink to the kept ones and become the next segment's ready rows; and boundary storage
  // that goes away mid-forward stays alive until the forward's sync (copies may still read it).
  Status EndSegment(SegmentBoundary& b);
  void Retire(std::unique_ptr<BoundaryStorage> data);
  // The attention block; its output projection into `out`, or with add_to_residual added to the
  // residual (residual_[cur_] after the drop's compaction) in the GEMM's epilogue.
  Status AttentionMixer(int layer_index, const AttentionLayer& L, std::vector<Req>& reqs,
                        const DropLayer* drop, WindowMode window_mode, int segment, int64_t* rows,
                        TensorView out, QueryRows queries, bool add_to_residual = false);
  // Whether a block's output projection adds into the residual itself (UNIPREFILL_CUDA_RESIDUAL_
  // IN_GEMM): only where the residual takes the output as it is (no post-norm between them, no
  // tensor-parallel all-reduce of partial outputs).
  bool ResidualInGemm(const DeviceBuffer& post_norm) const {
    return residual_in_gemm_ && comm_ == nullptr && post_norm.size() == 0;
  }
  // A dense FFN's down projection of hidden bf16 [rows_, f]: into out_, or (ResidualInGemm) added
  // to the residual.
  Status DownProjection(const Layer& L, const TensorView& hidden);
  // cuDNN's fused attention for the fresh requests `which` (those of [0, fresh) with rows: a
  // segment-wise chunk may have none in this segment) of an uncompacted attention layer
  // whose mask coordinates are the rows' indices (causal, or a window by alive index, or by
  // position in segment 0); false (FlashAttention then runs them) when cuDNN has no plan for this
  // shape (that shape falls back from then on) or a plan fails to run (cuDNN is off for the
  // model's life); said once on stderr.
  struct KeptQueries;
  // A drop layer's keys when its queries were compacted to the kept rows before their attention:
  // each request's key rows (the step's rows before the drop) and their mask coordinates.
  struct DropKeys {
    std::vector<int> begin, len;      // per request, rows of k / v (len: capacities when bounded)
    const int32_t* counts = nullptr;  // a sync-free batch's true key counts (device, per request)
    const int32_t* coord = nullptr;   // device int32 [rows of k]: the keys' alive indices
  };
  // Our Hopper kernel (ops/cuda/sm90/flash_attention_wgmma.h) for fresh requests `which`, when
  // HopperKernelCovers the layer (the caller checks that); with `drop_keys`, the queries are a
  // drop layer's kept rows (kq.compacted), each masked by its coordinate against those keys. False
  // (the next kernel runs them) when the requests' rows do not fit its argument shape
  // (non-consecutive requests of a sync-free batch).
  Result<bool> WgmmaPrefill(const std::vector<int>& which, const TensorView& q, const TensorView& k,
                            const TensorView& v, const TensorView& attn, const KeptQueries& kq,
                            const ops::AttentionParams& params,
                            const DropKeys* drop_keys = nullptr);
  Result<bool> CudnnPrefill(const std::vector<int>& which, const TensorView& q,
                            const TensorView& k, const TensorView& v, const TensorView& attn,
                            const KeptQueries& kq, const ops::AttentionParams& params);
  // Whether a cuDNN call ran; false (said once on stderr) when the engine's own kernel must run
  // instead: for this shape from now on, or for every shape when a plan failed to run.
  // CudnnPrefill's one call for requests `which` (rows_bucket: CudnnVarlen::rows_bucket).
  Result<bool> CudnnPrefillSet(const std::vector<int>& which, const TensorView& q,
                               const TensorView& k, const TensorView& v, const TensorView& attn,
                               const KeptQueries& kq, const ops::AttentionParams& params,
                               int rows_bucket);
  bool CudnnRan(const Status& st, const char* what);
  // PrepareServing with UNIPREFILL_CUDA_GEMM_TUNE=1: ops::cuda::TuneGemms over every layer's
  // weights at 64-row buckets up to the step budget (at most 2048 rows), once.
  Status TuneLinearGemms(int step_rows);
  // PrepareServing: with cuDNN loaded, builds the prefix graph of layer L's shape by one
  // RunPrefix of q's rows (the last of K zero keys) into attn; vb holds q's and attn's offsets.
  // With `ffn` (a dense FFN's gate | up weight, or null) it also measures PrefixAttentionCosts:
  // that prefix attention on the kernel PrefixPrefill runs (ours on Hopper, else cuDNN's), and
  // the copy of its K keys out of the pool, against the FFN GEMM on the same rows.
  Status WarmPrefixGraph(const AttentionLayer& L, const TensorView& q, const TensorView& attn,
                         const ops::cuda::CudnnVarlen& vb, int64_t K, int max_context,
                         const DeviceLinear* ffn);
  // Attention of requests `which` whose query rows are the newest entries of layer li's cache
  // (chunks of a prefill over its earlier chunks, full attention) over the cache's entries, read
  // in place from a run of blocks or copied out of the KV pool into prefix_kv_: our Hopper kernel
  // for a chunk it covers (its keys split where its CTAs fill the SMs poorly: WgmmaPrefixSplits),
  // else cuDNN's split-KV pieces for a short chunk deep in a prompt (with cuDNN loaded), else
  // cuDNN's fused attention (CudnnAttention::RunPrefix). Called with either loaded
  // (PrefixKernelsCover): without cuDNN the Hopper kernel runs every chunk it covers (on the H200
  // the cache kernel took 18x as long). false when neither can run a chunk: the caller's cache
  // kernel then recomputes every request of `which`.
  Result<bool> PrefixPrefill(int li, int hkv, const std::vector<int>& which, const TensorView& q,
                             const TensorView& attn, const KeptQueries& kq,
                             const ops::AttentionParams& params);
  // Whether PrefixPrefill has a kernel for chunks of a layer with this head dim and window.
  bool PrefixKernelsCover(int64_t head_dim, int window) const;
  // Whether our Hopper kernel (WgmmaPrefill, PrefixPrefill) covers a layer of this head dim and
  // window: loaded on a compute capability 9.0 device, head dim 128, full attention.
  bool HopperKernelCovers(int64_t head_dim, int window) const {
    return wgmma_attention_ && head_dim == 128 && window == 0;
  }
  // How many pieces split-KV cuts a chunk of q_rows queries (hq heads) over `prefix` cached keys
  // into: 0 (no split) unless every piece holds prefix_split_min_keys_ keys and either the
  // chunk's query tiles fill their last wave of SMs poorly or the prefix is deep (measured on
  // the H200: cuda_backend_split_kv.cc); 0 once cuDNN found no plan for the pieces.
  // A chunk our Hopper kernel would run whole (whole_on_cudnn false) is not split for depth alone.
  int PrefixPieces(int q_rows, int hq, int prefix, bool whole_on_cudnn) const;
  // Our Hopper kernel's key splits for a chunk of q_rows queries (hq heads) over `prefix` cached
  // keys: 1 (whole) when its (query tile, head) CTAs fill their last wave of SMs well, else the
  // fewest splits (each of at least prefix_split_min_keys_ keys) that fill the waves best.
  int WgmmaPrefixSplits(int q_rows, int hq, int prefix) const;
  // The same for `tiles` (query tile, head) pairs, the longest walk over `keys` keys.
  int WgmmaSplitsFor(int64_t tiles, int64_t keys) const;
  // Several requests' chunks in one launch (q_len[i] rows over kv_len[i] keys each, hq heads):
  // the split count whose modelled launch is shortest (ops::PlanKeySplits: chunks of different
  // depths have CTAs of different lengths, which the fill rule above does not see). Remembered
  // for the last problem, which every full-attention layer of a forward repeats.
  int WgmmaBatchSplits(const std::vector<int32_t>& q_len, const std::vector<int32_t>& kv_len,
                       int hq);
  // Our Hopper kernel on one request's chunk over its cached prefix (q_len rows from q_row of q
  // and attn; keys from row kv_row of k / v, the prefix's then the chunk's own) in `splits` key
  // splits (1: whole, written to attn directly; else partial outputs merged into attn): a
  // WgmmaPrefixBatch of one. false when the kernel does not cover the views.
  Result<bool> WgmmaPrefixAttention(const TensorView& q, const TensorView& attn, int q_row,
                                    int q_len, const TensorView& k, const TensorView& v,
                                    int kv_row, int kv_len, int splits, float scale);
  // Our Hopper kernel on several requests' chunks in one launch (UNIPREFILL_CUDA_PREFIX_ONE_LAUNCH):
  // request i's queries are rows [q_begin[i], + q_len[i]) of q and attn, its keys rows
  // [kv_row[i], + kv_len[i]) of k / v (one buffer for all: the pool's K and V planes, or the
  // gathered copy; rows past a request's keys are read and masked, so they must hold finite
  // values: the pool is zeroed when allocated), in `splits` key splits alike (0: WgmmaSplitsFor
  // for one request, WgmmaBatchSplits for several), merged per request (ForwardStats::split_prefix_attentions counts
  // each). false when the kernel does not cover the views.
  Result<bool> WgmmaPrefixBatch(const TensorView& q, const TensorView& attn,
                                const std::vector<int32_t>& q_begin,
                                const std::vector<int32_t>& q_len, const TensorView& k,
                                const TensorView& v, const std::vector<int32_t>& kv_row,
                                const std::vector<int32_t>& kv_len, int splits, float scale);
  // Serving: the smallest prepared step budget that holds `rows` query rows (the query-row bucket
  // of the graphs built for it), or 0 (none: graphs keyed by powers of two).
  int ServeRowsBucket(int rows) const;
  // One request's chunk over its cached prefix by split-KV: its q_len query rows from row q_row
  // of q and attn (bf16 [rows, Hq, D], rows strided) over its entries copied from row kv_row of
  // k, v (bf16 [keys, Hkv, D]; prefix entries, then the chunk's own q_len), the prefix cut into
  // `pieces` non-causal pieces plus the chunk's own keys (causal), merged into attn. false when
  // cuDNN cannot run it.
  // PrepareServing: builds split-KV's two graphs by one split of q's rows over K keys.
  Status WarmSplitGraphs(const TensorView& q, const TensorView& attn, const TensorView& k,
                         const TensorView& v, int64_t K, const ops::AttentionParams& params);
  Result<bool> SplitPrefixAttention(const TensorView& q, const TensorView& attn, int q_row,
                                    int q_len, const TensorView& k, const TensorView& v,
                                    int kv_row, int prefix, int pieces,
                                    const ops::AttentionParams& params);
  // The paged decode kernel for `run`: requests of one query row each, at consecutive rows.
  Status DecodeRun(int li, int hkv, const std::vector<int>& run, const TensorView& q_rows,
                   const int32_t* q_coord, const std::vector<int>& q_begin, bool by_position,
                   const TensorView& attn, const ops::AttentionParams& ap);
  Status DeltaMixer(int layer_index, const DeltaLayer& L, const std::vector<Req>& reqs,
                    int64_t rows, TensorView out);
  // The query side of a drop: which rows get an attention output, where, at which coordinates.
  struct KeptQueries {
    TensorView rows;
    const int32_t* coord = nullptr;
    std::vector<int> begin, len;
    int64_t total = 0;
    bool compacted = false;  // rows are gathered kept rows (q_kept_)
  };
  // A drop that learns the kept rows by one host sync and lays the next segment out exactly (top-p,
  // or UniPrefillConfig::drop_sync = DropSync::kEveryDrop).
  Status SyncedDrop(const AttentionLayer& L, std::vector<Req>& reqs, const DropLayer& drop,
                    int segment, int64_t T, KeptQueries* kq);
  // importance f32 [candidates] of a request's newest `candidates` entries of `layer` (the step's
  // rows; a segment's last chunk: every row of the segment): q_obs (its last n queries,
  // coordinates q_coord) against every key the layer holds for it.
  Status ScoreOverCache(int layer, const Req& req, int candidates, const TensorView& q_obs,
                        const int32_t* q_coord, const AttentionWeights& a, float* importance);
  // A fixed-ratio drop without a host sync (bounded segments, ops/cuda/cuda_uniprefill.h): the
  // kept counts stay on the device; later launches are sized by FixedRatioCapacity; the host
  // learns the counts after the forward's final sync (ReconcileBoundedCaches).
  Status BoundedDrop(const AttentionLayer& L, std::vector<Req>& reqs, const DropLayer& drop,
                     int segment, int64_t T, KeptQueries* kq);
  // QueryRows::kLastOfEach after the layer's keys and values are cached (and a drop's selection):
  // each request keeps its last row of kq's query rows (residual, query and gate, mask
  // coordinate; in bounded segments its last true row, found on the device), laid out as
  // compacted queries; `segment` is the segment the rows are in now (cuda_backend_last_rows.cc).
  Status KeepLastRows(const AttentionLayer& L, std::vector<Req>& reqs, int segment,
                      KeptQueries* kq);
  // After the final sync: true segment lengths, cache entry counts and kept records.
  void ReconcileBoundedCaches(std::vector<Req>& reqs, std::span<const SequenceStep> steps,
                              const std::vector<int>& drops);
  // The next token of every step with SequenceStep::sampling, chosen on the device from
  // logits f32 [B, V] (rows in reqs_ order); ids and logprobs land in pinned *ids / *logprobs
  // ([B] each), valid after the forward's final sync.
  Status SampleOnDevice(const TensorView& logits, int32_t** ids, float** logprobs);
  // Records *event on the forward's stream when drop timings are asked for (ForwardStats).
  Status Mark(cudaEvent_t* event);

  const ModelDefinition& def_;
  DeviceContext& ctx_;
  ModelConfig cfg_;
  int64_t weight_bytes_ = 0;
  mutable std::unique_ptr<CudaKvPool> pool_;

  DeviceBuffer embedding_;  // bf16 [V, hidden]
  DeviceLinear head_;       // bf16 [V, hidden] (may alias embedding_ when tied: then empty)
  bool head_is_embedding_ = false;
  float embedding_scale_ = 1.0f;
  // The vocabulary rows this rank holds (embedding and head): ids vocab_first_ ..
  // vocab_first_ + vocab_rows_ - 1; every row unless the definition is vocabulary-sharded (tensor
  // parallel: the embedded rows are all-reduced, the logits all-gathered).
  int64_t vocab_first_ = 0, vocab_rows_ = 0;
  bool has_linear_ = false;  // any Gated DeltaNet layer (state slots needed)
  DeltaRuleChoice delta_rule_ = DeltaRuleChoice::kAuto;  // LoadOptions::gpu_delta_rule
  GpuMoeGemm moe_gemm_ = GpuMoeGemm::kOurs;              // LoadOptions::gpu_moe_gemm
  std::unique_ptr<ops::cuda::CudnnAttention> cudnn_;    // LoadOptions::gpu_attention (null: ours)
  bool wgmma_attention_ = false;  // LoadOptions::gpu_attention on a compute capability 9.0 device
  bool cudnn_autotune_ = true;    // LoadOptions::gpu_cudnn_autotune
  DeviceBuffer output_norm_;
  std::vector<Layer> layers_;

  // Work buffers (grow-only).
  int64_t max_qkv_ = 0, max_attn_ = 0, max_ffn2_ = 0, max_conv_ = 0, max_hv_ = 0;
  DeviceBuffer residual_[2], normed_, out_, qkv_, q_kept_, attn_, ffn_, ffn_pairs_, conv_, gbeta_;
  DeviceBuffer delta_scratch_;  // GatedDeltaRule's split kernel (rows x value heads)
  DeviceBuffer importance_, kept_rows_, kept_count_, select_scratch_, moe_scratch_, decode_scratch_,
      logits_, logits_f32_, last_hidden_, argmax_scratch_;
  // Vocabulary-sharded logits: bf16 [B, vocab_rows_] this rank's, bf16 [world, B, vocab_rows_]
  // every rank's (gathered, then laid out as logits_ [B, V]).
  DeviceBuffer logits_local_, logits_gathered_;
  PinnedFloats host_logits_;  // f32 [B, V]: the rows the steps want on the host
  DeviceBuffer cache_keys_, cache_coords_, cache_importance_;  // ScoreOverCache's gathers
  // bf16 [2 (K, V), keys, kv_dim]: chunks' cached prefixes copied out of the pool (sized by the
  // longest prefix of a step, not by the step budget).
  DeviceBuffer prefix_kv_;
  // Serving (PrepareServing; 0: not serving): cuDNN graphs keyed by the step budget (query rows)
  // and the context (prefix rows) instead of powers of two, so a server meets only graphs it
  // built before its first request. Fresh requests then run cuDNN one at a time (batch 1).
  // Several budgets may be prepared (a server's --max-batched-tokens and --prefill-only-tokens):
  // query rows are keyed by the smallest that holds them.
  std::vector<int> serve_rows_buckets_;  // ascending
  int serve_kv_bucket_ = 0;
  int prefix_split_min_keys_ = 2048;  // LoadOptions::gpu_prefix_split_min_keys
  // WgmmaBatchSplits' last problem (q_len, kv_len pairs and heads) and its answer.
  std::vector<int64_t> batch_splits_for_;
  int batch_splits_ = 1;
  // false once cuDNN found no plan for its split pieces: chunks it would split run whole. Our
  // kernel's splits do not depend on it (they keep prefix_split_min_keys_).
  bool cudnn_splits_usable_ = true;
  // PrepareServing's measurement (PrefixAttentionCosts) at its smallest step budget so far: the
  // budget decodes share, where a step's length matters most.
  PrefixAttentionCost prefix_cost_;
  int slowdown_rows_ = 0;  // the budget it was measured at (0: not yet)
  bool slowdown_fixed_ = false;  // UNIPREFILL_CUDA_ATTENTION_SLOWDOWN: never measured
  dist::Communicator* comm_ = nullptr;  // tensor parallel (not owned)
  cudaEvent_t wait_event_ = nullptr;    // WaitStream's marker (tensor parallel only)
  bool prefix_copy_ = false;  // UNIPREFILL_CUDA_PREFIX_COPY: caches take no runs, copy priced
  bool untiled_price_ = false;  // UNIPREFILL_CUDA_UNTILED_PRICE: keys priced per row, not tile
  bool decodes_as_rows_ = false;  // UNIPREFILL_CUDA_DECODES_AS_ROWS: a decode's keys unpriced
  bool weight_floor_ = true;  // UNIPREFILL_CUDA_WEIGHT_FLOOR=0: prefix_cost_.weight_floor_rows 0
  bool small_pieces_ = false;  // UNIPREFILL_CUDA_SMALL_PIECES: no min_extra_chunk_rows
  bool split_on_cudnn_ = false;  // UNIPREFILL_CUDA_SPLIT_ON_CUDNN: our kernel's splits on cuDNN
  bool kept_queries_on_flash_ = false;  // UNIPREFILL_CUDA_KEPT_QUERIES_ON_FLASH
  bool residual_in_gemm_ = false;       // UNIPREFILL_CUDA_RESIDUAL_IN_GEMM (ResidualInGemm)
  bool prefix_one_launch_ = false;  // UNIPREFILL_CUDA_PREFIX_ONE_LAUNCH: WgmmaPrefixBatch
  bool separate_rope_ = false;  // UNIPREFILL_CUDA_SEPARATE_ROPE: Rope, then PagedKvAppend
  // UNIPREFILL_CUDA_GATED_GEMM (asked) and whether Load interleaved the dense FFNs' gate and up
  // rows for ops::cuda::GatedGemm (the build and device hold it); forwards of fewer rows than
  // gated_gemm_min_rows_ run cuBLASLt and GatedActivationPairs over the same weights.
  bool gated_gemm_asked_ = false;
  bool gated_gemm_ = false;
  int gated_gemm_min_rows_ = kGatedGemmMinRows;
  int gated_gemm_variant_ = 0;  // UNIPREFILL_CUDA_GATED_GEMM_VARIANT
  WgmmaLaunchChoices wgmma_choices_;  // UNIPREFILL_CUDA_WGMMA_*: the Hopper kernel's launch
  bool align_step_rows_ = false;  // UNIPREFILL_CUDA_ALIGN_STEP_ROWS: linear_row_tile set
  bool gemm_tune_ = false;        // UNIPREFILL_CUDA_GEMM_TUNE: TuneGemms in PrepareServing
  int64_t gemm_tuned_rows_ = 0;   // the step rows TuneGemms ran for (0: not run)
  // UNIPREFILL_CUDNN_SDPA: the SDPA implementations cuDNN's graphs may be built with.
  ops::cuda::CudnnSdpaImplementation cudnn_sdpa_ =
      ops::cuda::CudnnSdpaImplementation::kComposite;
  DeviceBuffer split_scratch_;  // split-KV's partial outputs (ops::cuda::RunSplitPrefix)
  DeviceBuffer q_last_;         // bf16 [requests, q | gate]: KeepLastRows' gathered query rows
  int cur_ = 0;  // live residual buffer
  // KeepLastRows counted the current segment's rows into Req::added (Finish adds none).
  bool segment_rows_counted_ = false;
  PinnedStaging staging_;

  // The current segment's device arrays (staging regions).
  const int32_t* d_pos_ = nullptr;
  const int32_t* d_index_ = nullptr;
  // Every request with rows (all B of them, except segment-wise chunks outside their segment;
  // bounded segments always have all B): cu_seqlens and linear state slots.
  const int32_t* d_cu_ = nullptr;     // [linear_batch_ + 1]
  const int32_t* d_slots_ = nullptr;  // [linear_batch_]
  int linear_batch_ = 0;
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

  // The forward in progress (Begin .. Finish).
  std::span<const SequenceStep> steps_;
  const UniPrefillConfig* uniprefill_ = nullptr;
  ForwardStats* stats_ = nullptr;
  std::vector<int> drops_;
  std::vector<Req> reqs_;
  const int32_t* d_ids_ = nullptr;
  int64_t rows_ = 0;    // T: the current segment's rows (capacities after a sync-free drop)
  int segment_ = 0;
  bool has_out_ = false;  // out_ holds a block output not yet added to the residual
  bool chunked_ = false;  // some step is a segment-wise chunk (synced drops, no graph capture)
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> events_;
  std::unique_ptr<StepTrace> trace_;  // null unless UNIPREFILL_CUDA_STEP_TRACE is set
  bool sync_every_forward_ = false;   // UNIPREFILL_CUDA_SYNC_EVERY_FORWARD

  // Decode graphs: one executable graph per batch size, updated with each step's capture.
  bool decode_graphs_ = false;
  bool capturing_ = false;
  // Replaced while capturing, or boundary rows a chunk finished with: freed after a host sync
  // (a forward that returns without one keeps them for the next that has one).
  std::vector<DeviceBuffer> retired_;
  std::vector<std::pair<int, cudaGraphExec_t>> graph_execs_;  // (batch size, executable)
};

}  // namespace uniprefill::cuda_backend
