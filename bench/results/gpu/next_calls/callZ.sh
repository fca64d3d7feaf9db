#!/usr/bin/env bash
# Prepared in the 27th session when only ~150 s of device time were left: the CUDA tests of
# this session's GPU changes and nothing else: the append writing both slot coordinates
# (CudaPagedAttentionTest.AppendWritesExactlyTheMappedSlots, and the tiny whole-model tests
# against the CPU through it), the trace's writing kept out of the engine's time
# (StepTraceTest.TheTracesWritingIsNotTheEnginesTimeBetweenForwards), the kernel view by
# name (StepTraceTest.TheKernelViewCountsEachForwardsOwnWork, KernelTimelineTest).
source "$(dirname "$0")/lib.sh"
call_begin
build_and_test uniprefill_cuda_tests \
  'StepTrace*:KernelTimeline*:CudaPagedAttentionTest.Append*:CudaModelTinyGguf*'
