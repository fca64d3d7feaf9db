// Model: a loaded architecture that turns packed batches of token ids into next-token logits.
//
// One ForwardBatch runs several requests together (prefills of any length and single-token decodes,
// docs/design.md section 2), layer by layer over all their rows, with UniPrefill drops at the
// configured layers. The one implementation is TransformerModel (transformer_model.h): a model
// definition (model_definition.h) walked layer by layer on a CPU or CUDA backend.
//
// Invariants: ForwardBatch appends each request's tokens to its cache; logits are f32 [vocab] of each
// request's last token. A model holds its weights and no per-request state (that lives in the
// SequenceCache), so one model serves many requests.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/device_context.h"
#include "core/status.h"
#include "io/gguf.h"
#include "kv/sequence_cache.h"
#include "model/segment_cost.h"
#include "model/model_config.h"
#include "model/packed_batch.h"
#include "sparsity/uniprefill_config.h"

namespace uniprefill {

// Called with (done, total) units of work, for progress bars.
using ProgressFn = std::function<void(int64_t done, int64_t total)>;

// The cache layout of a model of config `c` with the given ascending drop layers (one segment per
// drop layer + 1).
CacheLayout ModelCacheLayout(const ModelConfig& c, const std::vector<int>& drop_layers);

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  // Bytes of weights held in memory beyond the mapped file (dequantised copies; device weights).
  virtual size_t resident_weight_bytes() const = 0;
  // Bytes of weights the host holds or maps for this model (ModelDefinition::HostWeightBytes: a
  // tensor-parallel rank counts its shard).
  virtual size_t host_weight_bytes() const = 0;
  // Where the forward runs (kCuda: a device model; its caches hold device memory).
  virtual Device device() const { return Device::kCpu; }

  // The cache layout of this model with the given ascending drop layers (one segment per drop
  // layer + 1): what NewCache builds, and what a paged cache (KvCacheSpec::FromLayout, KvArena,
  // PagedSequenceCache) is sized and checked against. Its kv_dtype is kv_dtype() on the CPU.
  CacheLayout CacheLayoutFor(const std::vector<int>& drop_layers) const;
  // Element type of a CPU model's cached keys and values (LoadOptions::cpu_kv_dtype). Device
  // models keep bf16 caches of their own and ignore it.
  DType kv_dtype() const { return kv_dtype_; }
  void set_kv_dtype(DType dtype) { kv_dtype_ = dtype; }
  // A cache for one request of at most max_tokens tokens, with one segment per drop layer + 1
  // (host memory for CPU models; a device model's own device cache).
  virtual std::unique_ptr<SequenceCache> NewCache(int max_tokens,
                                                  const std::vector<int>& drop_layers) const;
  std::unique_ptr<SequenceCache> NewCache(int max_tokens) const { return NewCache(max_tokens, {}); }

  // Runs every request's new tokens through the model (progress: layers done of all layers).
  // Every cache must have been made for uniprefill.active_drop_layers() (and, for a device model,
  // by its NewCache).
  virtual Status ForwardBatch(DeviceContext& ctx, std::span<const SequenceStep> steps,
                              const UniPrefillConfig& uniprefill,
                              const ProgressFn& progress = nullptr,
                              ForwardStats* stats = nullptr) = 0;

  // What a prefill chunk costs per row and per cached key next to a row's linear work, per
  // segment of a segment-wise chunked prefill with these drop layers (one per segment; no drop
  // layers: the whole model, a dense chunk's price). The scheduler's step budget
  // (SchedulerConfig::segment_costs, attention_key_cost). Empty: unknown (rows only).
  virtual std::vector<SegmentCost> SegmentCosts(const std::vector<int>& drop_layers) const {
    (void)drop_layers;
    return {};
  }

  // Whether ForwardBatch runs SequenceStep::chunk (segment-wise chunked UniPrefill prefill).
  virtual bool supports_segment_chunks() const { return false; }

