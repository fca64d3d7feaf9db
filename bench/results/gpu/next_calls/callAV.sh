#!/usr/bin/env bash
# 35th session (~6-8 min, right after callAU.sh on its warm machine: its binaries and
# checkpoint): issue 18's served goals under the current defaults, untraced, dense and UniPrefill,
# whole against chunked (budget 2048) in one call: `mixed` (one 130,000-token prompt among 16
# short requests) then `long4` (4 concurrent 32K prompts). Predicted: H100 as the 33rd session's
# call AR (mixed 1.164x dense, long4 1.159x); H200 as the 24th session's (1.155x, 1.135x).
source "$(dirname "$0")/lib.sh"
call_begin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $OUT/gpu.txt
start_checkpoint
ensure_uniprefill
wait_checkpoint
echo "checkpoint ready at $(elapsed) s"
kv=32GiB; grep -q H200 $OUT/gpu.txt && kv=48GiB
for w in ${AV_WORKLOADS:-mixed long4}; do
  left=$(( ${CALL_END:-585} - $(elapsed) ))
  [ "$left" -gt 60 ] || { echo "no time left for $w"; break; }
  KV_MEM=$kv BUDGET=2048 WORKLOADS=$w UP_CKPT=/tmp/l8b timeout $left \
    bash scripts/gpu_serve_mixed.sh build-dev-new/uniprefill /tmp/av_$w whole chunked \
    > $OUT/serve_$w.txt 2>&1
  echo "serve $w rc $? at $(elapsed) s"
  rm -f /tmp/av_$w/memory_*.csv
  python3 tools/serve_summary.py /tmp/av_$w 2>&1 | grep -v "^ " | head -10 | tee -a $OUT/summary.txt
  tar -C /tmp -cJf $OUT/servers_$w.tar.xz av_$w
done
pack_out
