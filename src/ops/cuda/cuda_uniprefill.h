// CUDA UniPrefill kernels (docs/design.md section 1): attention-mass scoring from the last n
// queries, block reduction, per-request top-p / fixed-ratio block selection and the compaction row
// list, all on the device. GPU twins of ops::AttentionImportance and sparsity::SelectTokens; the
// selection equals the CPU one on the same importance (ties broken the same way).
#pragma once

#include <cstdint>

#include "core/device_context.h"
#include "core/tensor.h"
#include "sparsity/token_selection.h"

namespace uniprefill::ops::cuda {

// importance f32 [N] (device, accumulated into: zero it first) += for each query j of q and head
// h, the f32 softmax over the keys visible to j (k_pos[i] <= q_pos[j]) of scale * q[j,h].k[i,kv(h)].
// q bf16 [n, Hq, D] (rows strided); k bf16 [N, Hkv, D] (rows strided); q_pos device int32 [n];
// k_pos device int32 [N], ascending.
void AttentionImportance(DeviceContext& ctx, float* importance, TensorView q, TensorView k,
                         const int32_t* q_pos, const int32_t* k_pos, float scale);

// Scratch for SelectTokens on up to max_tokens tokens (device memory, reused across calls).
size_t SelectTokensScratchBytes(int64_t max_tokens, const sparsity::SelectionParams& params);

// The kept token indices of one request, as sparsity::SelectTokens: kept_rows device int32 [N]
// receives the kept indices ascending in its first *kept_count entries; kept_count is a device
// int32 [1]. importance device f32 [N]. No host synchronisation: the caller copies kept_count back
// when it needs it on the host.
// n_tokens_device (optional, device int32 [1]): the request's N lives on the device (a segment
// after a sync-free drop); n_tokens is then an upper bound (it sizes the grids and the scratch) and
// the kernels apply every rule (keep-everything, the fixed-ratio count) to min(*n_tokens_device,
// n_tokens), exactly as sparsity::SelectTokens would to that N.
void SelectTokens(DeviceContext& ctx, int32_t* kept_rows, int32_t* kept_count,
                  const float* importance, int64_t n_tokens,
                  const sparsity::SelectionParams& params, void* scratch, size_t scratch_bytes,
                  const int32_t* n_tokens_device = nullptr);

// ---- Bounded segments: a packed batch whose per-request lengths live only on the device ----
// After a sync-free (fixed-ratio) drop the host knows, for request r, only a capacity: it owns rows
// [begin[r], begin[r] + capacity[r]) of every later buffer, of which the first count[r] (device
// int32) are its kept tokens, ascending; the rest are padding rows: zero on entry and at position
// kPaddingPosition, so causal masks by position hide them as keys from every real query.
constexpr int32_t kPaddingPosition = 0x3fffffff;

// The capacity after a fixed-ratio drop of a segment of at most `capacity` tokens: its kept count
// is at most that many whatever the scores (chosen blocks plus the sink and the window).
int64_t FixedRatioCapacity(int64_t capacity, const sparsity::SelectionParams& params);
// And a lower bound of the kept count of any segment of at least `minimum` tokens (a sliding
// layer stores the pages its window may reach from that many rows on).
int64_t FixedRatioMinimum(int64_t minimum, const sparsity::SelectionParams& params);

// rows device int32 [batch * n]: rows[r * n + i] = begin[r] + count[r] - n + i, request r's last n
// real rows (the UniPrefill observation queries, or with n = 1 the row whose logits are wanted).
// begin, count device int32 [batch]; every count[r] >= n.
void SegmentTailRows(DeviceContext& ctx, int32_t* rows, const int32_t* begin, const int32_t* count,
                     int batch, int n);

// out device int32 [n]: out[j] = in[source[j]], or kPaddingPosition where source[j] < 0: the
// mask coordinates of gathered rows, kept ascending within each segment (GatherRows would put 0
// on padding rows, which breaks the ascending order attention kernels rely on).
void GatherPositions(DeviceContext& ctx, int32_t* out, const int32_t* in, const int32_t* source,
                     int64_t n);

// The compaction of one drop over bounded segments. For request r, kept_rows (device int32, at the
// old segment's offsets old_begin[r], local indices) lists kept_count[r] tokens. For each row j of
// the new layout (new_cu device int32 [batch + 1], rows [0, new_cu[batch])): source[j] = the old
// global row of the kept token it receives, or -1 on a padding row; new_pos[j] = old_pos[source]
// or kPaddingPosition. GatherRows(source) then moves the rows (padding rows become zero).
// Optionally (new_index and index_base device int32 [batch] both set) new_index[j] =
// index_base[r] + (j - new_cu[r]) on real rows, kPaddingPosition on padding: the kept tokens'
// alive indices in the next cache segment. pass_through (optional, device int32 [batch]): where
// nonzero, request r did not select and keeps its first kept_count[r] rows in order (kept_rows is
// not read for it).
// kept_count[r] <= new_cu[r + 1] - new_cu[r] must hold (FixedRatioCapacity guarantees it).
void CompactSegments(DeviceContext& ctx, int32_t* source, int32_t* new_pos,
                     const int32_t* kept_rows, const int32_t* kept_count,
                     const int32_t* old_begin, const int32_t* new_cu, const int32_t* old_pos,
                     int batch, int64_t new_rows, int32_t* new_index = nullptr,
                     const int32_t* index_base = nullptr, const int32_t* pass_through = nullptr);

}  // namespace uniprefill::ops::cuda
