#!/usr/bin/env bash
# 10th session, call 2: the TP tests after the fix (no f32 host copies on GPU ranks), with the
# device weight bytes per rank of an 8B-shaped 2-layer checkpoint.
source "$(dirname "$0")/env.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $R/gpu.txt
python3 tools/make_synthetic_checkpoint.py --preset llama-3.1-8b --layers 2 --vocab 32000 \
    --dtype bf16 --out /tmp/l8b2 --quiet > $R/ckpt.txt 2>&1; echo "ckpt rc $?" >> $R/ckpt.txt
UP_TP_CHECKPOINT=/tmp/l8b2 timeout 150 /tmp/b/uniprefill_cuda_tests --gtest_also_run_disabled_tests \
  --gtest_filter='CudaTensorParallelTest.*:CudaModel*' > $R/tp.txt 2>&1
echo "tp rc $?" >> $R/tp.txt
grep -E "PASSED|FAILED|rc |device weight|OK \]" $R/tp.txt | head -40
# The real Llama-3.1-8B shapes (32 layers, 128K vocabulary, 16 GB bf16): TP 1 and two ranks.
t0=$(date +%s)
python3 tools/make_synthetic_checkpoint.py --preset llama-3.1-8b --dtype bf16 --out /tmp/l8b \
  --quiet > $R/ckpt8b.txt 2>&1; echo "ckpt rc $? in $(( $(date +%s) - t0 )) s" >> $R/ckpt8b.txt
UP_TP_CHECKPOINT=/tmp/l8b timeout 300 /tmp/b/uniprefill_cuda_tests --gtest_also_run_disabled_tests \
  --gtest_filter='CudaTensorParallelTest.DISABLED_DeviceBytesPerRankOfACheckpoint' > $R/tp8b.txt 2>&1
echo "tp8b rc $?" >> $R/tp8b.txt
cat $R/ckpt8b.txt; grep -E "PASSED|FAILED|rc |device weight|OK \]" $R/tp8b.txt
mkdir -p $OUT; cp $R/tp.txt $R/tp8b.txt $R/gpu.txt $R/ckpt.txt $R/ckpt8b.txt $OUT/
