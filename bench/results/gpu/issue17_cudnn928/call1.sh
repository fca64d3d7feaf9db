#!/usr/bin/env bash
# 9th session, call 1: this tree's binaries on the machine's cuDNN 9.14 (the whole CUDA suite).
source "$(dirname "$0")/env.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $R/gpu.txt
echo "old cuDNN dir: $OLD_CUDNN" >> $R/gpu.txt; ls $OLD_CUDNN | grep cudnn >> $R/gpu.txt
timeout 400 /tmp/b/uniprefill_cuda_tests --gtest_filter='-NcclBoundedWait*' > $R/suite_cudnn914.txt 2>&1
echo "suite rc $?" >> $R/suite_cudnn914.txt
grep -E "PASSED|FAILED|rc |not on this" $R/suite_cudnn914.txt | head -20
mkdir -p $OUT; xz -9 -k $R/suite_cudnn914.txt; cp $R/suite_cudnn914.txt.xz $R/gpu.txt $OUT/
