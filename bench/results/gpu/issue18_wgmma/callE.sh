#!/usr/bin/env bash
# 16th session, call E (issue 18 with the wgmma kernel): the binary of commit b3ae910 built on the
# CPU machine (build-gpu, sm_90 + sm_90a), the 8B-shape checkpoint written on the GPU machine, the
# kernel probe on the GPU meanwhile (the writer is CPU-only), then 4 x 32K prompts served whole and
# chunked (budget 2048, prefill-only 8192), dense and UniPrefill, one server each.
t0=$(date +%s)
mkdir -p $OUT /tmp/lib
tar -C /tmp/lib -xJf .device/serve/lib.tar.xz
xz -dc .device/serve/uniprefill.xz > /tmp/uniprefill && chmod +x /tmp/uniprefill
# The Debian libraries for the binary alone (curl and python keep the machine's own).
printf '#!/bin/sh\nLD_LIBRARY_PATH=/tmp/lib/lib:/usr/lib/x86_64-linux-gnu exec /tmp/uniprefill "$@"\n' > /tmp/up.sh
chmod +x /tmp/up.sh
export NCCL_NVLS_ENABLE=0
( python3 tools/make_synthetic_checkpoint.py --preset llama-3.1-8b --dtype bf16 --out /tmp/l8b \
    > /tmp/ckpt.txt 2>&1; echo "checkpoint rc $? at $(( $(date +%s) - t0 )) s" ) &
ck=$!
.device/fa/probe bench 32768 131072 > $OUT/kernel.txt 2>&1
echo "probe at $(( $(date +%s) - t0 )) s"; grep -E "overlap/3|serial/2" $OUT/kernel.txt
wait $ck
cat /tmp/ckpt.txt | tail -2
BUDGET=2048 PREFILL_ONLY=8192 WORKLOADS=long4 UP_CKPT=/tmp/l8b \
  bash scripts/gpu_serve_mixed.sh /tmp/up.sh $OUT/s whole chunked > $OUT/serve.txt 2>&1
echo "serve rc $? at $(( $(date +%s) - t0 )) s"
python3 tools/serve_summary.py $OUT/s
