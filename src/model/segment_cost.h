// What one row of a segment-wise prefill chunk costs, per segment (docs/design.md section 2): a
// chunk of segment s runs only that segment's layers, so it pays their share of the model's linear
// work per row and, per cached key its rows attend, their attention (the scheduler's step budget,
// engine/scheduler.h; Model::SegmentCosts). A chunk of r rows after p cached rows of its segment
// costs r linear_share + t key_cost (p + t / 2) + prefix_key_cost p + window_key_cost times the
// keys its t rows see in a window, t being r rounded up to whole query tiles.
#pragma once

namespace uniprefill {

struct SegmentCost {
  // The segment's linear FLOPs per row over the whole model's (the shares sum to 1).
  double linear_share = 1.0;
  // The segment's full-attention FLOPs per (row, cached key) over the whole model's linear FLOPs
  // per row, times the backend's PrefixAttentionCost::slowdown (the segments' sum is the whole
  // model's).
  double key_cost = 0.0;
  // Once per chunk and cached key, whatever its rows: the backend's per-layer work on the prefix
  // itself (CUDA: copying it out of the paged KV pool), in rows of the budget. 0 on the CPU.
  double prefix_key_cost = 0.0;
  // The segment's sliding-window layers: their attention FLOPs per (row, key) over the whole
  // model's linear FLOPs per row (times the backend's slowdown, as key_cost), a row attending
  // min(its position + 1, window) keys in each. A chunk of r rows after p cached rows pays
  // window_key_cost times sum over its rows of min(p + i + 1, window). 0: no windows.
  double window_key_cost = 0.0;
  int window = 0;  // the longest of the segment's windows
  int full_attention_layers = 0;  // the segment's layers that attend every cached key
  // The backend's attention runs a chunk's rows in tiles of this many queries (the CUDA kernels'
  // CTAs: 128), each tile costing its whole keys however few of its rows are real: a chunk's
  // keys are priced for its rows rounded up to whole tiles (1: per row, the CPU).
  int query_tile_rows = 1;
  // What a decode's attention costs per cached key in the segment's full-attention layers, in
  // rows of the budget (the backend's PrefixAttentionCost::decode_flops_per_key; 0: unpriced).
  double decode_key_cost = 0.0;
  // The rows below which a layer's linear work costs the stream of its weights (the backend's
  // PrefixAttentionCost::weight_floor_rows; 0: unpriced). The same in every segment: a segment's
  // layers cost linear_share times at least this many rows in a step that runs them.
  double weight_floor_rows = 0.0;
  // The backend's PrefixAttentionCost::min_extra_chunk_rows (SchedulerConfig's field).
  int min_extra_chunk_rows = 0;
  // The backend's PrefixAttentionCost::linear_row_tile (SchedulerConfig's field).
  int linear_row_tile = 0;
  // The backend's PrefixAttentionCost::tile_overshoot (SchedulerConfig's field).
  double tile_overshoot = 0.0;
};

// What a backend measured of a chunk's attention over its cached prefix (LayerBackend::
// PrefixAttentionCost): how many times longer one attention FLOP takes than one GEMM FLOP, and
// the per-layer work on each cached key (the copy) in GEMM-FLOP equivalents.
struct PrefixAttentionCost {
  double slowdown = 1.0;
  double copy_flops_per_key = 0.0;
  int query_tile_rows = 1;  // SegmentCost::query_tile_rows
  // A decode's attention per cached key and full-attention layer, in GEMM-FLOP equivalents (its
  // paged decode kernel is bound by memory, not FLOPs: measured, not counted).
  double decode_flops_per_key = 0.0;
  // The rows at which a GEMM over a layer's weights takes as long as streaming them (bf16: a
  // GEMM of fewer rows costs the same as one of this many). 0: unmeasured.
  double weight_floor_rows = 0.0;
  // A prefill chunk beside another prompt's pays that request's fixed costs in every layer it runs
  // (its own attention launches, its rows' bookkeeping): below this many rows, unless it ends
  // its segment or prompt, it is not worth a place in a step that already prefills. 0: any.
  int min_extra_chunk_rows = 0;
  // The backend's GEMMs run a step's rows in tiles of this many (the H200's cuBLASLt kernels:
  // 128): a step a few rows past whole tiles pays a whole tile more of linear work. 0: per row.
  int linear_row_tile = 0;
  // How far over its budget a step beside decodes may go for one more whole query tile of a
  // deep chunk (SchedulerConfig::tile_overshoot; a share of the budget). 0: never.
  double tile_overshoot = 0.0;
};

}  // namespace uniprefill
