#!/usr/bin/env bash
# Prepared in the 23rd session (after its device time was spent): this tree's CUDA suite, the
# GEMM algorithm sweep, then `bench step` on the two things written after the 23rd session's
# calls, then the deep chunk's attention under Nsight Compute with memory counters (README.md
# beside this file). 8 files back: gpu.txt build.txt cuda_tests.log.xz gemm_algos.txt step.txt
# step_onelaunch.txt step_deep.txt step_data.tar.xz.
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
# 3. The deep chunk beside 9 decodes, as served and aligned (375 + 9 = 384 rows).
left=$(( 585 - ($(date +%s) - t0) ))
timeout $left $B bench step --device cuda --shape llama-3.1-8b --budget 2048 --warmup 1 \
  --repeats 3 --commit $COMMIT --mixes "c384@80256+d9@600; c375@80256+d9@600; c384@80256" \
  --json /tmp/step_deep.json > $OUT/step_deep.txt 2>> /tmp/step.err
echo "bench step (deep) rc $? at $(( $(date +%s) - t0 )) s"
cat $OUT/step.txt $OUT/step_onelaunch.txt $OUT/step_deep.txt; tail -3 /tmp/step.err
python3 tools/step_marginals.py /tmp/step.json /tmp/step_onelaunch.json /tmp/step_deep.json
# 4. The deep chunk's attention kernel against a shallow chunk's, with DRAM and L2 counters
#    (8 layers; the attention kernels only).
NCU="ncu --clock-control none --csv --target-processes all --kernel-name regex:FlashAttentionWgmma"
NCU+=" --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active"
for mix in "c384@80256" "c2048@16384"; do
  left=$(( 585 - ($(date +%s) - t0) ))
  [ $left -lt 40 ] && { echo "out of time before ncu $mix"; break; }
  timeout $(( left - 10 )) $NCU --log-file /tmp/ncu_$mix.csv $B bench step --device cuda \
    --shape llama-3.1-8b --layers 8 --budget 2048 --warmup 0 --repeats 1 --mixes "$mix" \
    > /tmp/ncu_$mix.txt 2>&1
  echo "ncu $mix rc $? at $(( $(date +%s) - t0 )) s"
  grep -c FlashAttentionWgmma /tmp/ncu_$mix.csv
done
tar -C /tmp -cJf $OUT/step_data.tar.xz step.json step_onelaunch.json step_deep.json step.err \
  $(cd /tmp && ls ncu_*.csv 2>/dev/null)
