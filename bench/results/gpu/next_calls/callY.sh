#!/usr/bin/env bash
# Prepared in the 27th session, to run right after call X on the same warm machine (its binary
# and checkpoint): issue 18's first goal on the current code, untraced: 4 concurrent 32K prompts,
# whole and chunked at the defaults, dense and UniPrefill. Predicted (24th session, H200): dense
# 1.135x, UniPrefill 1.132x, ITL p99 ~50 ms. ~4 min.
source "$(dirname "$0")/lib.sh"
call_begin
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
start_checkpoint
ensure_uniprefill
wait_checkpoint
left=$(( ${DEADLINE:-585} - $(elapsed) ))
KV_MEM=32GiB BUDGET=2048 WORKLOADS="long4" UP_CKPT=/tmp/l8b timeout $left \
  bash scripts/gpu_serve_mixed.sh build-dev-new/uniprefill /tmp/y whole chunked > $OUT/serve_long4.txt 2>&1
echo "serve long4 rc $? at $(elapsed) s"
rm -f /tmp/y/memory_*.csv
python3 tools/serve_summary.py /tmp/y 2>&1 | grep -v "^ " | head -8 | tee $OUT/summary.txt
tar -C /tmp -cJf $OUT/servers_long4.tar.xz y
