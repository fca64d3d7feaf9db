// What the environment asks of the CUDA backend for diagnosis and same-run comparisons (read once
// by MakeCudaBackend; docs/gpu_performance.md lists them):
//   UNIPREFILL_CUDA_STEP_TRACE=path           a per-forward timeline (step_trace.h);
//   UNIPREFILL_CUDA_SYNC_EVERY_FORWARD=1      a host sync at the end of every forward, as before
//                                             forwards that return nothing skipped it;
//   UNIPREFILL_CUDA_ATTENTION_SLOWDOWN=x      PrefixAttentionCosts fixed at x and no copy cost
//                                             instead of measured by PrepareServing (1: chunks
//                                             priced by FLOPs alone, as before it measured);
//   UNIPREFILL_CUDA_PREFIX_COPY=1             chunks copy their cached prefix out of the pool
//                                             (priced) instead of reading it in place, as before
//                                             caches laid each layer out in one run.
//   UNIPREFILL_CUDA_SPLIT_ON_CUDNN=1          chunks our Hopper kernel runs are split on cuDNN
//                                             (8 pieces, its own call, a merge) instead of on
//                                             our kernel, as before it split keys itself.
//   UNIPREFILL_CUDA_UNTILED_PRICE=1           chunks' keys priced per row instead of per whole
//                                             query tile (SegmentCost::query_tile_rows), as
//                                             before the tiles were priced.
//   UNIPREFILL_CUDA_DECODES_AS_ROWS=1         a decode costs the step budget its row only, its
//                                             keys unpriced (PrefixAttentionCost::
//                                             decode_flops_per_key not measured), as before.
//   UNIPREFILL_CUDA_WEIGHT_FLOOR=0            layers that only a step's decodes run are not
//                                             priced at their weights' stream (PrefixAttention-
//                                             Cost::weight_floor_rows 0; measured by Prepare-
//                                             Serving either way), as before the 23rd session
//                                             made it the default (docs/serving.md).
//   UNIPREFILL_CUDA_SMALL_PIECES=1            chunks of less than a query tile may join a step
//                                             that already prefills another prompt (Prefix-
//                                             AttentionCost::min_extra_chunk_rows 0), as before.
//   UNIPREFILL_CUDA_PREFIX_ONE_LAUNCH=1       the chunks of a step's prompts that our Hopper
//                                             kernel runs over their cached prefixes share one
//                                             launch per layer (CudaBackend::WgmmaPrefixBatch)
//                                             instead of one each; not the default: 1.4-3.9%
//                                             shorter in bench step (24th session, split count
//                                             from ops::PlanKeySplits), 1-2% more TTFT served.
//   UNIPREFILL_CUDA_ALIGN_STEP_ROWS=1         the scheduler aligns a step's rows to the GEMMs'
//                                             128-row tiles (PrefixAttentionCost::
//                                             linear_row_tile): a chunk gives up the rows past
//                                             the last whole tile where that pays; written
//                                             without a GPU (23rd session); served in the
//                                             24th: no change, so it stays opt-in.
//   UNIPREFILL_CUDA_GEMM_TUNE=1               PrepareServing times cuBLASLt's proposals for
//                                             every weight shape at row buckets of 64 up to the
//                                             step budget and keeps the fastest (ops/cuda/
//                                             gemm_algos.h TuneGemms); written without a GPU
//                                             (24th session), not yet measured.
//   UNIPREFILL_CUDA_SEPARATE_UPLOADS=1        each small metadata array of a layer (the prefix
//                                             attention's four, a decode run's tables and
//                                             lengths) its own host-to-device copy, as before
//                                             PinnedStaging::PutAll made them one (24th
//                                             session, unmeasured).
//   UNIPREFILL_CUDA_TILE_OVERSHOOT=x          a step beside decodes may run x (a share, at
//                                             most 0.5) over its budget for one more whole
//                                             query tile of a deep chunk, where that lands
//                                             nearer the budget (SchedulerConfig::
//                                             tile_overshoot); written without a GPU (25th
//                                             session), not yet served. 0: off, the default.
//   UNIPREFILL_CUDA_SEPARATE_ROPE=1           an attention layer's RoPE runs in a launch of its
//                                             own before the keys' append, as before the 28th
//                                             session fused them (RopePagedKvAppend).
//   UNIPREFILL_CUDA_WGMMA_GROUP_ORDER=0|1     our Hopper attention kernel meets its CTAs kv head
//                                             group by group, heaviest query tiles first across
//                                             the group (WgmmaTileOrder::kKvGroupLongestFirst),
//                                             or head by head (kHeadMajor). Default 1.
//   UNIPREFILL_CUDA_WGMMA_SKIP_UNIT_RESCALE=0|1  the kernel leaves O alone where no row of a
//                                             warp saw a new max (bit-identical output), or
//                                             rescales every key tile. Default 1.
//   UNIPREFILL_CUDA_WGMMA_SCHEDULE=overlap|pv_beside_exp|serial  the kernel's consumer schedule
//                                             (WgmmaAttentionSchedule; default pv_beside_exp; all
//                                             three bit-identical).
//   UNIPREFILL_CUDA_GATED_GEMM=1              a dense FFN's gate | up GEMM applies the gated
//                                             activation in its epilogue (ops::cuda::GatedGemm,
//                                             CUTLASS; weights' gate and up rows interleaved at
//                                             load) instead of cuBLASLt writing [rows, 2f] and
//                                             a kernel of its own reading it back. Opt-in: the
//                                             37th session measured it no faster (H100, 8B
//                                             dense 32K / 128K +0.3%: CUTLASS's GEMM runs below
//                                             cuBLASLt's rate by about what the fusion saves).
//   UNIPREFILL_CUDA_GATED_GEMM_MIN_ROWS=n     with it, forwards of fewer rows run cuBLASLt and
//                                             GatedActivationPairs (default 256).
//   UNIPREFILL_CUDA_GATED_GEMM_VARIANT=n      its kernel configuration (ops::cuda::GatedGemmVariant:
//                                             tile, cluster, schedule), for same-binary arms.
//   UNIPREFILL_CUDA_GEMM_MAX_ROWS=n           every cuBLASLt GEMM of more than n rows runs as row
//                                             blocks of at most n (CudaContext::SetGemmMaxRows);
//                                             0 / unset: whole, the default. An experiment:
//                                             written without a GPU (37th session).
//   UNIPREFILL_CUDA_KEPT_QUERIES_ON_FLASH=1   a drop layer's kept (gathered) queries attend on
//                                             ops::cuda::FlashAttention (mma.sync, by
//                                             coordinates), as before the 38th session ran them
//                                             on our Hopper kernel with coordinates.
//   UNIPREFILL_CUDA_RESIDUAL_IN_GEMM=1        a block's output projection (attention's o, a
//                                             dense FFN's down) adds its product to the
//                                             residual in cuBLASLt's epilogue (GemmAccumulate)
//                                             where nothing comes between them (no post-norm, no
//                                             tensor parallel all-reduce), so the next norm
//                                             reads one [rows, hidden] tensor, not two. Written
//                                             without a GPU (38th session): opt-in until run.
//   UNIPREFILL_CUDNN_SDPA=unified|auto        cuDNN's graphs built with its UNIFIED SDPA engine
//                                             (cuDNN >= 9.21), or with both and the faster kept,
//                                             instead of COMPOSITE alone (cudnn_attention.h).
#pragma once

