#!/usr/bin/env bash
# 16th session, call A: build on the GPU machine, then the kernel's and the whole-model CUDA tests.
t0=$(date +%s)
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv > $OUT/gpu.txt
UP_GPU_TARGETS="uniprefill uniprefill_cuda_tests" bash scripts/gpu_build.sh build /tmp/bld > /tmp/build.log 2>&1
echo "build rc $? at $(( $(date +%s) - t0 )) s"; tail -4 /tmp/build.log; grep -E "error|C7513|C7515" /tmp/build.log | head
export UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD NCCL_NVLS_ENABLE=0
timeout $(( 560 - ($(date +%s) - t0) )) /tmp/bld/uniprefill_cuda_tests \
  --gtest_filter='WgmmaAttention*:CudaRandomModelTest.*:CudaFlashAttention*:CudaModel*:CudnnAttentionTest*' \
  > $OUT/tests_a.log 2>&1
echo "tests rc $? at $(( $(date +%s) - t0 )) s"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|normalised error|tests ran" $OUT/tests_a.log | head -60
xz -k $OUT/tests_a.log 2>/dev/null; rm -f $OUT/tests_a.log
