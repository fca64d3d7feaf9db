#!/usr/bin/env bash
# 38th session (~6 min): a drop layer's kept queries on the Hopper kernel by their coordinates
# (WgmmaAttentionProblem::q_coord / k_coord; before: flash attention, mma.sync, ~half the rate).
# The tests that cover it (the kernel's gathered rows bit for bit their rows of the whole problem,
# the tiny GGUF's keep-all bit for bit dense on our kernels, kept queries on our kernel against the
# flash path and the host, every launch-choice and model test of the kernel), then `bench
# gpu-prefill` 8B 32K / 128K dense and keep 0.5, kept queries on our kernel against the former
# path (UNIPREFILL_CUDA_KEPT_QUERIES_ON_FLASH=1) in the same binary, arms new old old new, then the
# cuDNN anchor. Carry .gpu_carry (an old binary beside it did not fit the 64 MiB a call takes; the
# dense arms are then the same code, compared with call BC's dense figures). Predicted: keep 0.5 at 128K -110..-130 ms (the first drop
# layer's 64K kept queries over 128K keys, ~70 TFLOP, at ~590 instead of ~340 TFLOP/s; the later
# drops ~25 ms more), at 32K -5..-10 ms; dense unchanged (the kernel's default path computes the
# same as before: bit-identical outputs).
source "$(dirname "$0")/lib.sh"
call_begin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $OUT/gpu.txt
cat $OUT/gpu.txt
ensure_uniprefill
export UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD
timeout 170 build-dev-new/uniprefill_cuda_tests --gtest_brief=1 \
  --gtest_filter='WgmmaAttentionTest.*:CudaModelTinyGgufTest.*:CudaDiagnosticsTest.*:CudaModelFamilyTest.*:CudaPrefixInPlaceTest.*' \
  > $OUT/tests.txt 2>&1
echo "tests rc $? at $(elapsed) s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|kept queries on our kernel" $OUT/tests.txt
prefill_ab UNIPREFILL_CUDA_KEPT_QUERIES_ON_FLASH 0 1
pack_out
