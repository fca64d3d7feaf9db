#!/usr/bin/env bash
# 10th session, call 1: the whole CUDA suite on this tree's binaries (DropMappedPages on GPU models,
# the device-weight check of the TP tests), then device weight bytes per rank of an 8B-shaped
# 2-layer checkpoint at TP 2 (two ranks as threads on the one GPU) against TP 1.
source "$(dirname "$0")/env.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $R/gpu.txt
( python3 tools/make_synthetic_checkpoint.py --preset llama-3.1-8b --layers 2 --vocab 32000 \
    --dtype bf16 --out /tmp/l8b2 --quiet > $R/ckpt.txt 2>&1; echo "ckpt rc $?" >> $R/ckpt.txt ) &
timeout 400 /tmp/b/uniprefill_cuda_tests --gtest_filter='-NcclBoundedWait*' > $R/suite.txt 2>&1
echo "suite rc $?" >> $R/suite.txt
wait
cat $R/ckpt.txt
UP_TP_CHECKPOINT=/tmp/l8b2 timeout 150 /tmp/b/uniprefill_cuda_tests --gtest_also_run_disabled_tests \
  --gtest_filter='CudaTensorParallelTest.*' > $R/tp.txt 2>&1
echo "tp rc $?" >> $R/tp.txt
grep -E "PASSED|FAILED|rc |device weight" $R/suite.txt | head -20
grep -E "PASSED|FAILED|rc |device weight|OK \]" $R/tp.txt | head -30
mkdir -p $OUT; xz -9 -k $R/suite.txt; cp $R/suite.txt.xz $R/tp.txt $R/gpu.txt $R/ckpt.txt $OUT/
