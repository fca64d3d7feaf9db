#!/usr/bin/env bash
# 29th session: the GPU model tests with cuDNN's first heuristic plan (the test fixture's
# LoadOptions::gpu_cudnn_autotune = false), with 12 busy host threads beside them as in call AC
# (whose 8B checkpoint writer ran during the tests when PackedBatchWithDropsEqualsEachAlone failed).
source "$(dirname "$0")/lib.sh"
call_begin
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
UP_GPU_TARGETS="uniprefill_cuda_tests" bash scripts/gpu_build.sh build build-dev-new > $OUT/build.txt 2>&1
echo "build rc $? at $(elapsed) s"
export UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD
busy=()
for i in $(seq 12); do ( while :; do :; done ) & busy+=($!); done
timeout 150 build-dev-new/uniprefill_cuda_tests --gtest_brief=1 \
  --gtest_filter='WgmmaAttention*:StepTrace*:CudaPagedAttention*:CudaModel*:CudaRandomModel*:CudaPrefixInPlace*:*SegmentChunk*:*Rope*' \
  > $OUT/tests.txt 2>&1
echo "tests rc $? at $(elapsed) s"
kill "${busy[@]}"
grep -E "packed batch with drops|FAILED \]|PASSED|SKIPPED \]" $OUT/tests.txt
pack_out
