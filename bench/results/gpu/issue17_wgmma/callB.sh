#!/usr/bin/env bash
# 16th session, call B: the 8B-shape dense / keep-0.5 prefill with cuDNN attention (the previous
# default) and with auto (the wgmma kernel), the kernel alone beside PyTorch's cuDNN SDPA, and the
# PyTorch anchor with ANCHOR_SDPA=cudnn, all in one call.
t0=$(date +%s)
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv > $OUT/gpu.txt
[ -x /tmp/bld/uniprefill ] || UP_GPU_TARGETS="uniprefill" bash scripts/gpu_build.sh build /tmp/bld > /tmp/build.log 2>&1
echo "build at $(( $(date +%s) - t0 )) s"
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc --expt-relaxed-constexpr tools/gpu/wgmma_attention_probe.cu src/ops/cuda/sm90/flash_attention_wgmma.cu -o /tmp/probe 2>/dev/null
export NCCL_NVLS_ENABLE=0
commit=$(git rev-parse --short HEAD 2>/dev/null || echo 675b6d9)
for att in cudnn auto; do
  /tmp/bld/uniprefill bench gpu-prefill --shape llama-3.1-8b --contexts 32768,131072 --keep-ratios 0.5 \
    --repeats 3 --attention $att --commit $commit --json $OUT/llama8b_$att.json > $OUT/llama8b_$att.txt 2>&1
  echo "bench $att rc $? at $(( $(date +%s) - t0 )) s"; grep -E "ms|TTFT" $OUT/llama8b_$att.txt | tail -6
done
/tmp/probe bench 32768 131072 > $OUT/kernel.txt 2>&1
python3 .device/fa/cudnn_sdpa.py 32768 131072 >> $OUT/kernel.txt 2>&1
echo "kernel at $(( $(date +%s) - t0 )) s"; cat $OUT/kernel.txt
ANCHOR_SDPA=cudnn timeout 200 python3 .device/fa/pytorch_anchor.py 32768 131072 > $OUT/anchor_cudnn.jsonl 2>&1
echo "anchor rc $? at $(( $(date +%s) - t0 )) s"; cat $OUT/anchor_cudnn.jsonl
