#!/usr/bin/env bash
# 31st session: calls AJ and AK's essentials in one call (device starts were scarce: five tries
# refused before this was written, and one warm machine may be all a session gets).
#   1. the project's `uniprefill` built in the background (no test binary: the bit-identity of
#      every launch choice is checked here by the probe's `ab`, output against the default's,
#      and by its `check` against a naive f32 reference);
#   2. tools/gpu/wgmma_attention_probe.cu `ab` at 32K / 128K (the default against group order,
#      skipped unit rescale, both, pv_beside_exp, pv_beside_exp with both; interleaved rounds,
#      medians) and `check`;
#   3. `bench gpu-prefill` (8B shape, 32K / 128K, dense and keep 0.5) arms a (defaults), c
#      (pv_beside_exp), b (all three choices) as a c c a b b a (pv_beside_exp's pair first), each
#      arm skipped once the call's clock leaves too little for the anchor;
#   4. ANCHOR_SDPA=cudnn's PyTorch anchor at 32K / 128K, in the same call.
# Predicted as in AJ / AK: pv_beside_exp 0-4% at 32K / 128K, group order 0.5-1.5%, skip 1-3%.
# CALL_END (default 590 s): when the call must end; arms stop 120 s before it (the anchor's).
# PROBE_ONLY=1: steps 2 alone (~4 min; where the device time left cannot hold the rest);
# PROBE_SIZES: the ab sizes (default 32768 131072; 128K is ~125 s of the ab's time).
source "$(dirname "$0")/lib.sh"
call_begin
CALL_END=${CALL_END:-590}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
if [ "${PROBE_ONLY:-0}" != 1 ]; then
  ( UP_GPU_TARGETS="uniprefill" bash scripts/gpu_build.sh build build-dev-new \
      > /tmp/build.txt 2>&1; echo "build rc $? at $(elapsed) s" > /tmp/build_rc.txt ) &
  build_pid=$!
fi
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc tools/gpu/wgmma_attention_probe.cu \
  src/ops/cuda/sm90/flash_attention_wgmma.cu -o /tmp/probe > /tmp/probe_build.txt 2>&1
echo "probe build rc $? at $(elapsed) s"
timeout 200 /tmp/probe ab ${PROBE_SIZES:-32768 131072} > $OUT/probe_ab.txt 2>&1
echo "probe ab rc $? at $(elapsed) s"; cat $OUT/probe_ab.txt
timeout 60 /tmp/probe check > $OUT/probe_check.txt 2>&1
echo "probe check rc $? at $(elapsed) s"; grep -E "o3|check:" $OUT/probe_check.txt
[ "${PROBE_ONLY:-0}" = 1 ] && exit 0
wait $build_pid; cat /tmp/build_rc.txt; tail -3 /tmp/build.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader -lms 100 \
  > $OUT/clocks.csv 2>&1 &
sampler=$!
B_FLAGS="UNIPREFILL_CUDA_WGMMA_GROUP_ORDER=1 UNIPREFILL_CUDA_WGMMA_SKIP_UNIT_RESCALE=1 UNIPREFILL_CUDA_WGMMA_SCHEDULE=pv_beside_exp"
C_FLAGS="UNIPREFILL_CUDA_WGMMA_SCHEDULE=pv_beside_exp"
run_arm() {  # run_arm NAME [VAR=VALUE...]; skipped unless it can end 120 s before CALL_END (the anchor's ~100 s)
  local name=$1; shift
  if [ $(( $(elapsed) + 55 )) -gt $(( CALL_END - 120 )) ]; then echo "$name skipped at $(elapsed) s"; return; fi
  echo "$name from $(date +%s%3N)" >> $OUT/phases.txt
  env "$@" timeout $(( CALL_END - 115 - $(elapsed) )) build-dev-new/uniprefill bench gpu-prefill \
    --commit "$(git rev-parse --short HEAD)" --shape llama-3.1-8b --contexts 32768,131072 \
    --keep-ratios 0.5 --repeats 2 --json $OUT/$name.json > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(elapsed) s"; grep -E "^(32768|131072) " $OUT/$name.txt
}
run_arm a1; run_arm c1 $C_FLAGS; run_arm c2 $C_FLAGS; run_arm a2
run_arm b1 $B_FLAGS; run_arm b2 $B_FLAGS; run_arm a3
echo "anchor from $(date +%s%3N)" >> $OUT/phases.txt
ANCHOR_SDPA=cudnn PYTHONUNBUFFERED=1 timeout $(( CALL_END - $(elapsed) )) \
  python3 .gpu_deps/anchor/pytorch_anchor.py 32768 131072 > $OUT/anchor_cudnn.jsonl 2>&1
echo "anchor rc $? at $(elapsed) s"; cat $OUT/anchor_cudnn.jsonl
echo "end $(date +%s%3N)" >> $OUT/phases.txt
kill $sampler
(cd $OUT && tar -cJf arms.tar.xz a?.* b?.* c?.* 2>/dev/null && rm -f a?.* b?.* c?.*)
pack_out
