#!/usr/bin/env bash
# 36th session (~7 min): the last layer on each request's last row only (QueryRows::kLastOfEach)
# on a GPU, from the pack (no build): the whole CUDA suite (CudaLastLayerRowsTest among it), then
# `bench gpu-prefill` Llama-3.1-8B shape 32K / 128K, dense and keep 0.5, with the last layer over
# every row (UNIPREFILL_LAST_LAYER_EVERY_ROW=1, the previous default) and without, arms new, old,
# old, new (one repeat each after the warm-up), then ANCHOR_SDPA=cudnn's PyTorch anchor at the
# same sizes. Needs .gpu_deps/anchor/pytorch_anchor.py (the command copies it from
# .gpu_carry/anchor). Last, the GPU mutant of .gpu_mut when carried.
# Predicted (FLOPs: one of 32 layers' attention, O projection and FFN, and 2/3 of its QKV GEMM,
# leave all but the last row): dense 32K -2.7% (~1203 -> ~1171 ms on an H100), 128K -2.9% (~10465
# -> ~10160 ms); keep 0.5 at 128K unchanged (a sync-free fixed-ratio forward keeps every row).
source "$(dirname "$0")/lib.sh"
call_begin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $OUT/gpu.txt
cat $OUT/gpu.txt
ensure_uniprefill
export UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD
timeout 200 build-dev-new/uniprefill_cuda_tests --gtest_brief=1 > $OUT/cuda_tests.txt 2>&1
echo "tests rc $? at $(elapsed) s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|SKIPPED \]|last rows only" $OUT/cuda_tests.txt | head -40
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader -lms 100 \
  > /tmp/clocks.csv 2>&1 &
sampler=$!
commit=$(cat .gpu_carry/commit)
arm() {  # arm NAME EVERY_ROW
  echo "$1 from $(date +%s%3N)" >> $OUT/phases.txt
  UNIPREFILL_LAST_LAYER_EVERY_ROW=$2 build-dev-new/uniprefill bench gpu-prefill --commit "$commit" \
    --shape llama-3.1-8b --contexts 32768,131072 --keep-ratios 0.5 --repeats 1 \
    --json $OUT/llama8b_$1.json > $OUT/ours_$1.txt 2>&1
  echo "$1 rc $? at $(elapsed) s"; grep -E "^(context|[0-9]+ )" $OUT/ours_$1.txt | head -6
}
arm new1 0
arm old1 1
arm old2 1
arm new2 0
echo "cudnn anchor from $(date +%s%3N)" >> $OUT/phases.txt
ANCHOR_SDPA=cudnn PYTHONUNBUFFERED=1 timeout 150 python3 .gpu_deps/anchor/pytorch_anchor.py \
  32768 131072 > $OUT/anchor_cudnn.jsonl 2>&1
echo "cudnn anchor rc $? at $(elapsed) s"; cat $OUT/anchor_cudnn.jsonl
echo "anchor end $(date +%s%3N)" >> $OUT/phases.txt
kill $sampler
xz -c /tmp/clocks.csv > $OUT/clocks.csv.xz
# The GPU mutant built here (gpu_mutations.sh pack gpu_last_rows_window_one_short.patch), if carried.
if [ -d .gpu_mut ]; then
  bash scripts/gpu_mutations.sh run > $OUT/mutations.txt 2>&1
  echo "mutations rc $? at $(elapsed) s"; grep -E "caught|MISSED" $OUT/mutations.txt
fi
pack_out
