#!/usr/bin/env bash
# 28th session, after call AA (H100): our attention kernel alone runs a 256-row chunk 120K deep
# at 629 TFLOP/s (2 splits; the whole 128K prefill 576), but the served chunks ran it at ~548
# (0.98 ms a layer 129K deep against 0.86 alone), and the chunked forwards' GEMMs at 256 rows at
# 519 TFLOP/s (whole: 759). This call asks why the kernel is slower served:
#   1. WgmmaAttentionTest.DISABLED_ThroughputDeepChunkBetweenGemms: the chunk back to back, then
#      each launch between an 8B layer's four GEMMs at 256 rows, timed launch by launch, with the
#      SM clock and power sampled every 20 ms beside it (clocks.csv);
#   2. bench step, 32 layers, c256@120000, kernel view: the engine's own forward of that chunk.
# Predicted: back to back ~0.80 ms; between GEMMs ~0.92 ms if the GEMMs' power lowers the clock
# the attention then runs at (the sampler shows it), ~0.80 if not (then the served walk's own
# launches, e.g. its uploads, are what differs).
source "$(dirname "$0")/lib.sh"
call_begin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
UP_GPU_TARGETS="uniprefill uniprefill_cuda_tests" bash scripts/gpu_build.sh build build-dev-new \
  > /tmp/build.txt 2>&1
echo "build rc $? at $(elapsed) s"; tail -1 /tmp/build.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
  --format=csv,noheader -lms 20 > $OUT/clocks.csv 2>&1 &
sampler=$!
sleep 1
UP_SOURCE_DIR=$PWD timeout 120 build-dev-new/uniprefill_cuda_tests --gtest_also_run_disabled_tests \
  --gtest_filter='WgmmaAttentionTest.DISABLED_ThroughputDeepChunkBetweenGemms' \
  > $OUT/between.txt 2>&1
echo "between rc $? at $(elapsed) s"; grep -E "^phase|FAILED|PASSED" $OUT/between.txt
date +%s%3N > $OUT/step_begin.txt
rm -f /tmp/ab_step.jsonl
UNIPREFILL_CUDA_STEP_TRACE=/tmp/ab_step.jsonl UNIPREFILL_CUDA_STEP_TRACE_KERNELS=1 timeout 150 \
  build-dev-new/uniprefill bench step --device cuda --shape llama-3.1-8b --layers 32 \
  --budget 2048 --warmup 2 --repeats 7 --mixes "c256@120000" > $OUT/step.txt 2>&1
echo "bench step rc $? at $(elapsed) s"
date +%s%3N >> $OUT/step_begin.txt
kill $sampler
python3 - > $OUT/step_kernels.txt <<'PY'
import collections, json
lines = [json.loads(l) for l in open('/tmp/ab_step.jsonl') if l.strip() and '"kernels"' in l]
for rows in sorted({x['rows'] for x in lines}):
    f = [x for x in lines if x['rows'] == rows][-7:]
    print(f"rows {rows}: {len(f)} forwards, gpu_ms {[round(x['gpu_ms'], 2) for x in f]}")
    names = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for x in f:
        for n, c, ms, idle in x['kernels']['by_name']:
            t = names[n]; t[0] += c; t[1] += ms; t[2] += idle
    for n, (c, ms, idle) in sorted(names.items(), key=lambda kv: -kv[1][1] - kv[1][2]):
        print(f"   {n[:70]:70s} n {c / len(f):5.1f}  own {ms / len(f):7.3f}  idle {idle / len(f):6.3f} ms")
PY
cat $OUT/step_kernels.txt | head -30
