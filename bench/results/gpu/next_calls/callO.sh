#!/usr/bin/env bash
# Prepared in the 23rd session (after its device time was spent): this tree's CUDA suite, the
# GEMM algorithm sweep, then `bench step` on the two things written after the 23rd session's
# calls (README.md beside this file; call O2 follows on the same warm machine). 7 files back:
# gpu.txt build.txt cuda_tests.log.xz gemm_algos.txt step.txt step_onelaunch.txt
# step_data.tar.xz.
t0=$(date +%s)
mkdir -p $OUT
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv > $OUT/gpu.txt
bash scripts/gpu_build.sh build build-dev-new > $OUT/build.txt 2>&1
echo "build rc $? at $(( $(date +%s) - t0 )) s"; tail -2 $OUT/build.txt
left=$(( 330 - ($(date +%s) - t0) ))
UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD timeout $left build-dev-new/uniprefill_cuda_tests \
  --gtest_brief=1 > $OUT/cuda_tests.log 2>&1
echo "cuda tests rc $? at $(( $(date +%s) - t0 )) s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|tests from .* ran" $OUT/cuda_tests.log | head -20
xz -9 $OUT/cuda_tests.log
# cuBLASLt's first proposal against the fastest of 16 at the 8B GEMMs and served rows (~10 s).
timeout 120 build-dev-new/uniprefill_cuda_tests --gtest_also_run_disabled_tests \
  --gtest_filter='CudaGemmAlgoThroughputTest.*' > $OUT/gemm_algos.txt 2>&1
echo "gemm algos rc $? at $(( $(date +%s) - t0 )) s"; grep -E "^layer" $OUT/gemm_algos.txt
B=build-dev-new/uniprefill
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
COMMON="--device cuda --shape llama-3.1-8b --budget 2048 --warmup 2 --repeats 7 --commit $COMMIT"
# 1. The GEMMs' row tiles: rows just past a whole 128-row tile, with and without a decode.
MIXES="c1024@16384; c1025@16384; c1152@16384; c1024@16384+d1@32768; c1023@16384+d1@32768;"
MIXES+=" c1024@16384+d16@1024; c1008@16384+d16@1024"
# 2. A step's prompts in one launch, the split count now from ops::PlanKeySplits: apart here,
#    in one launch below, same binary and call.
TWO="c1024@16384; c896@16384+c128@2048; c960@16384+c64@2048; c768@16384+c256@2048;"
TWO+=" c640@32768+c384@4096; c1536@8192+c512@1024"
left=$(( 585 - ($(date +%s) - t0) ))
timeout $left $B bench step $COMMON --mixes "$MIXES; $TWO" --json /tmp/step.json \
  > $OUT/step.txt 2> /tmp/step.err
echo "bench step rc $? at $(( $(date +%s) - t0 )) s"
left=$(( 585 - ($(date +%s) - t0) ))
UNIPREFILL_CUDA_PREFIX_ONE_LAUNCH=1 timeout $left $B bench step $COMMON --mixes "$TWO" \
  --json /tmp/step_onelaunch.json > $OUT/step_onelaunch.txt 2>> /tmp/step.err
echo "bench step (one launch) rc $? at $(( $(date +%s) - t0 )) s"
cat $OUT/step.txt $OUT/step_onelaunch.txt; tail -3 /tmp/step.err
python3 tools/step_marginals.py /tmp/step.json /tmp/step_onelaunch.json
tar -C /tmp -cJf $OUT/step_data.tar.xz step.json step_onelaunch.json step.err
