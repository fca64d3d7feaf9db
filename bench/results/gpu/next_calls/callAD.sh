#!/usr/bin/env bash
# Prepared in the 28th session: issue 17's prefill goals on the current code beside the bar,
# `ANCHOR_SDPA=cudnn` (../shared/bench/pytorch_anchor.py), in one call, with the SM clock and
# power sampled throughout (the 28th session found the GPU at its 700 W limit under sustained
# load, 1.3-1.6 GHz on an H100: ours and the anchor are compared at the clocks they ran at).
# Before the call, here: mkdir -p .gpu_deps/anchor && cp ../shared/bench/pytorch_anchor.py
# .gpu_deps/anchor/ (carry [".gpu_deps"]). ~6-7 min.
#   scripts/gpu_cycle.sh stages llama (ours: 8K / 32K / 128K, dense and keep 0.5) and cudnn (our
#   walk on cuDNN's attention, cuDNN's kernel rate, the anchor on cuDNN attention).
# Predicted (24th session, H200): dense 32K ~1250 ms, 128K ~10.9 s against the anchor's ~1.32 /
# ~11.4 s; on an H100 both slower alike.
source "$(dirname "$0")/lib.sh"
call_begin
if [ ! -f .gpu_deps/anchor/pytorch_anchor.py ]; then
  echo "no .gpu_deps/anchor/pytorch_anchor.py: copy ../shared/bench/pytorch_anchor.py there first"
  exit 2
fi
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader -lms 100 \
  > $OUT/clocks.csv 2>&1 &
sampler=$!
UP_GPU_CARRY=.gpu_deps timeout $(( ${DEADLINE:-570} - $(elapsed) )) \
  bash scripts/gpu_cycle.sh build-run /tmp/ad llama cudnn > $OUT/cycle.txt 2>&1
echo "cycle rc $? at $(elapsed) s"
kill $sampler
grep -E "^==|ms|TFLOP" $OUT/cycle.txt | head -60
tar -C /tmp -cJf $OUT/cycle.tar.xz ad
pack_out