  // Device models: fixes the device KV pool their caches allocate from to num_blocks blocks of
  // block_tokens tokens (the serving engine sizes it like its block manager's pool). Host models
  // have no such pool and accept any call.
  virtual Status FixCachePool(int num_blocks, int block_tokens) {
    (void)num_blocks, (void)block_tokens;
    return OkStatus();
  }

  // Serving: steps hold at most max_step_rows prefill rows per request and requests at most
  // max_context tokens; a device model prepares for those sizes (LayerBackend::PrepareServing).
  // A server with two step budgets calls it once per budget (same max_context).
  virtual Status PrepareServing(int max_step_rows, int max_context) {
    (void)max_step_rows, (void)max_context;
    return OkStatus();
  }

  // One request, dense (no drop layers).
  Status Forward(DeviceContext& ctx, std::span<const int32_t> tokens, SequenceCache& cache,
                 float* logits, const ProgressFn& progress = nullptr);

 private:
  DType kv_dtype_ = DType::kF32;
};

// Which Gated DeltaNet delta-rule kernel the GPU runs (diagnostics; kAuto picks by chunk length:
// the two-kernel tensor-core one for bf16 prefills, the recurrent one for decodes; see
// ops/cuda/cuda_linear_attention.h's DeltaRuleKernel).
enum class DeltaRuleChoice {
  kAuto,
  kChunked,
  kRecurrent,
  kChunkedTensorCore,
  kChunkedTensorCoreSplit
};

// Which kernels run the GPU's prefill attention. Three can:
// - our Hopper kernel (ops/cuda/sm90/flash_attention_wgmma.h: wgmma + TMA, FlashAttention-3's
//   structure) on compute capability 9.0, for what it covers: causal attention of head dim 128
//   without a window whose queries are the last keys (fresh prefill rows, dense or the
//   compacted rows after a drop; whole chunks over their cached prefix);
// - cuDNN's fused attention (ops/cuda/cudnn_attention.h) where its masks express the layer;
// - our flash attention (ops/cuda/cuda_attention.h, mma.sync) for everything.
// kAuto: the Hopper kernel, then cuDNN (when libcudnn 9 loads), then flash attention. kOurs: the
// Hopper kernel, then flash attention. kCudnn: cuDNN (a missing one is an error), then flash
// attention (the choice before the Hopper kernel). kFlash: flash attention alone.
enum class GpuAttention { kAuto, kOurs, kCudnn, kFlash };
// "auto" (or empty), "ours", "cudnn", "flash" -> the kernel choice; nullopt for any other name.
std::optional<GpuAttention> GpuAttentionFromName(const std::string& name);

// Which kernels run the GPU's MoE expert GEMMs (ops/cuda/cuda_moe.h, MoeGemm): our grouped
// kernel (sync-free, batch-invariant rows; wgmma on Hopper: the default), our mma.sync kernel on
// any device (for comparisons), or the libraries' (cuBLAS grouped GEMM after one host sync per MoE
// layer; measured only 3% faster than the mma.sync kernel on an H200, for comparisons).
enum class GpuMoeGemm { kOurs, kOursMmaSync, kLibrary };

