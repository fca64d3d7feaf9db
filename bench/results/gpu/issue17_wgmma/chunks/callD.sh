#!/usr/bin/env bash
# 16th session, call D: the wgmma kernel for chunks over their cached prefix too. The whole CUDA
# suite, then chunked vs whole prefills (bench gpu-prefill --chunk-tokens) with cuDNN attention
# (the previous default) and auto (the wgmma kernel), all in one call.
t0=$(date +%s)
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv > $OUT/gpu.txt
UP_GPU_TARGETS="uniprefill uniprefill_cuda_tests" bash scripts/gpu_build.sh build /tmp/bld > /tmp/build.log 2>&1
echo "build rc $? at $(( $(date +%s) - t0 )) s"; grep -E " error|C7513|C7515" /tmp/build.log | head
export UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD NCCL_NVLS_ENABLE=0
timeout 200 /tmp/bld/uniprefill_cuda_tests --gtest_filter='-NcclBoundedWait*' > $OUT/cuda_suite.log 2>&1
echo "suite rc $? at $(( $(date +%s) - t0 )) s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|^\[  SKIPPED \] [0-9]" $OUT/cuda_suite.log | head -20
xz -9 $OUT/cuda_suite.log
for att in cudnn auto; do
  for c in 1024 2048; do
    /tmp/bld/uniprefill bench gpu-prefill --shape llama-3.1-8b --contexts 32768 --keep-ratios "" \
      --repeats 3 --chunk-tokens $c --serving-graphs --attention $att > /tmp/c${c}_$att.txt 2>&1
    echo "32K chunk $c $att rc $? at $(( $(date +%s) - t0 )) s"; grep -E "^[0-9]" /tmp/c${c}_$att.txt
  done
  timeout 150 /tmp/bld/uniprefill bench gpu-prefill --shape llama-3.1-8b --contexts 131072 --keep-ratios "" \
    --repeats 1 --chunk-tokens 2048 --serving-graphs --attention $att > /tmp/c128k_$att.txt 2>&1
  echo "128K chunk 2048 $att rc $? at $(( $(date +%s) - t0 )) s"; grep -E "^[0-9]" /tmp/c128k_$att.txt
done
cat /tmp/c*_*.txt > $OUT/chunked.txt
