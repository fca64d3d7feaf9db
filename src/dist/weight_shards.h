// A rank's slice of one linear weight (ops::LinearWeight [out, in], parts stacked along out), as
// the shard plan (dist/shard_plan.h) asks for it:
//   column-parallel (QKV, gate/up): output rows [begin, end), views into the same storage: a rank
//     reading a memory-mapped GGUF touches only its rows' pages;
//   row-parallel (o_proj, down): input columns [begin, end), copied (a row's quant blocks lie
//     along `in`, so each row's slice is a contiguous run of whole blocks: begin and end must be
//     multiples of the type's block, 32 or 256 elements).
// The f32 prefill copy (LinearWeight::f32) is not carried over: the loader builds it per shard.
// Not for: random-weight presets (their rows are generated, not stored).
#pragma once

#include <cstdint>
#include <vector>

#include "core/buffer.h"
#include "core/status.h"
#include "ops/ops.h"

namespace uniprefill::dist {

Result<ops::LinearWeight> SliceOutputRows(const ops::LinearWeight& w, int64_t begin, int64_t end);

// The copies live in *storage (one Buffer per part), which must outlive the returned weight.
Result<ops::LinearWeight> SliceInputColumns(const ops::LinearWeight& w, int64_t begin, int64_t end,
                                            std::vector<Buffer>* storage);

}  // namespace uniprefill::dist