struct LoadOptions {
  // Dequantise linear weights to f32 for fast many-token GEMMs (prefill). Costs ~4 bytes per
  // weight of memory; off means every matmul runs fused on the quantised weights.
  bool f32_prefill_weights = true;
  // Decode (one-row) matmuls quantise the activation row to int16 for integer kernels (~2x faster
  // on AVX2, error ~1e-5 of the row's max). true: f32 activations throughout (exact, slower).
  bool f32_decode = false;
  // With f32_prefill_weights: skip the copy of each weight whose parts all have int16 kernels at
  // the context's ISA level, so its prefill GEMMs run on the stored weights (int16 activations;
  // ops/cpu/cpu_linear_int16_rows.h). Ignored with f32_decode (no int16 activations then).
  bool int16_prefill_gemm = false;
  // Products of several rows (batched decode steps; with int16_prefill_gemm every prefill chunk)
  // quantise the activations to int8 instead of int16 where the CPU has VNNI
  // (ops::LinearWeight::int8_rows_activations). Ignored with f32_decode.
  bool int8_rows_activations = false;
  // With int16_prefill_gemm: prefill chunks (more than 64 rows) and their attention on bf16 with
  // AMX tiles where the CPU has them (ops::LinearWeight::bf16_prefill_gemm, the attention block
  // passes it on as AttentionParams::bf16_tiles). Ignored with f32_decode.
  bool bf16_prefill_gemm = false;
  DeltaRuleChoice gpu_delta_rule = DeltaRuleChoice::kAuto;  // GPU only
  GpuAttention gpu_attention = GpuAttention::kAuto;         // GPU only
  GpuMoeGemm gpu_moe_gemm = GpuMoeGemm::kOurs;               // GPU only
  // GPU only: run each decode step (every request one token, none fresh) as a CUDA graph: the
  // step is captured, the batch size's executable graph updated with it and launched. Off by
  // default: measured slower on an H200 (8B shape, 32 x 1K: 9.82 vs 8.93 ms per step), because
  // decode there is GPU-bound and capture serialises the host's walk before the GPU starts
  // (docs/gpu_performance.md, decode section).
  bool gpu_decode_graphs = false;
  // GPU only: split-KV for a prefill chunk over a cached prefix (cudnn_attention.h): the prefix is
  // cut into pieces of at least this many keys when the chunk's query tiles alone would not fill
  // the GPU twice over (a chunk of a few hundred rows deep in a long prompt). 0: never split.
  int gpu_prefix_split_min_keys = 2048;
  // GPU only: cuDNN's fused attention keeps, per shape bucket, the fastest of its heuristics'
  // plans, each timed once (true), or the heuristics' first plan (false). Timing makes the choice
  // depend on the machine's load at that moment, and plans round differently (most likely why a
  // packed batch and its requests alone came out 3.6e-3 apart once, with the host busy, in the
  // 29th session's call AC): the GPU model tests that compare such runs turn it off.
  bool gpu_cudnn_autotune = true;
  // CPU only: the element type of cached keys and values: kF32 (exact: what the model-level
  // tests compare computation orders with), or kF16 (half the bytes a decode step streams per
  // cached token; the engine's default, EngineOptions::kv_cache_dtype, as llama.cpp's cache).
  DType cpu_kv_dtype = DType::kF32;
  // true: the last layer runs every row of a step, as before the 36th session; false (default):
  // only each request's last row gets a query there (layer_backend.h, QueryRows::kLastOfEach),
  // the others only cache their keys and values: the same logits and caches for ~1 / n_layers
  // less work. UNIPREFILL_LAST_LAYER_EVERY_ROW=1 / 0 overrides it (benchmarks' two arms).
  bool last_layer_every_row = false;
  // Tensor parallel: this process's rank of the world (not owned; it must outlive the model).
  // The model is this rank's shard (dist/shard_definition.h) and every forward is a collective
  // (all ranks run the same steps in the same order). A world of one runs the same path (the
  // whole model as its one shard, all-reduces over one rank): how one device tests it. On the
  // GPU the communicator needs device collectives (NCCL, or the staged one for tests).
  dist::Communicator* communicator = nullptr;
  ProgressFn progress;
};

// Opens a model: a GGUF file, or a Hugging Face checkpoint directory (config.json + safetensors).
// With a CUDA context the definition is loaded without f32 copies and its weights uploaded as bf16
// (backend/cuda/cuda_backend.h).
// Errors name the file and what is wrong (missing, not a model, truncated, unsupported
// architecture or quantisation, bad shapes).
Result<std::unique_ptr<Model>> LoadModel(const std::string& path, DeviceContext& ctx,
                                         const LoadOptions& options);
// The same from an already opened GGUF file (the engine also builds its tokenizer from it).
Result<std::unique_ptr<Model>> LoadModel(std::unique_ptr<gguf::GgufFile> file, DeviceContext& ctx,
                                         const LoadOptions& options);

}  // namespace uniprefill
