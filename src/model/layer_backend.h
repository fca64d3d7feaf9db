// LayerBackend: where one model's layers run (backend/cpu: f32 on the host through ops/; backend/
// cuda: bf16 on a GPU). The one layer walk (TransformerModel::ForwardBatch) calls these steps in
// the recipe's order (model_definition.h); a backend keeps its own copy or view of the weights and
// the forward's state: the packed rows, the residual stream, the normalised input `normed` and the
// pending block output `out`, which the next NormInput (or Finish) adds to the residual. That
// deferral lets the GPU fuse the add into the next norm.
//
// Per forward: Begin, Embed, then per layer NormInput(kMixer), Attention or DeltaNet,
// NormOutput(kPostMixer)?, NormInput(kFfn), GatedFfn or Moe, NormOutput(kPostFfn)?; then Finish.
// At a drop layer Attention gets the DropLayer and compacts the rows (docs/design.md section 1),
// and ExchangeSegmentRows follows NormOutput(kPostMixer) (segment-wise chunked prefill).
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "core/device_context.h"
#include "core/status.h"
#include "kv/sequence_cache.h"
#include "model/packed_batch.h"
#include "model/segment_cost.h"
#include "sparsity/uniprefill_config.h"

namespace uniprefill {

enum class NormSlot { kMixer, kPostMixer, kFfn, kPostFfn };

// Which query rows a layer's attention runs. kEvery: all of the step's rows. kLastOfEach (the
// walk's last layer; at a drop layer after its selection): every row's key and value is cached, but
// only each request's last row gets a query, an output and everything after (FFN, final norm):
// no other row's hidden state is read past the last layer (Finish reads each request's last
// row), so the forward's logits and caches are what kEvery gives, for ~1 / n_layers less work
// (and that layer's whole attention). The rows shrink to one per request (none for a request
// without rows); a step whose requests all have one row (decodes) is unchanged.
enum class QueryRows { kEvery, kLastOfEach };

class LayerBackend {
 public:
  virtual ~LayerBackend() = default;

  virtual Device device() const = 0;
  // Bytes of weights this backend holds beyond the definition's (device weights).
  virtual size_t resident_weight_bytes() const = 0;
  // A cache of this layout for one request of at most max_tokens tokens.
  virtual std::unique_ptr<SequenceCache> NewCache(const CacheLayout& layout,
                                                  int max_tokens) const = 0;
  // Model::FixCachePool (device KV pools); `layout` is the model's layout without drops.
  virtual Status FixCachePool(const CacheLayout& layout, int num_blocks, int block_tokens) = 0;

  // Checks the steps and lays the forward's rows out (PackedBatch::Build's rules and errors).
  // Returns false when there is nothing to run (no requests).
  virtual Result<bool> Begin(DeviceContext& ctx, std::span<const SequenceStep> steps,
                             const UniPrefillConfig& uniprefill, int n_segments,
                             ForwardStats* stats) = 0;
  // residual = embeddings of the step's tokens.
  virtual Status Embed() = 0;
  // residual += out (when a block left one); normed = RmsNorm(residual) with the (layer, slot)
  // weight.
  virtual Status NormInput(int layer, NormSlot slot) = 0;
  // out = RmsNorm(out) with the (layer, slot) weight (Gemma 3's post norms).
  virtual Status NormOutput(int layer, NormSlot slot) = 0;
  // out = attention(normed) of this layer; `drop` set at drop layers (rows shrink), and `queries`
  // kLastOfEach at the last layer (rows shrink to each request's last).
  virtual Status Attention(int layer, const DropLayer* drop, QueryRows queries) = 0;
  // At drop layer d_segment, after its attention (and post norm): rows of segment-wise chunks that
  // end segment - 1 leave for their caches' boundaries (compacted to the kept rows when the
  // chunk ended its segment), and chunks of `segment` enter from theirs (packed_batch.h,
  // SegmentChunk). A no-op for forwards without such chunks.
  virtual Status ExchangeSegmentRows(int segment) {
    (void)segment;
    return OkStatus();
  }
  // Whether this backend runs SequenceStep::chunk (segment-wise chunked prefill).
  virtual bool supports_segment_chunks() const { return false; }
  virtual Status DeltaNet(int layer) = 0;  // out = Gated DeltaNet(normed)
  virtual Status GatedFfn(int layer) = 0;  // out = gated MLP(normed)
  virtual Status Moe(int layer) = 0;       // out = MoE(normed)
  // Serving: no step will hold more than max_step_rows prefill rows of a request, and no request
  // more than max_context tokens. A backend may prepare for those sizes before the first request
  // (the CUDA backend builds and autotunes its cuDNN attention graphs for them, so no served step
  // waits for a build). Called before any forward, once per step budget the server uses (its
  // --max-batched-tokens and, when larger, --prefill-only-tokens), with the same max_context.
  virtual Status PrepareServing(int max_step_rows, int max_context) {
    (void)max_step_rows, (void)max_context;
    return OkStatus();
  }
  // What a prefill chunk's attention over its cached prefix costs on this backend next to its
  // linear layers, as PrepareServing measured it (the defaults before, and where nothing was
  // measured: FLOPs at the GEMM rate, no per-key copy). The scheduler prices chunks by it
  // (Model::SegmentCosts).
  virtual PrefixAttentionCost PrefixAttentionCosts() const { return {}; }
  // Tensor parallel: the rank's communicator (not owned), set once after the backend is made.
  // With a vocabulary-split definition (ModelDefinition::vocab_sharded), Embed leaves the rank's
  // embedded rows in out (zeros for other ranks' tokens; the walk then calls ReduceOut) and Finish
  // all-gathers the logits over it.
  virtual Status SetTensorParallel(dist::Communicator* comm) {
    (void)comm;
    return Unimplemented("tensor parallelism is not available on this backend yet");
  }
  // Tensor parallel: out = the sum of every rank's out (the row-parallel o_proj / down partial
  // sums), before any post norm and the residual add.
  virtual Status ReduceOut(dist::Communicator& comm) {
    (void)comm;
    return Unimplemented("tensor parallelism is not available on this backend yet");
  }
  // residual += out; the final norm; the logits of each request that wants them (its last row);
  // every cache committed.
  virtual Status Finish() = 0;
  // Waits until every step issued so far has run (a device backend's stream; walk timing only).
  virtual Status Synchronize() { return OkStatus(); }
  // Before each walk step after Begin (Embed, every layer's steps, Finish): a device backend
  // may timestamp its stream there without waiting for it (the CUDA step trace's phases,
  // UNIPREFILL_CUDA_STEP_TRACE_PHASES). Must not change what the forward computes.
  virtual Status MarkPhase(WalkPhase phase) {
    (void)phase;
    return OkStatus();
  }
  // After a step between Begin and Finish failed: drop whatever the forward left half done (a
  // device backend's open graph capture), so the next forward starts clean.
  virtual void Abandon() {}
};

}  // namespace uniprefill
