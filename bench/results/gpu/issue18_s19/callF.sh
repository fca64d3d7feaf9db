#!/usr/bin/env bash
# 19th session, call F: where the served chunked steps' GPU time departs from their price. The
# step trace now names each request's work unit (segment, rows, cached keys, ends segment); both
# workloads chunked at the default budget (2048) and at 2560, and whole, one binary.
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
for b in 2048 2560; do
  vs="chunked"; [ $b = 2048 ] && vs="whole chunked"
  left=$(( 585 - ($(date +%s) - t0) ))
  TRACE=1 BUDGET=$b PREFILL_ONLY=8192 WORKLOADS="long4 mixed" UP_CKPT=/tmp/l8b \
    timeout $left bash scripts/gpu_serve_mixed.sh /tmp/bld/uniprefill /tmp/s$b $vs > $OUT/serve_b$b.txt 2>&1
  echo "serve budget $b rc $? at $(( $(date +%s) - t0 )) s"
  rm -f /tmp/s$b/memory_*.csv
  python3 tools/serve_summary.py /tmp/s$b
done
tar -C /tmp -cJf $OUT/s.tar.xz s2048 s2560
