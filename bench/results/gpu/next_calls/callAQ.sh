#!/usr/bin/env bash
# 33rd session, third call (warm, after callAO's build): the two GPU mutations of the attention
# kernel's launch choices, now its default path. tests/mutations/gpu_wgmma_skip_rescale_any_row.patch
# skips O's rescale when any row of a warp, not every row, kept its max;
# gpu_wgmma_group_order_one_head.patch makes the group order meet one query head of each group
# only. Each is a rebuild of uniprefill_cuda_tests that must make the manifest's tests fail
# (scripts/mutation_check.sh, MUTATIONS= restricting it to these two). Predicted: both caught.
source "$(dirname "$0")/lib.sh"
call_begin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
export UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD
[ -f build-dev-new/build.ninja ] ||  # a build folder (a pack's binaries alone cannot rebuild)
  UP_GPU_TARGETS="uniprefill_cuda_tests" bash scripts/gpu_build.sh build build-dev-new > $OUT/build.txt 2>&1
MUTATIONS="gpu_wgmma_skip_rescale_any_row.patch gpu_wgmma_group_order_one_head.patch" \
  timeout $(( 585 - $(elapsed) )) bash scripts/mutation_check.sh build-dev-new uniprefill_cuda_tests \
  > $OUT/mutations.txt 2>&1
echo "mutations rc $? at $(elapsed) s"; cat $OUT/mutations.txt
pack_out
