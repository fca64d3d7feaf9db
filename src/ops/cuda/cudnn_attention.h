// cuDNN's fused attention (the cuDNN frontend's SDPA graph) for the prefill cases its masks
// express, beside our FlashAttention (cuda_attention.h) for the rest. Chosen per model by
// LoadOptions::gpu_attention; measured against our kernel in docs/gpu_performance.md.
//
// Run covers packed varlen self-attention of prompts whose query and key rows are the same rows and
// whose mask coordinates are their row indices within the sequence, causal, optionally with a
// sliding window (AttentionParams::window W: query row i sees key rows j with i - W < j <= i, the
// frontend's diagonal band: top-left alignment, right bound 0, left bound W), GQA, bf16 in and out,
// D 64, 128 or 256, rows strided (the fused QKV GEMM's column slices). Each sequence may end in
// padding rows (the sync-free drop's capacities): seq_len holds its true length; padding rows are
// no keys, and their outputs are nobody's (the tests check real rows only). The caller
// (CudaBackend::AttentionMixer) vouches for "coordinates = row indices": causal layers in any
// segment (order alone matters), windows by alive index in any segment (a fresh prompt's alive
// indices are 0..n-1, renumbered from 0 after each drop), windows by position only in segment 0
// (after a drop the kept tokens keep their gapped positions). Not covered (FlashAttention runs
// them): a drop layer's kept queries, windows by position after a drop, and requests whose cache
// holds tokens.
//
// RunPaged covers queries over a cached prefix: sequence b's q_len[b] new query rows are its last
// ones among kv_len[b] cache entries (coordinates kv_len - q_len .. kv_len - 1, alive indices of an
// uncompacted cache), causal aligned bottom-right, keys and values read in place from the CUDA
// backend's KV pool (cuda_kv_cache.h: bf16 [num_blocks, 2 (K, V), block_tokens, kv_dim], entry a of
// a sequence in block block_table[b][a / block_tokens], row a % block_tokens): the K container is
// [num_blocks, Hkv, block_tokens, D] with strides (kv.stride[0], D, kv_dim, 1) and V the same from
// kv.stride[1] elements on. cuDNN (>= 9.7 for paged K/V with ragged Q) reads a container through
// its strides, so the pool's blocks (K | V interleaved, or planes) and 16-token pages need no
// copy: measured on the H200's cuDNN 9.14 for D 64 / 128 / 256 and GQA against the CPU op
// (cudnn_attention_test.cc). The backend does not use it: on the H200, cuDNN's plans for paged K/V
// ran a 32K prompt's chunked attention at half the rate of its plans for contiguous rows (the
// 8B shape in 2K chunks, attention 1.36 s vs 0.74 s; block sizes 16 to 256 made no difference), so
// CudaBackend copies a chunk's prefix out of the pool and calls RunPrefix.
//
// RunPrefix covers the same queries over the prefix in contiguous rows (k, v [Tk, Hkv, D], rows
// strided), causal aligned bottom-right, with keys of their own lengths and row bucket. Split-KV
// (flash-decoding's split and merge, for query chunks): cuDNN's kernel gives each (query tile,
// head, sequence) one CTA that walks all of its keys, so a chunk of a few hundred rows over 100K
// cached keys occupies a fraction of the SMs. The backend then cuts the prefix into pieces run as
// one batch of non-causal sequences that share the chunk's query rows (CudnnPrefixBatch::causal
// false; ragged query offsets may repeat), runs the chunk over its own keys causally, both with
// stats, and merges the pieces' outputs by their log-sum-exp (cuda_attention_merge.h).
//
// Plans: one graph per shape bucket (batch, max length rounded up to a power of two, heads, head
// dim, strides, scale, window; paged: pool blocks and table width; prefix: the key rows' bucket)
// is built once and reused. With
// CudnnOptions::autotune (the default) every plan cuDNN's heuristics offer (modes A and B, plus
// FALLBACK when asked; with sweep_knobs also every one-knob variant of each engine's config) is
// built (BuildPlanPolicy ALL) and timed on the first call's own tensors (one warm-up, best of two),
// and the fastest is kept for the bucket; PlanTimings() reports them. Without autotune the
// heuristics' first plan runs. CudnnOptions::implementation picks the frontend's SDPA
// implementation: COMPOSITE (every cuDNN 9), UNIFIED (cuDNN >= 9.21 for our masks; the H200's 9.14
// has none), or both with the timings deciding.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ops/ops.h"

