#!/usr/bin/env bash
# 28th session, after call X (H100): the served 130K prompt's chunked forwards ran our attention
# kernel at 530-540 TFLOP/s for chunks 48-128K deep (8.28 s of its 12.0 s) where a whole 128K
# prefill runs ~590-616 on the kernel alone: if the served whole runs near that, the attention
# kernel's rate on deep chunks, not the per-forward costs, is most of the H100's gap. This call:
#   1. WgmmaAttentionTest.DISABLED_ThroughputChunksOverDeepPrefixesBySplits: the kernel alone,
#      whole 32K / 128K, and 256-2048-row chunks over a 120K prefix in 1-8 key splits;
#   2. long1 (the 130K prompt alone, PREFILL_ONLY=2048) whole, chunked, and chunkedwaves2
#      (UNIPREFILL_CUDA_PREFIX_SPLIT_WAVES=2: a deep chunk in at least two waves of CTAs), each
#      traced with the kernel view (call X: traced 12.030 s vs untraced 12.004 s): the attention
#      kernel's own seconds whole against chunked, and whether more splits shorten it.
# (Run in the 28th session: the branch was not taken, 4 splits ran slower than 2 alone, and
# UNIPREFILL_CUDA_PREFIX_SPLIT_WAVES and the chunkedwaves2 variant were removed after it.)
# Predicted: the kernel alone ~590 TFLOP/s whole 128K, 256 rows at 2 splits ~540 (the served
# figure), 4 splits within 3% of 2; served whole's attention kernel ~7.5 s.
source "$(dirname "$0")/lib.sh"
call_begin
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
start_checkpoint
UP_GPU_TARGETS="uniprefill uniprefill_cuda_tests" bash scripts/gpu_build.sh build build-dev-new \
  > /tmp/build.txt 2>&1
echo "build rc $? at $(elapsed) s"; tail -3 /tmp/build.txt
UP_SOURCE_DIR=$PWD timeout 150 build-dev-new/uniprefill_cuda_tests --gtest_also_run_disabled_tests \
  --gtest_filter='WgmmaAttentionTest.DISABLED_ThroughputChunksOverDeepPrefixesBySplits' \
  > $OUT/throughput.txt 2>&1
echo "throughput rc $? at $(elapsed) s"; grep -E "^rows|FAILED|PASSED" $OUT/throughput.txt
wait_checkpoint
echo "checkpoint ready at $(elapsed) s"
deadline=${DEADLINE:-560}
# chunkedwaves2 only where the kernel alone says more splits pay: 256 rows at 4 splits >= 3%
# faster than at 2.
variants="whole chunked"
python3 - $OUT/throughput.txt <<'PY' && variants="whole chunked chunkedwaves2"
import re, sys
ms = {int(m[1]): float(m[2]) for m in re.finditer(
    r"rows +256 keys 120256 splits (\d): kernel +([\d.]+) ms", open(sys.argv[1]).read())}
print("256 rows 120K deep, ms by splits:", ms)
sys.exit(0 if 2 in ms and 4 in ms and ms[4] < 0.97 * ms[2] else 1)
PY
echo "variants: $variants"
MODES=dense KV_MEM=32GiB TRACE=1 KERNELS=1 BUDGET=2048 PREFILL_ONLY=2048 WORKLOADS="long1" \
  UP_CKPT=/tmp/l8b timeout $(( deadline - $(elapsed) )) \
  bash scripts/gpu_serve_mixed.sh build-dev-new/uniprefill /tmp/aa $variants \
  > $OUT/serve_long1.txt 2>&1
echo "serve long1 rc $? at $(elapsed) s"
rm -f /tmp/aa/memory_*.csv
python3 tools/serve_summary.py /tmp/aa 2>&1 | grep -v "^ " | head -8 | tee $OUT/summary.txt
for v in whole chunked chunkedwaves2; do
  [ -f /tmp/aa/trace_$v.jsonl ] && python3 tools/trace_forward_excess.py /tmp/aa/trace_$v.jsonl \
    --min-cached 0 --prompt-tokens 130000 > $OUT/kernels_$v.txt 2>&1
done
tail -20 $OUT/kernels_*.txt
tar -C /tmp -cJf $OUT/servers.tar.xz aa
