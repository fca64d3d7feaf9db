#!/usr/bin/env bash
# 33rd session, second call (the warm machine and build of callAO): issue 17's Figure 1 from one
# call under the new defaults: `bench gpu-prefill` 8K / 32K / 128K (dense, keep 0.5), then
# ANCHOR_SDPA=cudnn's PyTorch anchor, then the default (FlashAttention-2) anchor while time is
# left (first, here: mkdir -p .gpu_deps/anchor && cp ../shared/bench/pytorch_anchor.py
# .gpu_deps/anchor/). Then, here: tools/plot_gpu_prefill.py --results-dir <its files>.
# Predicted: ours 1.15x / 1.11x / 1.09x faster than the cuDNN anchor at 8K / 32K / 128K (the
# 32nd session's H100 call AN: 1.112x / 1.093x at 32K / 128K); against FA2's, >= 1.6x at 128K.
source "$(dirname "$0")/lib.sh"
call_begin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
ensure_uniprefill
DEADLINE=440 prefill_beside_anchor
left=$(( 585 - $(elapsed) ))
if [ $left -gt 60 ]; then
  PYTHONUNBUFFERED=1 timeout $left python3 .gpu_deps/anchor/pytorch_anchor.py 8192 32768 131072 \
    > $OUT/anchor.jsonl 2>&1
  echo "default anchor rc $? at $(elapsed) s"; cat $OUT/anchor.jsonl
fi
pack_out
