#!/usr/bin/env bash
# 33rd session, second call (the warm machine and build of callAO): the two GPU mutations of the
# launch choices (tests/mutations/gpu_wgmma_skip_rescale_any_row.patch: the rescale skipped when
# any row, not every row, kept its max; gpu_wgmma_group_order_one_head.patch: the group order
# meets one head of each group only), each a rebuild of the kernel and its tests that must make
# the named tests fail, now on the default path; then Figure 1 from one call: `bench
# gpu-prefill` 8K / 32K / 128K beside ANCHOR_SDPA=cudnn (prefill_beside_anchor; first, here:
# mkdir -p .gpu_deps/anchor && cp ../shared/bench/pytorch_anchor.py .gpu_deps/anchor/).
# Predicted: both caught; ours 1.15x / 1.11x / 1.09x the anchor at 8K / 32K / 128K (H100, 32nd
# session's call AN: 1.112x / 1.093x at 32K / 128K).
source "$(dirname "$0")/lib.sh"
call_begin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
ensure_uniprefill
export UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD
MUTATIONS="gpu_wgmma_skip_rescale_any_row.patch gpu_wgmma_group_order_one_head.patch" \
  timeout 300 bash scripts/mutation_check.sh build-dev-new uniprefill_cuda_tests \
  > $OUT/mutations.txt 2>&1
echo "mutations rc $? at $(elapsed) s"; cat $OUT/mutations.txt
DEADLINE=585 prefill_beside_anchor
pack_out