#include <memory>

#include "backend/cuda/step_trace.h"
#include "core/status.h"
#include "ops/cuda/cudnn_attention.h"
#include "ops/cuda/sm90/flash_attention_wgmma.h"

namespace uniprefill::cuda_backend {

// Forwards of fewer rows than this run the FFN's gate | up on cuBLASLt (decode steps: its small-M
// kernels stream the weights across every SM).
inline constexpr int kGatedGemmMinRows = 256;

struct CudaDiagnostics {
  std::unique_ptr<StepTrace> trace;  // null: no trace
  bool sync_every_forward = false;
  double attention_slowdown = 0;  // 0: measured
  bool prefix_copy = false;
  bool split_on_cudnn = false;
  bool untiled_price = false;
  bool decodes_as_rows = false;
  bool weight_floor = true;
  bool small_pieces = false;
  bool prefix_one_launch = false;
  bool align_step_rows = false;
  bool gemm_tune = false;
  bool separate_uploads = false;
  bool separate_rope = false;
  double tile_overshoot = 0;  // 0: off
  bool gated_gemm = false;  // see UNIPREFILL_CUDA_GATED_GEMM above
  int gated_gemm_min_rows = kGatedGemmMinRows;
  int gated_gemm_variant = 0;
  int64_t gemm_max_rows = 0;  // 0: whole GEMMs
  bool kept_queries_on_flash = false;
  bool residual_in_gemm = false;
  // The three launch choices default on since the 32nd session's H200 call (probe 233.4 vs
  // 247.6 ms at 128K; bench gpu-prefill 8B dense 128K 10497 vs 10961 ms; docs/gpu_performance.md).
  bool wgmma_group_order = true;
  bool wgmma_skip_unit_rescale = true;
  ops::cuda::WgmmaAttentionSchedule wgmma_schedule =
      ops::cuda::WgmmaAttentionSchedule::kIntraOverlapPvBesideExp;
  ops::cuda::CudnnSdpaImplementation cudnn_sdpa = ops::cuda::CudnnSdpaImplementation::kComposite;
};

// InvalidArgument naming the variable when a value cannot be used.
Result<CudaDiagnostics> DiagnosticsFromEnvironment();

}  // namespace uniprefill::cuda_backend
