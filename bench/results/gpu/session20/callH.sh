#!/usr/bin/env bash
# 20th session, call H: the CPU-side changes of this session (PoolSgemm with OpenBLAS held to one
# thread, in CPU and CUDA contexts alike; f16 CPU KV caches and KvChunk's typeless pointers;
# Model::kv_dtype) built with CUDA on the H200, and the whole CUDA test suite run (the GPU models
# against the CPU ones, which the CUDA tests load with LoadOptions' f32 KV default).
t0=$(date +%s)
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv > $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0
UP_GPU_TARGETS="uniprefill uniprefill_cuda_tests" bash scripts/gpu_build.sh build /tmp/bld > /tmp/build.log 2>&1
echo "build rc $? at $(( $(date +%s) - t0 )) s"; grep -E " error|cuDNN attention" /tmp/build.log | head -3
left=$(( 580 - ($(date +%s) - t0) ))
UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD timeout $left /tmp/bld/uniprefill_cuda_tests \
  --gtest_brief=1 > $OUT/cuda_tests.log 2>&1
echo "cuda tests rc $? at $(( $(date +%s) - t0 )) s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|SKIPPED \] [0-9]|tests from .* ran" $OUT/cuda_tests.log | head -20
xz -9 $OUT/cuda_tests.log
