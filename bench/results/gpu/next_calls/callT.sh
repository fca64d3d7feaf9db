#!/usr/bin/env bash
# Prepared in the 24th session: 4 x 32K served (issue 18's first goal) whole, chunked and
# chunkedtuned (the GEMM tuner on), step traces on; right after callS on a warm machine.
# Predicted: chunkedtuned's TTFT ratio 2-3% under chunked's (its 2048-row steps 1-2 ms shorter
# of ~45-60), ITL p99 no higher. The tuner becomes the default only if that holds beyond the
# ~1% spread of two calls. (25th session) Also chunkedovershoot (UNIPREFILL_CUDA_TILE_OVERSHOOT
# =0.15, call U's subject) so that a default follows from both workloads: predicted within ~1%
# of chunked here (4 x 32K's chunks are at most 32K deep, where a tile is a small share of the
# budget and few steps end a tile short), ITL p99 no higher than +2 ms.
source "$(dirname "$0")/lib.sh"
call_begin
start_checkpoint
ensure_uniprefill
wait_checkpoint
left=$(( 585 - $(elapsed) ))
TRACE=1 BUDGET=2048 PREFILL_ONLY=8192 WORKLOADS="long4" UP_CKPT=/tmp/l8b \
  timeout $left bash scripts/gpu_serve_mixed.sh build-dev-new/uniprefill /tmp/s whole chunked \
  chunkedtuned chunkedovershoot > $OUT/serve.txt 2>&1
echo "serve rc $? at $(elapsed) s"
rm -f /tmp/s/memory_*.csv
tar -C /tmp -cJf $OUT/servers.tar.xz s
python3 tools/serve_summary.py /tmp/s 2>&1 | grep -v "^ " | head -12
grep "GEMM tuning" /tmp/s/server_chunkedtuned.log
