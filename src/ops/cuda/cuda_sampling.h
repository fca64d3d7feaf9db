// CUDA sampling: the next token of every row of a logits batch chosen on the device, by the rule
// of engine/sampler.h (Sampler::Distribution + Sampler::Sample) without its penalties: greedy
// argmax, or top-k -> top-p -> min-p at temperature 1, then temperature, softmax over the kept
// tokens and an inverse-CDF draw with a uniform the caller supplies per row (so a request's seeded
// generator stays on the host and a run is reproducible). Token order, tie-breaking, the order in
// which the draw walks the kept tokens (descending logit when top-k cut or top-p is on, ascending
// id otherwise) and the degenerate cases (infinite max logit: the first maximal token) follow the
// CPU code; NaN logits count as -inf and -0 equals +0.
//
// Exactness. ArgMax, greedy rows, top-k and min-p are exact (integer counts and the CPU's own
// comparisons). Top-p and the draw compare cumulative probabilities with top_p and u; the CPU sums
// double exponentials in sorted order, the GPU narrows the crossing with f32 exponentials (<= 2
// ulp) summed in double in parallel and settles it with double exponentials over the last few
// thousand candidates, so the chosen token equals the CPU's unless the CPU's cumulative
// probability at a deciding token lies within ~1e-6 of top_p or u (a boundary that rounding on
// either side may move). With top-k <= 4096 (and at most 4096 tokens tied with the k-th logit)
// everything after top-k runs in double in the CPU's order; with a top-p prefix of at most 4096
// tokens, min-p and the draw do. The uniforms are f32: the CPU Sampler draws 53-bit uniforms of
// its own, so it reproduces a GPU draw only when its walk is given the same f32 value.
//
// Every op takes the DeviceContext (device kCuda) first, enqueues on ctx.cuda().stream() and never
// synchronises. Not for: repetition / presence / frequency penalties (apply them to the logits
// first), logit bias, top-n logprob lists.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/device_context.h"
#include "core/tensor.h"

namespace uniprefill::ops::cuda {

// One row's filters: SamplerConfig's fields (engine/sampler.h), same meanings and defaults off.
struct SamplingRow {
  float temperature = 0.0f;  // <= 0: greedy (argmax, lowest id on ties)
  int32_t top_k = 0;         // <= 0 or >= V: off
  float top_p = 1.0f;        // >= 1: off
  float min_p = 0.0f;        // <= 0: off
};

// Scratch bytes ArgMax needs for `rows` rows of `vocab` logits on this device.
size_t ArgMaxScratchBytes(DeviceContext& ctx, int rows, int64_t vocab);

// ids device int32 [B] = the index of each row's largest logit, lowest index on ties (NaN never
// wins; a row of -inf / NaN gives 0). logits f32 [B, V] on the device (rows may be strided),
// B <= 65535, any V >= 1. logprobs: null, or device f32 [B] receiving the chosen token's
// log-softmax over the raw logits (engine/batch_engine.cc's formula; NaN when the row's max is
// infinite). The work is split over several CTAs per row when B is small; scratch:
// ArgMaxScratchBytes, no initialisation.
void ArgMax(DeviceContext& ctx, int32_t* ids, float* logprobs, TensorView logits, void* scratch,
            size_t scratch_bytes);

// The largest vocabulary Sample handles on this device (each row is held in the shared memory of
// one 8-CTA cluster): about 385K on an H100 / H200.
int64_t MaxSampleVocab(DeviceContext& ctx);

// ids device int32 [B] = each row's token under its SamplingRow (rows, device [B]) and uniform
// (uniforms, device f32 [B], in [0, 1); the CPU Sampler's draw is `u < cumulative probability`
// over the kept tokens). logits f32 [B, V] on the device (rows may be strided), B <= 65535,
// 1 <= V <= MaxSampleVocab. logprobs: null, or device f32 [B] as in ArgMax (the raw log-softmax of
// the chosen token, before any filter or temperature). Rows with temperature <= 0 are greedy. One
// thread-block cluster of 8 CTAs per row; no scratch.
void Sample(DeviceContext& ctx, int32_t* ids, float* logprobs, TensorView logits,
            const SamplingRow* rows, const float* uniforms);

}  // namespace uniprefill::ops::cuda
