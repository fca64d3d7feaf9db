#!/usr/bin/env bash
# 10th session, call 3: vocabulary-parallel embedding and head on the GPU. The whole CUDA suite
# (while the 8B-shaped checkpoint is written), then device weight bytes per rank of the real
# Llama-3.1-8B shapes at TP 2 (two ranks as threads on the one GPU) against TP 1.
source "$(dirname "$0")/env.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $R/gpu.txt
( t0=$(date +%s); python3 tools/make_synthetic_checkpoint.py --preset llama-3.1-8b --dtype bf16 \
    --out /tmp/l8b --quiet > $R/ckpt8b.txt 2>&1
  echo "ckpt rc $? in $(( $(date +%s) - t0 )) s" >> $R/ckpt8b.txt ) &
timeout 400 /tmp/b/uniprefill_cuda_tests --gtest_filter='-NcclBoundedWait*' > $R/suite.txt 2>&1
echo "suite rc $?" >> $R/suite.txt
grep -E "^\[  (PASSED|FAILED)|rc |device weight" $R/suite.txt | head -20
wait
cat $R/ckpt8b.txt
UP_TP_CHECKPOINT=/tmp/l8b timeout 300 /tmp/b/uniprefill_cuda_tests --gtest_also_run_disabled_tests \
  --gtest_filter='CudaTensorParallelTest.DISABLED_DeviceBytesPerRankOfACheckpoint' > $R/tp8b.txt 2>&1
echo "tp8b rc $?" >> $R/tp8b.txt
grep -E "PASSED|FAILED|rc |device weight|OK \]" $R/tp8b.txt
mkdir -p $OUT; xz -9 -k $R/suite.txt; cp $R/suite.txt.xz $R/tp8b.txt $R/gpu.txt $R/ckpt8b.txt $OUT/
