#!/usr/bin/env bash
# 19th session, call G: a decode priced by the keys it attends (its paged attention timed by
# PrepareServing: PrefixAttentionCost::decode_flops_per_key) against a decode costing its row
# (UNIPREFILL_CUDA_DECODES_AS_ROWS=1, as in calls E and F), one binary, both with whole-tile
# prices; both served workloads whole, chunked and chunkeddecoderows, with step traces.
t0=$(date +%s)
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv > $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0
( python3 tools/make_synthetic_checkpoint.py --preset llama-3.1-8b --dtype bf16 --out /tmp/l8b \
    > /tmp/ckpt.txt 2>&1; echo "checkpoint rc $? at $(( $(date +%s) - t0 )) s" ) &
ck=$!
UP_GPU_TARGETS="uniprefill" bash scripts/gpu_build.sh build /tmp/bld > /tmp/build.log 2>&1
echo "build rc $? at $(( $(date +%s) - t0 )) s"; grep -E " error|cuDNN attention" /tmp/build.log | head -3
wait $ck
tail -1 /tmp/ckpt.txt
left=$(( 590 - ($(date +%s) - t0) ))
TRACE=1 BUDGET=2048 PREFILL_ONLY=8192 WORKLOADS="long4 mixed" UP_CKPT=/tmp/l8b \
  timeout $left bash scripts/gpu_serve_mixed.sh /tmp/bld/uniprefill /tmp/s chunked chunkeddecoderows whole > $OUT/serve.txt 2>&1
echo "serve rc $? at $(( $(date +%s) - t0 )) s"
grep -E "peak GPU memory" $OUT/serve.txt
rm -f /tmp/s/memory_*.csv
tar -C /tmp -cJf $OUT/s.tar.xz s
python3 tools/serve_summary.py /tmp/s
