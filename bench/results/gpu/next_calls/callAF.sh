#!/usr/bin/env bash
# 29th session: call AE ran issue 17's `bench gpu-prefill` (llama, ours and --attention cudnn) but
# its cycle stopped before the anchor (the cudnn stage's throughput grep matched nothing and
# pipefail ended the script; fixed). This call: ours (our attention kernel, the default) and
# ANCHOR_SDPA=cudnn's anchor back to back at 8K / 32K / 128K, dense and keep 0.5, clock and power
# sampled. Before: mkdir -p .gpu_deps/anchor && cp ../shared/bench/pytorch_anchor.py
# .gpu_deps/anchor/ (carry [".gpu_deps"]). ~5 min with the build.
source "$(dirname "$0")/lib.sh"
call_begin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
UP_GPU_TARGETS="uniprefill" bash scripts/gpu_build.sh build build-dev-new > /tmp/build.txt 2>&1
echo "build rc $? at $(elapsed) s"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader -lms 100 \
  > $OUT/clocks.csv 2>&1 &
sampler=$!
echo "ours from $(date +%s%3N)" > $OUT/phases.txt
build-dev-new/uniprefill bench gpu-prefill --commit "$(git rev-parse --short HEAD)" \
  --shape llama-3.1-8b --contexts 8192,32768,131072 --keep-ratios 0.5 --repeats 2 \
  --json $OUT/llama8b_b1.json > $OUT/ours.txt 2>&1
echo "ours rc $? at $(elapsed) s"; cat $OUT/ours.txt
echo "anchor from $(date +%s%3N)" >> $OUT/phases.txt
ANCHOR_SDPA=cudnn PYTHONUNBUFFERED=1 timeout $(( ${DEADLINE:-585} - $(elapsed) )) \
  python3 .gpu_deps/anchor/pytorch_anchor.py 8192 32768 131072 > $OUT/anchor_cudnn.jsonl 2>&1
echo "anchor rc $? at $(elapsed) s"; cat $OUT/anchor_cudnn.jsonl
echo "end $(date +%s%3N)" >> $OUT/phases.txt
kill $sampler
pack_out
