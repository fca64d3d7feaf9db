#!/usr/bin/env bash
# 37th session (~6 min), after call AZ (the fused gated GEMM 12.8 ms against cuBLASLt + SiLU's
# 11.4 at 32K rows, 600 against 726 TFLOP/s; 700 at 2-4K rows: the whole A in L2): tiles walked
# in swizzled groups of 8, and four kernel configurations (GatedGemmVariant) timed against
# cuBLASLt at 16 .. 32768 rows; the fastest at 32K rows then runs `bench gpu-prefill` (8B shape,
# 32K / 128K, dense and keep 0.5) against UNIPREFILL_CUDA_GATED_GEMM=0, arms new old old new, the
# cuDNN anchor after, then the whole CUDA suite with what time is left.
# Predicted: with the swizzle the 32K-row GEMM near its 2-4K-row rate (~700 TFLOP/s fused, about
# cuBLASLt + SiLU); a pingpong configuration, whose epilogue runs beside the other warpgroup's
# MMAs, up to ~5% faster than that.
source "$(dirname "$0")/lib.sh"
call_begin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $OUT/gpu.txt
cat $OUT/gpu.txt
ensure_uniprefill
export UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD
timeout 150 build-dev-new/uniprefill_cuda_tests --gtest_also_run_disabled_tests \
  --gtest_filter='CudaGatedGemmTest.*' > $OUT/gated_gemm.txt 2>&1
echo "gated gemm tests rc $? at $(elapsed) s"
grep -E "^\{|^\[  PASSED|^\[  FAILED|FAILED  \]|SKIPPED \]" $OUT/gated_gemm.txt | head -30
best=$(python3 - $OUT/gated_gemm.txt <<'PY'
import json, sys
names = None
for line in open(sys.argv[1]):
    if line.startswith('{"rows": 32768'):
        v = json.loads(line)["variants_ms"]
        names = list(v)
        print(names.index(min(v, key=v.get)))
if names is None:
    print(0)
PY
)
echo "fastest variant at 32K rows: $best"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader -lms 100 \
  > /tmp/clocks.csv 2>&1 &
sampler=$!
commit=$(cat .gpu_carry/commit)
arm() {  # arm NAME GATED_GEMM
  echo "$1 from $(date +%s%3N)" >> $OUT/phases.txt
  UNIPREFILL_CUDA_GATED_GEMM=$2 UNIPREFILL_CUDA_GATED_GEMM_VARIANT=$best \
    build-dev-new/uniprefill bench gpu-prefill --commit "$commit" \
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
