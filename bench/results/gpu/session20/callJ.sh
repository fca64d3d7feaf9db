#!/usr/bin/env bash
# 20th session, call J: issue 18's served goals at step budgets between 2048 (ITL p99 met, TTFT
# 1.14-1.20x) and 2560 (ITL p99 65.8 / 68.2 ms, 19th session call F): whole prefills and chunked
# at --max-batched-tokens 2304, then chunked at 2176, one binary (this session's tree; its GPU
# code is the 19th session's), both served workloads (4 x 32K; 130K among 16 shorts).
t0=$(date +%s)
mkdir -p $OUT
export NCCL_NVLS_ENABLE=0
( python3 tools/make_synthetic_checkpoint.py --preset llama-3.1-8b --dtype bf16 --out /tmp/l8b \
    > /tmp/ckpt.txt 2>&1; echo "checkpoint rc $? at $(( $(date +%s) - t0 )) s" ) &
ck=$!
UP_GPU_TARGETS="uniprefill" bash scripts/gpu_build.sh build /tmp/bld > /tmp/build.log 2>&1
echo "build rc $? at $(( $(date +%s) - t0 )) s"
wait $ck
tail -1 /tmp/ckpt.txt
left=$(( 585 - ($(date +%s) - t0) ))
BUDGET=2304 PREFILL_ONLY=8192 WORKLOADS="long4 mixed" UP_CKPT=/tmp/l8b \
  timeout $left bash scripts/gpu_serve_mixed.sh /tmp/bld/uniprefill /tmp/s2304 whole chunked > $OUT/serve_b2304.txt 2>&1
echo "serve 2304 rc $? at $(( $(date +%s) - t0 )) s"
left=$(( 585 - ($(date +%s) - t0) ))
BUDGET=2176 PREFILL_ONLY=8192 WORKLOADS="long4 mixed" UP_CKPT=/tmp/l8b \
  timeout $left bash scripts/gpu_serve_mixed.sh /tmp/bld/uniprefill /tmp/s2176 chunked > $OUT/serve_b2176.txt 2>&1
echo "serve 2176 rc $? at $(( $(date +%s) - t0 )) s"
rm -f /tmp/s2304/memory_*.csv /tmp/s2176/memory_*.csv
tar -C /tmp -cJf $OUT/servers.tar.xz s2304 s2176
python3 tools/serve_summary.py /tmp/s2304 2>&1 | tail -30
python3 tools/serve_summary.py /tmp/s2176 2>&1 | tail -20