namespace uniprefill::ops::cuda {

// Sequence b owns rows [row_begin[b], row_begin[b + 1]) of q, k, v and out (capacities), of which
// the first seq_len[b] are real. The offsets are those row begins in elements of each view (row
// begin x the view's row stride): device int32 [batch + 1] each (RaggedOffsets makes them).
struct CudnnVarlen {
  const int32_t* seq_len = nullptr;  // device int32 [batch]
  const int32_t* q_offsets = nullptr;
  const int32_t* k_offsets = nullptr;
  const int32_t* v_offsets = nullptr;
  const int32_t* o_offsets = nullptr;
  int batch = 0;
  int max_rows = 0;  // the longest sequence's rows
  // The rows the graph is built for (>= max_rows; 0: max_rows rounded up to a power of two). A
  // server passes its step budget, so every chunk size shares one graph built before it serves.
  int rows_bucket = 0;
};

// Queries over paged caches (RunPaged). Sequence b's queries are rows [q_begin[b], q_begin[b] +
// q_len[b]) of q and out, given as ragged offsets like CudnnVarlen's.
struct CudnnPagedBatch {
  const int32_t* q_len = nullptr;        // device int32 [batch]: new query rows
  const int32_t* kv_len = nullptr;       // device int32 [batch]: cache entries, queries included
  const int32_t* q_offsets = nullptr;    // device int32 [batch + 1]
  const int32_t* o_offsets = nullptr;    // device int32 [batch + 1]
  const int32_t* block_table = nullptr;  // device int32 [batch, max_blocks] (row-major) pool blocks
  int batch = 0;
  int max_q_rows = 0;  // the most query rows of a sequence
  int max_blocks = 0;  // the table's row width (>= every ceil(kv_len / block_tokens))
};

// Queries over a cached prefix copied out of the pool (RunPrefix): sequence b's q_len[b] query
// rows (offsets into q and out) are the last of its kv_len[b] key rows (offsets into k and v).
struct CudnnPrefixBatch {
  const int32_t* q_len = nullptr;      // device int32 [batch]
  const int32_t* kv_len = nullptr;     // device int32 [batch]: keys, the queries' own included
  const int32_t* q_offsets = nullptr;  // device int32 [batch + 1] each, in elements of the view
  const int32_t* k_offsets = nullptr;
  const int32_t* v_offsets = nullptr;
  const int32_t* o_offsets = nullptr;
  int batch = 0;
  int max_q_rows = 0;   // the most query rows of a sequence
  int max_kv_rows = 0;  // the most key rows of a sequence
  // The key rows the graph is built for (>= max_kv_rows; 0: max_kv_rows rounded up to a power of
  // two). A caller whose prefixes grow chunk by chunk passes its caches' capacity, so one graph
  // (built and autotuned once) serves every prefix length instead of one per power of two.
  int kv_rows_bucket = 0;
  // The query rows the graph is built for (>= max_q_rows; 0: a power of two), as
  // CudnnVarlen::rows_bucket.
  int q_rows_bucket = 0;
  // false: no causal mask, every query row sees every key row of its sequence (a piece of a
  // prefix that lies wholly before the queries: split-KV, below).
  bool causal = true;
  // When set, RunPrefix also writes each query row's log-sum-exp of its scaled scores (natural
  // log) here: f32 [batch, Hq, q_rows bucket] (cuDNN's padded stats layout; rows past q_len[b]
  // unwritten), so pieces of one attention can be merged (MergeAttentionPieces).
  float* stats = nullptr;
};

// offsets[b] = row_begin[b] * row_stride, b <= batch (host).
std::vector<int32_t> RaggedOffsets(const std::vector<int32_t>& row_begin, int64_t row_stride);

// The frontend's two SDPA implementations: COMPOSITE (the graph of matmuls and a softmax that
// cuDNN fuses; every cuDNN 9) and UNIFIED (one SDPA operation; cuDNN >= 9.21 for our masks).
enum class CudnnSdpaImplementation { kAuto, kComposite, kUnified };

// "auto", "composite", "unified" (the names UNIPREFILL_CUDNN_SDPA takes).
const char* CudnnSdpaImplementationName(CudnnSdpaImplementation impl);

struct CudnnOptions {
  // kComposite (the default) or kUnified alone: a bucket cuDNN rejects goes to FlashAttention.
  // kAuto builds each bucket's graph with both (UNIFIED first) and keeps the fastest plan among
  // them (without autotune: the first that builds). COMPOSITE is the default because on the H200
  // cuDNN 9.28's UNIFIED engine ran at its rates (causal 32K d 128: 652 vs 654 TFLOP/s, 581 vs
  // 584 sustained; docs/gpu_performance.md) while kAuto doubles every bucket's build and autotune.
  CudnnSdpaImplementation implementation = CudnnSdpaImplementation::kComposite;
  bool autotune = true;         // time every heuristic plan once per bucket, keep the fastest
  bool fallback_plans = false;  // also the FALLBACK heuristic's plans (slow builds; for reports)
  // Also every one-knob variant of each heuristic engine's config (reports only: slow builds,
  // and on cuDNN 9.14 no variant beat the heuristics' plans; docs/gpu_performance.md).
  bool sweep_knobs = false;
};

// One plan of the latest bucket built: cuDNN's name for it (engine and knobs) after its
// implementation's ("composite eng2_k24=7"), and its time.
struct CudnnPlanTiming {
  std::string name;
  double ms = 0;        // best of the timed runs; < 0: the plan failed to run
  bool chosen = false;  // the plan the bucket keeps
};

class CudnnAttention {
 public:
  // Unimplemented in builds without cuDNN (UNIPREFILL_WITH_CUDNN), or when no handle can be made.
  static Result<std::unique_ptr<CudnnAttention>> Create(DeviceContext& ctx,
                                                        const CudnnOptions& options = {});
  virtual ~CudnnAttention() = default;

