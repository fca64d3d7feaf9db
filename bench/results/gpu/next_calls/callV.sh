#!/usr/bin/env bash
# Prepared in the 26th session: where the 130K prompt's chunked excess lies. Call U (26th
# session, H100) found the dense prompt's chunked forwards ~2.2 s over whole-prefill rates
# whatever their number (227-249 forwards), so fewer, larger forwards cannot close issue 18's
# gap (1.174x on the H100). Two questions, one call:
#   1. How much is the shorts' work (1,251 decode tokens and 9 short prefills inside the long
#      prompt's forwards)? The `long1` workload serves the 130K prompt alone, whole and chunked
#      at PREFILL_ONLY=2048 (the same chunk prices as beside decodes, none there).
#      Predicted: chunked/whole ~1.12-1.13x alone (the shorts ~0.45 s of the mixed run's 1.8 s).
#   2. Which phase holds the rest? PHASES=1 (UNIPREFILL_CUDA_STEP_TRACE_PHASES=1): each forward's
#      GPU time split by walk phase (an event per walk step, no syncs), chunked against whole by
#      tools/trace_forward_excess.py --whole. Predicted: ffn and attention (their GEMMs at 256-1344
#      rows) ~0.3 s each over whole, norm ~0.2 s, begin (uploads) ~0.1 s.
# Also the new CUDA tests (StepTraceTest.*, KernelTimelineTest.*) and the whole-model tests
# through MarkPhase; with the kernel view's tests passing, KERNELS=1 too: each forward's GPU time
# busy in kernels and idle between them (CUPTI), chunked against whole. Predicted: idle between
# kernels ~0.5-1 s of the chunked prompt's ~2 s excess (bench step: 1.06 ms over ncu's kernel
# sum per 8 layers at c384@80256), ~0 in whole's forward.
# KV_MEM=32GiB so that an H100 runs it too (48 GiB of KV beside a whole 130K prefill does not fit
# 78 GiB). 8 files back.
source "$(dirname "$0")/lib.sh"
call_begin
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
start_checkpoint
bash scripts/gpu_build.sh build build-dev-new > $OUT/build.txt 2>&1
echo "build rc $? at $(elapsed) s"
export UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD
timeout 120 build-dev-new/uniprefill_cuda_tests --gtest_brief=1 \
  --gtest_filter='StepTrace*:KernelTimeline*:CudaModelTinyGguf*' > $OUT/tests.txt 2>&1
echo "tests rc $? at $(elapsed) s"; grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $OUT/tests.txt
# The kernel view (CUPTI) only where its own test passed, so that a machine without CUPTI still
# serves the rest of the call.
kernels=0
build-dev-new/uniprefill_cuda_tests --gtest_filter='KernelTimeline*:StepTraceTest.TheKernelView*' \
  > /tmp/kv.txt 2>&1 && [ "$(grep -c '^\[       OK \]' /tmp/kv.txt)" = 3 ] && kernels=1
echo "kernel view: $kernels" | tee -a $OUT/tests.txt
# While the checkpoint is written: call R's deep forward (8 layers) with the kernel view, the
# same forwards whose wall time ran 1.06 ms (c384@80256) and 2.7 ms (c2048@16384) over Nsight
# Compute's kernel sum: is that time between kernels (idle) or kernels slower than under ncu?
if [ $kernels = 1 ]; then
  UNIPREFILL_CUDA_STEP_TRACE=/tmp/v_step.jsonl UNIPREFILL_CUDA_STEP_TRACE_KERNELS=1 \
    UNIPREFILL_CUDA_STEP_TRACE_PHASES=1 timeout 120 build-dev-new/uniprefill bench step \
    --device cuda --shape llama-3.1-8b --layers 8 --budget 2048 --warmup 2 --repeats 7 \
    --mixes "c384@80256; c2048@16384" > $OUT/step_kernels.txt 2>&1
  echo "bench step with the kernel view rc $? at $(elapsed) s"
  python3 - >> $OUT/step_kernels.txt <<'PY'
import json, statistics
lines = [json.loads(l) for l in open('/tmp/v_step.jsonl') if l.strip()]
for rows in (384, 2048):
    f = [x for x in lines if x.get('rows') == rows and 'kernels' in x]
    if not f:
        continue
    k = [x['kernels'] for x in f]
    med = lambda key: statistics.median(v[key] for v in k)
    print(f"rows {rows}: {len(f)} forwards, gpu_ms p50 {statistics.median(x['gpu_ms'] for x in f):.3f}, "
          f"kernels {med('n'):.0f}, busy p50 {med('busy_ms'):.3f} ms, idle p50 {med('gap_ms'):.3f} ms "
          f"in {med('gaps'):.0f} gaps; phases p50 "
          + ", ".join(f"{p} {statistics.median(x['phases'].get(p, 0) for x in f):.3f}"
                      for p in f[-1].get('phases', {})))
    for g in f[-1]['kernels']['largest_gaps']:
        print(f"   largest gap {g[0]:.3f} ms after {g[1][:60]} before {g[2][:60]}")
PY
  tail -8 $OUT/step_kernels.txt
fi
wait_checkpoint
left=$(( 585 - $(elapsed) ))
KV_MEM=32GiB TRACE=1 PHASES=1 KERNELS=$kernels BUDGET=2048 PREFILL_ONLY=2048 WORKLOADS="long1" UP_CKPT=/tmp/l8b \
  timeout $left bash scripts/gpu_serve_mixed.sh build-dev-new/uniprefill /tmp/v whole chunked \
  > $OUT/serve_long1.txt 2>&1
echo "serve rc $? at $(elapsed) s"
rm -f /tmp/v/memory_*.csv
python3 tools/serve_summary.py /tmp/v 2>&1 | grep -v "^ " | head -8 | tee $OUT/summary.txt
# The dense run's forwards first in each trace: whole's one, chunked's until the prompt's end
# (alone, every chunk is the prompt's: --min-cached 0 takes its first, uncached one too).
python3 tools/trace_forward_excess.py /tmp/v/trace_chunked.jsonl --whole /tmp/v/trace_whole.jsonl \
  --min-cached 0 --prompt-tokens 130000 | tee $OUT/phases.txt
tar -C /tmp -cJf $OUT/servers_long1.tar.xz v
