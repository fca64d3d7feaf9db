// How many key splits a launch of a tiled attention kernel over several requests' chunks should
// use, from a model of how its CTAs fill the SMs (pure host code; the CUDA backend's batched
// prefix launch, CudaBackend::WgmmaPrefixBatch, asks it).
//
// The kernel (src/ops/cuda/sm90/flash_attention_wgmma.cu) launches one CTA per (query tile of the
// longest chunk, head, request, split), in that order (x fastest); a CTA past its request's rows
// exits at once; the others walk split s's share [T s / S, T (s + 1) / S) of the T key tiles
// their rows see (causally: the prefix and the chunk up to the tile's last row). One CTA runs per
// SM at a time, so the launch takes what a greedy list schedule of those CTAs on the SMs takes.
//
// Why a model and not the last wave's fill (CudaBackend::WgmmaSplitsFor, which a single request
// uses): chunks of different depths in one launch have CTAs of very different lengths. A 768-row
// chunk over 16K keys beside a 256-row one over 2K keys fills 256 of 264 CTA slots unsplit, so
// the fill rule keeps one split, and the 192 long CTAs run in two waves; split in two they run in
// ~1.5 (H200, 23rd session: that mix took 43.0 ms in one launch, 41.6 in one launch each).
#pragma once

#include <cstdint>
#include <vector>

namespace uniprefill::ops {

struct SplitPlanChunk {
  int q_rows = 0;   // the chunk's query rows
  int64_t keys = 0;  // keys its last row sees: cached prefix + q_rows
};

struct SplitPlanShape {
  int heads = 0;             // query heads (CTAs per query tile)
  int sms = 0;               // CTAs that run at once
  int tile_rows = 128;       // query rows per CTA
  int tile_keys = 128;       // keys per step of a CTA's walk
  int max_splits = 8;        // splits tried: 1 .. max_splits
  double cta_overhead = 2;   // a CTA's fixed cost (prologue, epilogue), in key-tile steps
  // The merge of split outputs, in key-tile steps of one SM per byte it moves (reads every
  // split's partial bf16 rows and writes the result): ~1 / (HBM bytes per second x a step's
  // seconds), 1 / (3e12 x 1.85e-6) on the H200 (a 128 x 128 x 128 step at 600 TFLOP/s / 132).
  double merge_steps_per_byte = 1.0 / (3e12 * 1.85e-6);
  double merge_launch = 2;   // each request's merge launch, in steps
  int head_dim = 128;
  // The fewest splits within this share of the least modelled time win: the model's error is
  // larger than a percent or two, and each split adds merge traffic and scratch.
  double tolerance = 0.03;
};

// The launch's modelled time, in key-tile steps of one SM, with `splits` splits: the greedy
// schedule's makespan, plus the merges when splits > 1.
double ModelledSplitLaunch(const std::vector<SplitPlanChunk>& chunks, const SplitPlanShape& shape,
                           int splits);

// The fewest splits in 1 .. shape.max_splits modelled within shape.tolerance of the least time.
// The caller caps max_splits (the merge's piece limit, a least number of keys per split).
int PlanKeySplits(const std::vector<SplitPlanChunk>& chunks, const SplitPlanShape& shape);

}  // namespace uniprefill::ops
