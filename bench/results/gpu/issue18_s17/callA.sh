#!/usr/bin/env bash
# 17th session, call A: the current tree (93e7f29, wgmma attention) built on the GPU machine while
# the 8B-shape checkpoint is written (CPU-only), then a 32K prefill whole and in 2048-row chunks,
# dense and UniPrefill keep 0.5 (bench gpu-prefill, no server), then the served workloads (4 x 32K
# and 130K + 16 shorts), whole and chunked, dense and UniPrefill, one server per variant.
t0=$(date +%s)
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv > $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0
( python3 tools/make_synthetic_checkpoint.py --preset llama-3.1-8b --dtype bf16 --out /tmp/l8b \
    > /tmp/ckpt.txt 2>&1; echo "checkpoint rc $? at $(( $(date +%s) - t0 )) s" ) &
ck=$!
UP_GPU_TARGETS="uniprefill" bash scripts/gpu_build.sh build /tmp/bld > /tmp/build.log 2>&1
echo "build rc $? at $(( $(date +%s) - t0 )) s"; grep -E " error|C7513|C7515" /tmp/build.log | head
/tmp/bld/uniprefill bench gpu-prefill --shape llama-3.1-8b --contexts 32768 --keep-ratios 0.5 \
  --repeats 3 --chunk-tokens 2048 --serving-graphs --commit 93e7f29 > $OUT/chunks_32k.txt 2>&1
echo "gpu-prefill rc $? at $(( $(date +%s) - t0 )) s"; grep -E "^[0-9]|chunked / whole" $OUT/chunks_32k.txt
wait $ck
tail -2 /tmp/ckpt.txt
BUDGET=2048 PREFILL_ONLY=8192 WORKLOADS="long4 mixed" UP_CKPT=/tmp/l8b \
  bash scripts/gpu_serve_mixed.sh /tmp/bld/uniprefill $OUT/s whole chunked > $OUT/serve.txt 2>&1
echo "serve rc $? at $(( $(date +%s) - t0 )) s"
python3 tools/serve_summary.py $OUT/s
