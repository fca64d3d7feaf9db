#!/usr/bin/env bash
# Prepared in the 24th session: 4 x 32K served (issue 18's first goal) whole, chunked and
# chunkedtuned (the GEMM tuner on), step traces on; right after callS on a warm machine.
# Predicted: chunkedtuned's TTFT ratio 2-3% under chunked's (its 2048-row steps 1-2 ms shorter
# of ~45-60), ITL p99 no higher. The tuner becomes the default only if that holds beyond the
# ~1% spread of two calls.
t0=$(date +%s)
mkdir -p $OUT
export NCCL_NVLS_ENABLE=0
( python3 tools/make_synthetic_checkpoint.py --preset llama-3.1-8b --dtype bf16 --out /tmp/l8b \
    > /tmp/ckpt.txt 2>&1; echo "checkpoint rc $? at $(( $(date +%s) - t0 )) s" ) &
ck=$!
if [ ! -x build-dev-new/uniprefill ]; then
  UP_GPU_TARGETS="uniprefill" bash scripts/gpu_build.sh build build-dev-new > /tmp/build.log 2>&1
  echo "build rc $? at $(( $(date +%s) - t0 )) s"
fi
wait $ck
left=$(( 585 - ($(date +%s) - t0) ))
TRACE=1 BUDGET=2048 PREFILL_ONLY=8192 WORKLOADS="long4" UP_CKPT=/tmp/l8b \
  timeout $left bash scripts/gpu_serve_mixed.sh build-dev-new/uniprefill /tmp/s whole chunked \
  chunkedtuned > $OUT/serve.txt 2>&1
echo "serve rc $? at $(( $(date +%s) - t0 )) s"
rm -f /tmp/s/memory_*.csv
tar -C /tmp -cJf $OUT/servers.tar.xz s
python3 tools/serve_summary.py /tmp/s 2>&1 | grep -v "^ " | head -12
grep "GEMM tuning" /tmp/s/server_chunkedtuned.log