  // out bf16 [T, Hq, D] = causal (params.window > 0: windowed) attention of q bf16 [T, Hq, D] over
  // k, v bf16 [T, Hkv, D] per sequence. On any error the caller runs FlashAttention instead (out
  // may hold a failed plan's partial result): Unimplemented when cuDNN has no plan for the shape
  // (bucket), then Unavailable at once for that bucket's later calls (no rebuild, nothing more to
  // report); Internal when a plan failed to run.
  virtual Status Run(DeviceContext& ctx, TensorView out, TensorView q, TensorView k, TensorView v,
                     const CudnnVarlen& batch, const AttentionParams& params) = 0;

  // out bf16 [Tq, Hq, D] = causal attention (bottom-right aligned; params.window must be 0) of
  // q bf16 [Tq, Hq, D] over the pages of kv bf16 [num_blocks, 2, block_tokens, kv_dim] that
  // batch.block_table names; kv_dim >= Hkv * D, head h's keys at columns [h D, (h + 1) D).
  virtual Status RunPaged(DeviceContext& ctx, TensorView out, TensorView q, TensorView kv, int hkv,
                          const CudnnPagedBatch& batch, const AttentionParams& params) = 0;

  // out bf16 [Tq, Hq, D] = causal attention (bottom-right aligned, as RunPaged; params.window must
  // be 0) of q bf16 [Tq, Hq, D] over k, v bf16 [Tk, Hkv, D] (rows strided). The cached prefix in
  // contiguous rows (the backend copies it out of the pool): on the H200 cuDNN's fused kernel runs
  // this at about twice the rate of the same attention through RunPaged's page tables.
  virtual Status RunPrefix(DeviceContext& ctx, TensorView out, TensorView q, TensorView k,
                           TensorView v, const CudnnPrefixBatch& batch,
                           const AttentionParams& params) = 0;

  // The plans of the latest bucket built with autotune, in heuristic order (empty before).
  virtual std::vector<CudnnPlanTiming> PlanTimings() const = 0;
};

}  // namespace uniprefill::ops::cuda
