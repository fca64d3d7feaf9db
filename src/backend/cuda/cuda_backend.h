// The CUDA backend: a model definition (Gemma 3, Llama, Qwen3-Next, random-weight presets) uploaded
// to the GPU as bf16 and run there by the one layer walk (model/transformer_model.h), with the same
// batch, cache and UniPrefill semantics as the CPU backend (docs/design.md sections 1-2):
//   - packed batches of prefills and decodes; requests whose cache is empty (prefills) first, then
//     the others; logits of each request's last token, f32;
//   - per layer: fused add + RMSNorm, one fused projection GEMM (q | gate | k | v, or the DeltaNet
//     in_proj with its rows regrouped at load), q/k-norm, RoPE, the step's keys/values scattered
//     into the request's cache blocks, then varlen flash attention (prefill rows against the
//     step's own keys), paged decode attention (one-token steps over the cache) or the general
//     cache attention (other head dims, several new tokens over a non-empty cache); Gated DeltaNet
//     layers through the chunked / recurrent delta rule with per-request state slots; gated MLP or
//     MoE;
//   - at drop layers: device scoring and selection per prefill request, then compaction.
//     Fixed-ratio selection never syncs: later layers run on each request's capacity
//     (FixedRatioCapacity) with padding rows, the true counts stay on the device, and the caches
//     are trimmed after the forward's one sync (the logits). Top-p learns the kept rows by one
//     host sync per drop layer.
// Caches come from NewCache (CudaSequenceCache on the backend's device pool). A request whose cache
// already holds tokens may drop too (scored over every cached key of the layer, synced path).
// Segment-wise chunked prefill (SequenceStep::chunk) runs on the synced path: a chunk's rows
// leave for its cache's boundary (device bf16 rows) at the next drop layer and enter the next
// segment from it; requests with no rows in a segment are left out of every kernel.
//
// The header is CUDA-free: builds without the CUDA backend get an Unimplemented error.
#pragma once

#include <memory>

#include "core/device_context.h"
#include "core/status.h"
#include "model/layer_backend.h"
#include "model/model.h"
#include "model/model_definition.h"

namespace uniprefill {

// Uploads `definition` (which must outlive the backend) to the GPU of `ctx` (a CUDA context, which
// must outlive it too); random weights are filled on the device. From `options`: progress (layers
// uploaded of all layers) and gpu_delta_rule; the host-side fields were applied when the
// definition was loaded.
Result<std::unique_ptr<LayerBackend>> MakeCudaBackend(const ModelDefinition& definition,
                                                      DeviceContext& ctx,
                                                      const LoadOptions& options = {});

}  // namespace uniprefill
