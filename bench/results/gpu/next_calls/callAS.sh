#!/usr/bin/env bash
# 33rd session, last call (replaces callAQ.sh, which builds on the device): the two GPU
# mutations of the attention kernel's launch choices, now its default path, from mutants built
# here (`bash scripts/gpu_mutations.sh pack gpu_wgmma_skip_rescale_any_row.patch
# gpu_wgmma_group_order_one_head.patch`, carry [".gpu_mut"]). skip_rescale_any_row skips O's
# rescale when any row of a warp, not every row, kept its max; group_order_one_head makes the
# group order meet one query head of each group only. Predicted: both caught (the bit-identity
# tests against the old launch fail).
source "$(dirname "$0")/lib.sh"
call_begin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
bash scripts/gpu_mutations.sh run > $OUT/mutations.txt 2>&1
echo "mutations rc $? at $(elapsed) s"; cat $OUT/mutations.txt
