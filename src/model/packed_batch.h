// PackedBatch: the rows of one forward over several requests, packed together (docs/design.md
// section 2).
//
// Request r owns rows [seq(r).begin, seq(r).end) (cu_seqlens); each row carries its original
// position (for RoPE) and its alive index in the current segment (causal order and sliding
// windows). A prefill request brings many rows, a decode request one. The residual stream x lives
// here because a UniPrefill drop compacts it together with positions and indices: NextSegment keeps
// chosen rows of each request (in order) and renumbers them for the next segment, whose cache
// already holds segment_length(s + 1) entries of that request.
//
// Invariant: every row of a request is alive in every layer of the current segment; a request's
// last row (its newest token, whose logits are wanted) is never dropped.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "core/buffer.h"
#include "core/device_context.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kv/sequence_cache.h"
#include "sparsity/uniprefill_config.h"

namespace uniprefill {

namespace dist {
class Communicator;
}

// What a drop layer kept for one request.
struct KeptTokens {
  int layer = 0;
  int kept = 0;
  int alive = 0;
};

// The next token chosen on the device that ran the forward (CUDA models): the filters of
// engine/sampler.h without its penalties, and the uniform of the draw, so the request's seeded
// generator stays on the host. Only ids (and logprobs) travel back, not [vocab] logits.
struct StepSampling {
  float temperature = 0.0f;  // <= 0: greedy (argmax, lowest id on ties)
  int32_t top_k = 0;         // <= 0: off
  float top_p = 1.0f;        // >= 1: off
  float min_p = 0.0f;        // <= 0: off
  float uniform = 0.0f;      // in [0, 1): the draw is `uniform < cumulative probability`
  int32_t* token = nullptr;  // out: the chosen id
  float* logprob = nullptr;  // out (optional): its log-softmax over the raw logits
};

// One chunk of a segment-wise chunked UniPrefill prefill (docs/design.md section 2): the step runs
// segment `segment`'s layers only. Segment 0 starts from the embedding of the step's tokens; a
// later segment starts at drop layer d_segment's FFN with the next `rows` of the cache's boundary
// rows. Every segment but the last ends after drop layer d_{segment+1}'s attention, where the rows
// leave for the boundary; the last runs to the final norm (and gives logits when asked).
struct SegmentChunk {
  int segment = 0;
  int rows = 0;          // rows this chunk runs (segment 0: the step's token count)
  int segment_rows = 0;  // alive rows of the segment in this prefill: the selection's candidates
  // The segment's last chunk: at d_{segment+1} it selects among all segment_rows rows (its own
  // rows must hold the last n queries), and the collected rows shrink to the kept ones. (The last
  // segment ends at a drop only when a drop is the last layer: it selects there for the record.)
  bool ends_segment = false;
};

// One request's part of a forward.
struct SequenceStep {
  SequenceCache* cache = nullptr;
  std::span<const int32_t> tokens;       // new tokens (prefill: many; decode: one)
  float* logits = nullptr;               // f32 [vocab]: the last token's logits, or nullptr
  std::vector<KeptTokens>* kept = nullptr;  // UniPrefill selections are appended here, or nullptr
  bool allow_drop = true;  // false: this request passes through drop layers (dense results)
  // This request's selection parameters (mode, p, ratio, G, S, n) at drop layers; nullptr: the
  // forward's config. The drop layers and window mode are the forward's (they fix the cache layout).
  const UniPrefillConfig* selection = nullptr;
  // Device models: choose the next token on the device (with or without `logits`); host models
  // reject it. nullptr: no token is chosen by the forward.
  const StepSampling* sampling = nullptr;
  // A chunk of a segment-wise chunked prefill; nullptr: the step runs every layer (decodes, whole
  // prefills, dense chunks). Backends without LayerBackend::supports_segment_chunks reject it.
  const SegmentChunk* chunk = nullptr;
};

// The layer walk's steps, for ForwardStats::phase_s (walk timing, benchmarks only).
enum class WalkPhase {
  kBegin, kEmbed, kNorm, kAttention, kDropAttention, kDeltaNet, kExchange, kFfn, kMoe, kFinish,
  kCount
};
const char* WalkPhaseName(WalkPhase phase);

// Where a forward spent its UniPrefill time (benchmarks report the overhead share).
struct ForwardStats {
  double scoring_s = 0;     // importance of the last n queries (AttentionImportance)
  double selection_s = 0;   // block sums, sort, top-p / ratio, sink and window
  double compaction_s = 0;  // gathering kept rows of x, q (and gate); renumbering
  // Device models: host syncs at drop layers to learn kept counts (0 when every selecting request
  // is fixed-ratio: the CUDA model then sizes later layers by capacities).
  int drop_host_syncs = 0;
  // Device models: attentions of a chunk over its cached prefix run by split-KV (per layer and
  // request; LoadOptions::gpu_prefix_split_min_keys).
  int split_prefix_attentions = 0;
  // Device models: attentions of a chunk over its cached prefix that read the prefix in place
  // (its pages one run of pool blocks), not from a copy (per layer and request).
  int prefix_reads_in_place = 0;
  // Rows the LM head ran on: the forward's requests that want logits or a token (a prefill chunk
  // before its last wants neither, so a forward of such chunks runs no head).
  int head_rows = 0;
  // Rows the last layer's queries (and everything after) ran on: each request's last row
  // (QueryRows::kLastOfEach), or every row it kept with LoadOptions::last_layer_every_row or
  // where the last layer is no attention layer (a sync-free GPU forward's: capacities).
  int last_layer_rows = 0;
  // Benchmarks only: with time_phases the walk waits for the backend after every step and adds
  // its wall time to phase_s[WalkPhase] (the waits cost some speed: compare like with like).
  bool time_phases = false;
  std::array<double, static_cast<size_t>(WalkPhase::kCount)> phase_s{};
};

// Set at a drop layer: the selection parameters and where to record what was kept.
struct DropLayer {
  int layer = 0;
  const UniPrefillConfig* config = nullptr;
  std::span<const SequenceStep> steps;  // steps[r].kept receives request r's record
  ForwardStats* stats = nullptr;        // optional timing
  // Tensor parallel (world > 1): each rank scores with its own heads, and the block scores are
  // summed over the ranks before the (deterministic) selection, so every rank keeps the same rows.
  dist::Communicator* comm = nullptr;
};

class PackedBatch {
 public:
  struct Seq {
    int begin = 0, end = 0;  // rows
    SequenceCache* cache = nullptr;
    int new_tokens = 0;      // tokens this step brought (prefill length, or 1)
    // Segment-wise chunks: the segment the rows enter at (0: the embedding; before it the
    // request has no rows) and the segment at whose end they leave (-1: they reach the logits).
    int enters = 0;
    int leaves = -1;
    int rows() const { return end - begin; }
  };

