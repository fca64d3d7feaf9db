#!/usr/bin/env bash
# Prepared in the 23rd session: one 130,000-token prompt among 16 short requests (issue 18's
# second goal: dense TTFT within 10% of whole) whole, chunked, chunkedaligned and
# chunkedalignedonelaunch. Reuses call P's checkpoint and build when the machine stayed warm.
t0=$(date +%s)
mkdir -p $OUT
export NCCL_NVLS_ENABLE=0
if [ ! -d /tmp/l8b ]; then
  python3 tools/make_synthetic_checkpoint.py --preset llama-3.1-8b --dtype bf16 --out /tmp/l8b \
    > /tmp/ckpt.txt 2>&1 &
  ck=$!
fi
if [ ! -x build-dev-new/uniprefill ]; then
  UP_GPU_TARGETS="uniprefill" bash scripts/gpu_build.sh build build-dev-new > /tmp/build.log 2>&1
  echo "build rc $? at $(( $(date +%s) - t0 )) s"
fi
[ -n "${ck:-}" ] && wait $ck
left=$(( 585 - ($(date +%s) - t0) ))
TRACE=1 BUDGET=2048 PREFILL_ONLY=8192 WORKLOADS="mixed" UP_CKPT=/tmp/l8b \
  timeout $left bash scripts/gpu_serve_mixed.sh build-dev-new/uniprefill /tmp/s2 whole chunked \
  chunkedaligned chunkedalignedonelaunch > $OUT/serve130.txt 2>&1
echo "serve rc $? at $(( $(date +%s) - t0 )) s"
rm -f /tmp/s2/memory_*.csv
tar -C /tmp -cJf $OUT/servers130.tar.xz s2
python3 tools/serve_summary.py /tmp/s2 2>&1 | grep -v "^ " | head -16
