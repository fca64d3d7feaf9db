#!/usr/bin/env bash
# Prepared in the 24th session: the GEMM tuner (UNIPREFILL_CUDA_GEMM_TUNE=1, ops/cuda/gemm_algos.h
# TuneGemms, written without a GPU). Builds this tree, runs its tests (CudaGemmTunerTest.*: a
# kept algorithm runs for every row of its bucket, tuned GEMMs stay right; the whole-model CUDA
# tests with the tuner on), then `bench step` on the 8B shape with the tuner off and on, same
# binary, twice each in alternation. Predicted (the 24th session's sweep, session24/README.md):
# c2048@16384 1-2 ms shorter (gate_up 10% at 2048 rows), c384@80256+d9@600 ~0.3 ms, c1024@16384
# within noise; start-up +3-6 s ("GEMM tuning: ..." on stderr). 5 files back: gpu.txt build.txt
# tests.txt step.txt tune_log.txt.
t0=$(date +%s)
mkdir -p $OUT
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv > $OUT/gpu.txt
if [ ! -x build-dev-new/uniprefill_cuda_tests ]; then
  bash scripts/gpu_build.sh build build-dev-new > $OUT/build.txt 2>&1
  echo "build rc $? at $(( $(date +%s) - t0 )) s"; tail -2 $OUT/build.txt
fi
T=build-dev-new/uniprefill_cuda_tests
export UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD
timeout 120 $T --gtest_brief=1 --gtest_filter='CudaGemm*' > $OUT/tests.txt 2>&1
echo "gemm tests rc $? at $(( $(date +%s) - t0 )) s"
UNIPREFILL_CUDA_GEMM_TUNE=1 timeout 200 $T --gtest_brief=1 --gtest_filter='CudaModel*' \
  >> $OUT/tests.txt 2>&1
echo "model tests (tuner on) rc $? at $(( $(date +%s) - t0 )) s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests from .* ran|tuned:" $OUT/tests.txt
B=build-dev-new/uniprefill
COMMON="--device cuda --shape llama-3.1-8b --budget 2048 --warmup 2 --repeats 5"
MIXES="c2048@16384; c1024@16384; c384@80256+d9@600; c256@102272+d1@600; c1000@16384+d9@600; d32@1024"
for round in 1 2; do
  for tune in 0 1; do
    left=$(( 570 - ($(date +%s) - t0) ))
    [ $left -lt 30 ] && { echo "out of time before round $round tune $tune"; break 2; }
    echo "# round $round, UNIPREFILL_CUDA_GEMM_TUNE=$tune" >> $OUT/step.txt
    UNIPREFILL_CUDA_GEMM_TUNE=$tune timeout $left $B bench step $COMMON --mixes "$MIXES" \
      >> $OUT/step.txt 2>> $OUT/tune_log.txt
    echo "bench step round $round tune $tune rc $? at $(( $(date +%s) - t0 )) s"
  done
done
cat $OUT/step.txt; grep "GEMM tuning" $OUT/tune_log.txt
