#!/usr/bin/env bash
# 35th session (~6 min): issue 17's figures on whatever card comes, from the pack (no build):
# `bench gpu-prefill` Llama-3.1-8B shape 32K / 128K, dense and keep 0.5, then ANCHOR_SDPA=cudnn's
# PyTorch anchor at the same sizes, back to back; then, on the 8B-shape checkpoint written in the
# background meanwhile, the served decode goal (32 x 1K prompts, 128 output tokens, dense).
# Leaves /tmp/l8b for callAV.sh on the same warm machine. Needs .gpu_deps/anchor/pytorch_anchor.py
# (the command copies it from .gpu_carry/anchor). Predicted: H100 as call AP (1190 / 10373 /
# 3183 ms, 1.11x / 1.09x the anchor) and AT (ITL p50 9.07 ms); H200 as call AM's b1 arm (1206 /
# 10497 / 3222 ms) and 7.7 ms ITL p50.
source "$(dirname "$0")/lib.sh"
call_begin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $OUT/gpu.txt
cat $OUT/gpu.txt
start_checkpoint
ensure_uniprefill
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader -lms 100 \
  > /tmp/clocks.csv 2>&1 &
sampler=$!
echo "ours from $(date +%s%3N)" > $OUT/phases.txt
build-dev-new/uniprefill bench gpu-prefill --commit "$(cat .gpu_carry/commit)" \
  --shape llama-3.1-8b --contexts 32768,131072 --keep-ratios 0.5 --repeats 2 \
  --json $OUT/llama8b_b1.json > $OUT/ours.txt 2>&1
echo "ours rc $? at $(elapsed) s"; cat $OUT/ours.txt
echo "cudnn anchor from $(date +%s%3N)" >> $OUT/phases.txt
ANCHOR_SDPA=cudnn PYTHONUNBUFFERED=1 timeout 150 python3 .gpu_deps/anchor/pytorch_anchor.py \
  32768 131072 > $OUT/anchor_cudnn.jsonl 2>&1
echo "cudnn anchor rc $? at $(elapsed) s"; cat $OUT/anchor_cudnn.jsonl
echo "anchor end $(date +%s%3N)" >> $OUT/phases.txt
kill $sampler
xz -c /tmp/clocks.csv > $OUT/clocks.csv.xz
wait_checkpoint
echo "checkpoint ready at $(elapsed) s"
kv=32GiB; grep -q H200 $OUT/gpu.txt && kv=48GiB
left=$(( ${CALL_END:-580} - $(elapsed) ))
MODES=dense KV_MEM=$kv WORKLOADS=decode32 UP_CKPT=/tmp/l8b timeout $left \
  bash scripts/gpu_serve_mixed.sh build-dev-new/uniprefill /tmp/au chunked > $OUT/serve.txt 2>&1
echo "served rc $? at $(elapsed) s"
grep -E "ITL p50|ITL p99|TTFT p50|GPU under load|peak GPU|SM clock" $OUT/serve.txt | head -12
cp /tmp/au/serve_chunked_decode32.json $OUT/ 2>/dev/null
pack_out
