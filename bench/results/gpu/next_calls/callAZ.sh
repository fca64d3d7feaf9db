#!/usr/bin/env bash
# 37th session (~7 min): the FFN's fused gated GEMM (ops::cuda::GatedGemm, CUTLASS's Hopper GEMM
# with our act(gate) * up epilogue over interleaved weight rows) on a GPU, from the pack (no
# build): the whole CUDA suite (CudaGatedGemmTest, CudaGatedGemmModelTest among it), the kernel's
# throughput against cuBLASLt + either activation kernel (8B shape, 16 .. 32768 rows), then
# `bench gpu-prefill` Llama-3.1-8B shape 32K / 128K, dense and keep 0.5, fused (default) against
# UNIPREFILL_CUDA_GATED_GEMM=0 (the previous path), arms new, old, old, new, then
# ANCHOR_SDPA=cudnn's PyTorch anchor at the same sizes. Needs .gpu_deps/anchor/pytorch_anchor.py
# (the command copies it from .gpu_carry/anchor).
# Predicted (bytes: SiLU * up's 2.8 GB a layer at 32K rows, ~0.85 ms on an H100, gone, and the
# GEMM writing half): dense 32K -20..-35 ms of ~1165 (if CUTLASS's GEMM runs within 1-2% of
# cuBLASLt's), 128K -80..-140 ms of ~10130; keep 0.5 at 128K -20..-40 ms.
source "$(dirname "$0")/lib.sh"
call_begin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $OUT/gpu.txt
cat $OUT/gpu.txt
ensure_uniprefill
export UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD
timeout 100 build-dev-new/uniprefill_cuda_tests --gtest_also_run_disabled_tests \
  --gtest_filter='CudaGatedGemmTest.*' > $OUT/gated_gemm.txt 2>&1
echo "gated gemm tests rc $? at $(elapsed) s"
grep -E "^\{|^\[  PASSED|^\[  FAILED|FAILED  \]|SKIPPED \]" $OUT/gated_gemm.txt | head -30
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader -lms 100 \
  > /tmp/clocks.csv 2>&1 &
sampler=$!
commit=$(cat .gpu_carry/commit)
arm() {  # arm NAME GATED_GEMM
  echo "$1 from $(date +%s%3N)" >> $OUT/phases.txt
  UNIPREFILL_CUDA_GATED_GEMM=$2 build-dev-new/uniprefill bench gpu-prefill --commit "$commit" \
    --shape llama-3.1-8b --contexts 32768,131072 --keep-ratios 0.5 --repeats 1 \
    --json $OUT/llama8b_$1.json > $OUT/ours_$1.txt 2>&1
  echo "$1 rc $? at $(elapsed) s"; grep -E "^(context|[0-9]+ )" $OUT/ours_$1.txt | head -6
}
arm new1 1
arm old1 0
arm old2 0
arm new2 1
echo "cudnn anchor from $(date +%s%3N)" >> $OUT/phases.txt
ANCHOR_SDPA=cudnn PYTHONUNBUFFERED=1 timeout 150 python3 .gpu_deps/anchor/pytorch_anchor.py \
  32768 131072 > $OUT/anchor_cudnn.jsonl 2>&1
echo "cudnn anchor rc $? at $(elapsed) s"; cat $OUT/anchor_cudnn.jsonl
echo "anchor end $(date +%s%3N)" >> $OUT/phases.txt
kill $sampler
xz -c /tmp/clocks.csv > $OUT/clocks.csv.xz
left=$(( ${CALL_END:-585} - $(elapsed) ))
timeout $left build-dev-new/uniprefill_cuda_tests --gtest_brief=1 > $OUT/cuda_tests.txt 2>&1
echo "tests rc $? at $(elapsed) s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|SKIPPED \]|fused gated GEMM" $OUT/cuda_tests.txt | head -40
pack_out
