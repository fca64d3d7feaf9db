// One forward's mix of work, written as text, and the runner that times it (`uniprefill bench
// step`). A served step holds decodes beside prefill chunks of one or more prompts at different
// depths and, for UniPrefill, segments; the served traces' least-squares fits
// (tools/serve_step_fit.py) can only estimate what each part costs from steps in which everything
// varies at once. Here each part is set by hand and the same forward is repeated, so a mix and the
// same mix with one part added measure that part's cost directly.
//
// A mix is items joined by '+' (whitespace ignored); several mixes are separated by ';':
//   dN@L   N decodes, each its own request over L cached tokens, each choosing a token
//   cR@K   a dense prefill chunk of R new tokens over K cached tokens of its prompt, not the
//          prompt's last (it fills the cache only: no logits, no token)
//   lR@K   the same chunk as its prompt's last (it chooses the next token: the LM head runs)
//   sR@K   a chunk of segment 0 of a segment-wise UniPrefill prefill: R rows over K cached rows,
//          running the layers up to the first drop layer's attention, not ending its segment
// e.g. "c2048@16384; c1024@16384+d3@32768; c896@16384+c128@2048+d3@32768".
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/device_context.h"
#include "core/status.h"
#include "model/model.h"
#include "model/packed_batch.h"
#include "sparsity/uniprefill_config.h"

namespace uniprefill {

struct StepItem {
  char kind = 'd';  // d, c, l or s (above)
  int count = 1;    // requests: N for decodes, 1 otherwise
  int rows = 0;     // new tokens per request (1 for decodes)
  int depth = 0;    // cached tokens before the step, per request
};

struct StepMix {
  std::string text;  // as written, trimmed
  std::vector<StepItem> items;
  bool has_segment_chunk() const;
  int requests() const;
  int new_rows() const;  // the forward's rows
};

// The mixes of `text`; an error names the item that is wrong and the grammar.
Result<std::vector<StepMix>> ParseStepMixes(const std::string& text);

struct StepMixOptions {
  int warmup = 2;   // untimed forwards first (plans, graphs, the pool's first growth)
  int repeats = 5;  // timed forwards
  uint32_t seed = 1;
  // The forwards' UniPrefill configuration when a mix holds an s item (its drop layers then fix
  // every cache's layout, and the other items pass the drop layers densely, as a server's dense
  // requests do); otherwise forwards are dense.
  UniPrefillConfig uniprefill;
  // Device models choose tokens on the device (as serve does by default); host models always
  // copy logits back.
  bool device_sampling = true;
  // Called with true right before each timed forward starts (after the sync that ends the
  // untimed work before it) and with false once it has synced: bench step's clock sampler
  // resumes and pauses on it, so the clock it reports is the timed forwards'.
  std::function<void(bool)> around_timed_forward;
};

struct StepMixTiming {
  std::vector<double> forward_ms;  // host wall clock of each timed forward, device work included
  ForwardStats stats;              // of the last timed forward
};

// Runs the mix warmup + repeats times. Decodes keep their caches from one forward to the next
// (their context grows by one token each). A chunk of R rows at K keeps one cache too when K is
// at least R times the index of the middle timed forward (warmup + (repeats - 1) / 2): it is
// prefilled (untimed) once to where that forward's chunk starts at exactly K, and each forward's
// chunk follows the last (K - R, K, K + R, ... around the median), so a deep prefix is prefilled
// once, not before every forward. A shallower chunk gets a fresh cache whose K cached tokens are
// prefilled (untimed) before each forward. Tokens are seeded random ids.
Result<StepMixTiming> TimeStepMix(Model& model, DeviceContext& ctx, const StepMix& mix,
                                  const StepMixOptions& options);

// Tokens of cache the mix holds at once (a device model's pool is sized by it), and one request
// of an item at most (its cache's max_tokens).
int64_t StepMixCacheTokens(const StepMix& mix, const StepMixOptions& options);
int64_t StepItemCacheTokens(const StepItem& item, const StepMixOptions& options);

}  // namespace uniprefill
