// The model tests' selection for segment-wise chunked prefill; the driver is
// engine/segment_chunked_prefill.h.
#pragma once

#include <utility>
#include <vector>

#include "engine/segment_chunked_prefill.h"

namespace uniprefill::testing {

using uniprefill::RunSegmentChunked;
using uniprefill::SegmentChunkedPrefill;

// The chunk tests' selection at `drops`: blocks of 32, sink 40, the last 48 queries (top-p 0.9 or
// keep ratio 0.5), so a 700-token prompt selects at every drop and a 16-row chunk is fewer rows
// than the n queries a segment's last chunk must hold.
inline UniPrefillConfig ChunkTestSelection(std::vector<int> drops, sparsity::SelectionMode mode) {
  UniPrefillConfig up;
  up.drop_layers = std::move(drops);
  up.selection.mode = mode;
  up.selection.top_p = 0.9f;
  up.selection.keep_ratio = 0.5f;
  up.selection.block_size = 32;
  up.selection.sink = 40;
  up.selection.last_n = 48;
  return up;
}

}  // namespace uniprefill::testing
