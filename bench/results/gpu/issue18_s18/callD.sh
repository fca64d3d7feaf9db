#!/usr/bin/env bash
# 18th session, call D: the whole CUDA suite on the final tree (f7c2179: split-KV in our kernel,
# LinearWeight's new field); the real-model tests skip (their files do not travel).
t0=$(date +%s)
mkdir -p $OUT
export NCCL_NVLS_ENABLE=0 UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD
UP_GPU_TARGETS="uniprefill_cuda_tests" bash scripts/gpu_build.sh build /tmp/bld > /tmp/build.log 2>&1
echo "build rc $? at $(( $(date +%s) - t0 )) s"; grep -E " error|cuDNN attention" /tmp/build.log | head -3
timeout $(( 285 - ($(date +%s) - t0) )) /tmp/bld/uniprefill_cuda_tests > $OUT/cuda_suite.log 2>&1
echo "suite rc $? at $(( $(date +%s) - t0 )) s"
grep -E "tests ran|^\[  PASSED|^\[  FAILED|FAILED  \]" $OUT/cuda_suite.log | head -20
xz -9 $OUT/cuda_suite.log
