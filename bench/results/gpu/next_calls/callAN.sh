#!/usr/bin/env bash
# 32nd session: the new defaults (group order, skipped unit rescale, pv_beside_exp: all three on
# since callAM's H200 arms and probe) against the old (overlap, head order, every rescale, set by
# environment) end to end, n o o n at 32K / 128K, then ANCHOR_SDPA=cudnn's anchor, one call.
# Predicted from callAM (H200): new 1.5-2% faster at 32K, 3.5-4.5% at 128K.
source "$(dirname "$0")/lib.sh"
call_begin
CALL_END=${CALL_END:-480}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
UP_GPU_TARGETS="uniprefill" bash scripts/gpu_build.sh build build-dev-new > /tmp/build.txt 2>&1
echo "build rc $? at $(elapsed) s"
OLD_FLAGS="UNIPREFILL_CUDA_WGMMA_GROUP_ORDER=0 UNIPREFILL_CUDA_WGMMA_SKIP_UNIT_RESCALE=0 UNIPREFILL_CUDA_WGMMA_SCHEDULE=overlap"
run_arm() {  # run_arm NAME [VAR=VALUE...]; skipped unless it can end 110 s before CALL_END
  local name=$1; shift
  if [ $(( $(elapsed) + 55 )) -gt $(( CALL_END - 110 )) ]; then echo "$name skipped at $(elapsed) s"; return; fi
  env "$@" timeout $(( CALL_END - 105 - $(elapsed) )) build-dev-new/uniprefill bench gpu-prefill \
    --commit "$(git rev-parse --short HEAD)" --shape llama-3.1-8b --contexts 32768,131072 \
    --keep-ratios 0.5 --repeats 2 --json $OUT/$name.json > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(elapsed) s"; grep -E "^(32768|131072) " $OUT/$name.txt
}
run_arm n1; run_arm o1 $OLD_FLAGS; run_arm o2 $OLD_FLAGS; run_arm n2
ANCHOR_SDPA=cudnn PYTHONUNBUFFERED=1 timeout $(( CALL_END - $(elapsed) )) \
  python3 .gpu_deps/anchor/pytorch_anchor.py 32768 131072 > $OUT/anchor_cudnn.jsonl 2>&1
echo "anchor rc $? at $(elapsed) s"; cat $OUT/anchor_cudnn.jsonl
pack_out
