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
prefill_beside_anchor
pack_out