  // Rows entering at a segment start (segment-wise chunks): f32 [rows, hidden] and positions.
  struct EnteringRows {
    const float* x = nullptr;
    std::span<const int32_t> pos;
  };

  // Checks the steps (tokens inside the vocabulary, room in each cache, caches with `n_segments`
  // segments) and lays out the rows: positions continue each cache, indices continue segment 0.
  static Result<PackedBatch> Build(std::span<const SequenceStep> steps, int vocab, int hidden,
                                   int n_segments);

  int rows() const { return static_cast<int>(pos_.size()); }
  int n_seqs() const { return static_cast<int>(seqs_.size()); }
  const Seq& seq(int r) const { return seqs_[r]; }
  int segment() const { return segment_; }
  const int32_t* positions() const { return pos_.data(); }
  const int32_t* indices() const { return index_.data(); }
  const std::vector<int32_t>& token_ids() const { return tokens_; }  // [rows] at build time
  // f32 [rows, hidden]: the residual stream.
  TensorView x() const { return x_.View(DType::kF32, {rows(), hidden_}); }

  // Closes the current segment. keep[r] lists request r's kept rows, relative to seq(r).begin and
  // ascending; an empty list keeps every row (decodes, short prefills, no drop). Gathers x, the
  // positions and the rows' next-segment indices.
  void NextSegment(DeviceContext& ctx, const std::vector<std::vector<int32_t>>& keep);

  // QueryRows::kLastOfEach: every request keeps only its last row (none without rows), in the
  // same segment (nothing else about the segment changes: its caches hold every row already).
  // Returns the rows kept, ascending (each request's old last row).
  std::vector<int32_t> KeepLastRows(DeviceContext& ctx);

  // Whether segment-wise chunks leave or enter at the start of `segment` (drop layer d_segment).
  bool Exchanges(int segment) const;
  // At drop layer d_k after its attention (segment() == k): the rows of requests that leave at the
  // end of segment k - 1 go (the caller copied them out), and request r with enter[r].x set enters
  // segment k with those rows (alive indices continue its cache's segment k).
  void Exchange(std::span<const EnteringRows> enter);

  // Records in every cache how many tokens each segment gained; call once the forward is done.
  void Commit();

 private:
  std::vector<Seq> seqs_;
  std::vector<int32_t> tokens_, pos_, index_;
  std::vector<std::vector<int>> added_;  // [request][segment] rows appended
  Buffer x_;
  int hidden_ = 0;
  int segment_ = 0;
  int n_segments_ = 1;
};

}  // namespace uniprefill
