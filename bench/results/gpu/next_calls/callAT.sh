#!/usr/bin/env bash
# 33rd session, last device time (~330 s): issue 17's build 4 in one call, every benchmark beside
# both anchors: `bench gpu-prefill` (8K / 32K; 128K is call AP's), ANCHOR_SDPA=cudnn's and the
# default (flash) PyTorch anchors, and the served benchmark (issue 17's decode goal: `serve
# --device cuda` on the 16 GB 8B-shape checkpoint, `bench serve` 32 concurrent 1K-token prompts,
# 128 output tokens, dense), while the checkpoint is written in the background (~165 s; the
# prefill arms share the host with it: 16 cores, the writer uses one or two).
# Predicted: ours vs cuDNN 1.15x / 1.11x at 8K / 32K (call AP: 1.160x / 1.112x); ITL p50 ~7.7 ms
# (29th session: 7.66 ms). Needs the anchor in .gpu_deps/anchor (the command copies it there).
source "$(dirname "$0")/lib.sh"
call_begin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
start_checkpoint
ensure_uniprefill
echo "ours from $(date +%s%3N)" > $OUT/phases.txt
build-dev-new/uniprefill bench gpu-prefill --commit "$(git rev-parse --short HEAD)" \
  --shape llama-3.1-8b --contexts 8192,32768 --keep-ratios 0.5 --repeats 2 \
  --json $OUT/llama8b_b1.json > $OUT/ours.txt 2>&1
echo "ours rc $? at $(elapsed) s"; cat $OUT/ours.txt
echo "cudnn anchor from $(date +%s%3N)" >> $OUT/phases.txt
ANCHOR_SDPA=cudnn PYTHONUNBUFFERED=1 timeout 60 python3 .gpu_deps/anchor/pytorch_anchor.py \
  8192 32768 > $OUT/anchor_cudnn.jsonl 2>&1
echo "cudnn anchor rc $? at $(elapsed) s"; cat $OUT/anchor_cudnn.jsonl
echo "flash anchor from $(date +%s%3N)" >> $OUT/phases.txt
PYTHONUNBUFFERED=1 timeout 60 python3 .gpu_deps/anchor/pytorch_anchor.py 8192 32768 \
  > $OUT/anchor.jsonl 2>&1
echo "flash anchor rc $? at $(elapsed) s"; cat $OUT/anchor.jsonl
wait_checkpoint
echo "checkpoint ready at $(elapsed) s"
echo "served from $(date +%s%3N)" >> $OUT/phases.txt
left=$(( ${CALL_END:-230} - $(elapsed) ))
MODES=dense KV_MEM=32GiB WORKLOADS=decode32 UP_CKPT=/tmp/l8b timeout $left \
  bash scripts/gpu_serve_mixed.sh build-dev-new/uniprefill /tmp/at chunked > $OUT/serve.txt 2>&1
echo "served rc $? at $(elapsed) s"
grep -E "ITL p50|ITL p99|TTFT p50|GPU under load|peak GPU" $OUT/serve.txt | head -12
cp /tmp/at/serve_chunked_decode32.json $OUT/ 2>/dev/null
echo "end $(date +%s%3N)" >> $OUT/phases.txt
