#!/usr/bin/env bash
# 30th session, second call (right after AJ, on its warm machine and build): issue 17's prefill
# benchmark with the Hopper kernel's launch choices, arms a (defaults), b (the kv-group order, the
# skipped unit rescale and the pv_beside_exp schedule), c (pv_beside_exp alone) in the order
# a b c c b a (`bench gpu-prefill`, 8K / 32K / 128K dense and keep 0.5; its table ends with each
# point's SM clock and power from NVML), then ANCHOR_SDPA=cudnn's PyTorch anchor, all in this
# call. B_FLAGS / C_FLAGS override the arms' variables. Predicted: c 0-4% under a at 32K / 128K
# if the exponentials beside PV (read in the SASS) pay as FA3's ablation says; b about c plus
# 1-3%. ~7 min.
source "$(dirname "$0")/lib.sh"
call_begin
ensure_uniprefill
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader -lms 100 \
  > $OUT/clocks.csv 2>&1 &
sampler=$!
B_FLAGS=${B_FLAGS:-"UNIPREFILL_CUDA_WGMMA_GROUP_ORDER=1 UNIPREFILL_CUDA_WGMMA_SKIP_UNIT_RESCALE=1 UNIPREFILL_CUDA_WGMMA_SCHEDULE=pv_beside_exp"}
C_FLAGS=${C_FLAGS:-"UNIPREFILL_CUDA_WGMMA_SCHEDULE=pv_beside_exp"}
run_arm() {  # run_arm NAME [VAR=VALUE...]
  local name=$1; shift
  echo "$name from $(date +%s%3N)" >> $OUT/phases.txt
  env "$@" build-dev-new/uniprefill bench gpu-prefill --commit "$(git rev-parse --short HEAD)" \
    --shape llama-3.1-8b --contexts 8192,32768,131072 --keep-ratios 0.5 --repeats 2 \
    --json $OUT/$name.json > $OUT/$name.txt 2>&1
  echo "$name rc $? at $(elapsed) s"; grep -E "^(8192|32768|131072) " $OUT/$name.txt
}
run_arm a1
run_arm b1 $B_FLAGS
run_arm c1 $C_FLAGS
run_arm c2 $C_FLAGS
run_arm b2 $B_FLAGS
run_arm a2
echo "anchor from $(date +%s%3N)" >> $OUT/phases.txt
ANCHOR_SDPA=cudnn PYTHONUNBUFFERED=1 timeout $(( 585 - $(elapsed) )) \
  python3 .gpu_deps/anchor/pytorch_anchor.py 8192 32768 131072 > $OUT/anchor_cudnn.jsonl 2>&1
echo "anchor rc $? at $(elapsed) s"; cat $OUT/anchor_cudnn.jsonl
echo "end $(date +%s%3N)" >> $OUT/phases.txt
kill $sampler
(cd $OUT && tar -cJf arms.tar.xz a?.* b?.* c?.* && rm -f a?.* b?.* c?.*)
