#!/usr/bin/env bash
# Prepared in the 24th session: the tree's CUDA suite after two changes written without a GPU:
# PinnedStaging::PutAll (a layer's small metadata arrays in one upload instead of one each; the
# default, UNIPREFILL_CUDA_SEPARATE_UPLOADS=1 the old way) and the GEMM tuner
# (UNIPREFILL_CUDA_GEMM_TUNE=1, ops/cuda/gemm_algos.h TuneGemms). The whole suite (new:
# CudaGemmTunerTest.*, PinnedStagingTest.PutAllPutsEachArrayWhereItsPointerSays; every prefix,
# paged and whole-model test runs through PutAll), then the whole-model tests again with the
# tuner on. Predicted: all pass but the 3 asset skips, both times. 4 files back: gpu.txt
# build.txt cuda_tests.log.xz tuned_model_tests.txt. callS2.sh times them.
source "$(dirname "$0")/lib.sh"
call_begin
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv > $OUT/gpu.txt
bash scripts/gpu_build.sh build build-dev-new > $OUT/build.txt 2>&1
echo "build rc $? at $(elapsed) s"; tail -2 $OUT/build.txt
# (25th session) The 8B checkpoint for call U, written on the CPUs while the suite runs.
start_checkpoint
T=build-dev-new/uniprefill_cuda_tests
export UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD
left=$(( 400 - $(elapsed) ))
timeout $left $T --gtest_brief=1 > $OUT/cuda_tests.log 2>&1
echo "cuda tests rc $? at $(elapsed) s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests from .* ran|tuned:" $OUT/cuda_tests.log | head -20
xz -9 $OUT/cuda_tests.log
left=$(( 580 - $(elapsed) ))
UNIPREFILL_CUDA_GEMM_TUNE=1 timeout $left $T --gtest_brief=1 --gtest_filter='CudaModel*' \
  > $OUT/tuned_model_tests.txt 2>&1
echo "model tests (tuner on) rc $? at $(elapsed) s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests from .* ran|GEMM tuning" $OUT/tuned_model_tests.txt | head
wait_checkpoint
echo "checkpoint ready at $(elapsed) s"
