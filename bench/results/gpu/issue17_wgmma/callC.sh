#!/usr/bin/env bash
# 16th session, call C: the whole CUDA suite on the new default (--gpu-attention auto: the wgmma
# kernel where it covers the layer).
t0=$(date +%s)
mkdir -p $OUT
[ -x /tmp/bld/uniprefill_cuda_tests ] || UP_GPU_TARGETS="uniprefill uniprefill_cuda_tests" bash scripts/gpu_build.sh build /tmp/bld > /tmp/build.log 2>&1
echo "build at $(( $(date +%s) - t0 )) s"
export UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD NCCL_NVLS_ENABLE=0
timeout $(( 570 - ($(date +%s) - t0) )) /tmp/bld/uniprefill_cuda_tests --gtest_filter='-NcclBoundedWait*' > $OUT/cuda_suite.log 2>&1
echo "suite rc $? at $(( $(date +%s) - t0 )) s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests? ran|^\[  SKIPPED \] [0-9]" $OUT/cuda_suite.log | head -30
xz -9 $OUT/cuda_suite.log
