// Segment-wise chunked prefill (docs/design.md section 2) driven without the serving engine: one
// prompt's prefill as the scheduler cuts it (NextSegmentChunkRows), segment after segment, each
// chunk its own forward; or several prompts advanced together, one chunk each per forward. The
// model tests check chunked against unchunked with it; `bench gpu-prefill --chunk-tokens` times it.
#pragma once

#include <algorithm>
#include <span>
#include <utility>
#include <vector>

#include "engine/scheduler.h"
#include "model/model.h"

namespace uniprefill {

// One prompt's prefill in progress: its segment, its rows and how many of them are done.
struct SegmentChunkedPrefill {
  SequenceCache* cache = nullptr;
  std::vector<int32_t> prompt;
  int chunk = 0;                      // the budget of rows per chunk
  float* logits = nullptr;            // filled by the last chunk
  std::vector<KeptTokens>* kept = nullptr;
  const UniPrefillConfig* selection = nullptr;  // its selection (nullptr: the forward's)
  int segment = 0, segment_rows = 0, done = 0;
  std::vector<int> chunk_rows;        // every chunk's rows, in order (a log for the tests)
  SegmentChunk current;

  static SegmentChunkedPrefill Of(SequenceCache* cache, std::vector<int32_t> prompt, int chunk,
                                  float* logits, std::vector<KeptTokens>* kept,
                                  const UniPrefillConfig* selection = nullptr) {
    SegmentChunkedPrefill p;
    p.cache = cache;
    p.prompt = std::move(prompt);
    p.chunk = chunk;
    p.logits = logits;
    p.kept = kept;
    p.selection = selection;
    return p;
  }

  bool finished(int n_segments) const { return segment >= n_segments; }

  // This prefill's next step (valid until the next call).
  SequenceStep NextStep(int n_segments, int last_n) {
    if (segment_rows == 0) segment_rows = static_cast<int>(prompt.size());
    const bool last_segment = segment + 1 == n_segments;
    // Every segment's last chunk holds the last n rows (the last segment's too: its end may be
    // a drop at the last layer).
    const int tail = std::min(last_n, segment_rows);
    const int n = NextSegmentChunkRows(segment_rows - done, chunk, tail);
    current = SegmentChunk{segment, n, segment_rows, done + n == segment_rows};
    SequenceStep s;
    s.cache = cache;
    if (segment == 0) s.tokens = std::span<const int32_t>(prompt).subspan(done, n);
    s.logits = last_segment && done + n == segment_rows ? logits : nullptr;
    s.kept = kept;
    s.selection = selection;
    s.chunk = &current;
    chunk_rows.push_back(n);
    return s;
  }

  // After the step's forward: the next chunk's place.
  void Advance() {
    done += current.rows;
    if (done < segment_rows) return;
    ++segment;
    done = 0;
    segment_rows = cache->boundary().ready.rows();  // the kept rows (0 after the last segment)
  }
};

// Runs `prefills` to completion, every unfinished one a chunk per forward, beside `extra` steps
// in the first forward (e.g. decodes of other requests).
inline Status RunSegmentChunked(Model& m, DeviceContext& ctx, const UniPrefillConfig& up,
                                std::vector<SegmentChunkedPrefill*> prefills,
                                std::span<const SequenceStep> extra = {}) {
  const int n_segments = m.CacheLayoutFor(up.active_drop_layers()).n_segments;
  bool first = true;
  for (;;) {
    std::vector<SequenceStep> steps;
    std::vector<SegmentChunkedPrefill*> running;
    if (first) steps.assign(extra.begin(), extra.end());
    first = false;
    for (SegmentChunkedPrefill* p : prefills) {
      if (p->finished(n_segments)) continue;
      const UniPrefillConfig& sel = p->selection ? *p->selection : up;
      steps.push_back(p->NextStep(n_segments, sel.selection.last_n));
      running.push_back(p);
    }
    if (running.empty()) return OkStatus();
    UP_RETURN_IF_ERROR(m.ForwardBatch(ctx, steps, up));
    for (SegmentChunkedPrefill* p : running) p->Advance();
  }
}

}  // namespace uniprefill
