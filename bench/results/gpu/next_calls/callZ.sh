#!/usr/bin/env bash
# Prepared in the 27th session when only ~150 s of device time were left: the CUDA tests of
# this session's GPU changes and nothing else: the append writing both slot coordinates
# (CudaPagedAttentionTest.AppendWritesExactlyTheMappedSlots, and the tiny whole-model tests
# against the CPU through it), the trace's writing kept out of the engine's time
# (StepTraceTest.TheTracesWritingIsNotTheEnginesTimeBetweenForwards), the kernel view by
# name (StepTraceTest.TheKernelViewCountsEachForwardsOwnWork, KernelTimelineTest).
source "$(dirname "$0")/lib.sh"
call_begin
UP_GPU_TARGETS="uniprefill_cuda_tests" bash scripts/gpu_build.sh build build-dev-new > $OUT/build.txt 2>&1
echo "build rc $? at $(elapsed) s"
export UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD
build-dev-new/uniprefill_cuda_tests --gtest_brief=1 \
  --gtest_filter='StepTrace*:KernelTimeline*:CudaPagedAttentionTest.Append*:CudaModelTinyGguf*' \
  > $OUT/tests.txt 2>&1
echo "tests rc $? at $(elapsed) s"; grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $OUT/tests.txt
