#!/usr/bin/env bash
# Prepared in the 21st session: this tree against the 20th session's (e6f06c4, in .old_src) on
# the H200: both built in parallel, the CUDA suite on the new build, the decode steps of both
# binaries (README.md beside this file).
t0=$(date +%s)
mkdir -p $OUT
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv > $OUT/gpu.txt
bash scripts/gpu_compare.sh .old_src $OUT/cmp build > $OUT/build.txt 2>&1
echo "build rc $? at $(( $(date +%s) - t0 )) s"; tail -3 $OUT/build.txt
left=$(( 420 - ($(date +%s) - t0) ))
UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD timeout $left build-dev-new/uniprefill_cuda_tests \
  --gtest_brief=1 > $OUT/cuda_tests.log 2>&1
echo "cuda tests rc $? at $(( $(date +%s) - t0 )) s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests from .* ran" $OUT/cuda_tests.log | head -20
xz -9 $OUT/cuda_tests.log
left=$(( 585 - ($(date +%s) - t0) ))
timeout $left bash scripts/gpu_compare.sh .old_src $OUT/cmp decode > $OUT/decode.txt 2>&1
echo "decode rc $? at $(( $(date +%s) - t0 )) s"; cat $OUT/cmp/decode_compare.txt 2>/dev/null
