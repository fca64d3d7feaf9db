#!/usr/bin/env bash
# Prepared in the 28th session (no H200 came; calls X, AA, AB, Y ran on an H100). There the GPU
# held its 700 W limit by lowering the SM clock to 1.3-1.6 GHz under sustained load, our
# attention kernel ran a deep 256-row chunk ~15% slower sustained than in a cool burst, and the
# 130K prompt's chunked forwards cost +1.41 s of GPU time over whole (attention +0.46, GEMMs
# +0.51, small kernels +0.20, gaps +0.24). This call, best on an H200 (issue 18's reference):
#   1. WgmmaAttentionTest.DISABLED_ThroughputDeepChunkBetweenGemms with the clock sampled: does
#      the H200 (700 W too, faster memory) throttle alike?
#   2. the CUDA tests of RoPE in the append (RopePagedKvAppend, written without a GPU in the 28th
#      session) and bench step with it and without (UNIPREFILL_CUDA_SEPARATE_ROPE=1), arms
#      alternating; predicted ~0.25 ms off a 32-layer forward at 256 rows (~0.06 ms at 8 layers);
#   3. served, dense, untraced: mixed (130K among 16 shorts) and long1 (alone, PREFILL_ONLY=2048),
#      whole and chunked, each run's mean SM clock and power printed beside its memory.
# Predicted (H200): mixed ~1.15x (24th: 1.155x), long1 ~1.11x (27th's GPU time: 1.116x); the
# clock under load lower in the chunked runs than in whole's by a few percent.
source "$(dirname "$0")/lib.sh"
call_begin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
start_checkpoint
build_and_test "uniprefill uniprefill_cuda_tests" \
  'WgmmaAttention*:StepTrace*:CudaPagedAttention*:CudaModel*:CudaRandomModel*:CudaPrefixInPlace*:*SegmentChunk*:*Rope*' 180
# RoPE in the append (28th session, the default) against the two launches, same binary, arms
# alternating: bench step's deep and shallow chunks, 8 layers.
for arm in 0 1 0 1; do
  UNIPREFILL_CUDA_SEPARATE_ROPE=$arm timeout 90 build-dev-new/uniprefill bench step --device cuda \
    --shape llama-3.1-8b --layers 8 --budget 2048 --warmup 2 --repeats 9 \
    --mixes "c256@120000; c2048@16384; d16@4096" > /tmp/rope_arm$arm.txt 2>&1
  echo "== separate rope $arm" >> $OUT/rope_ab.txt; grep -vE "^\s*$" /tmp/rope_arm$arm.txt | tail -6 >> $OUT/rope_ab.txt
done
echo "rope A/B at $(elapsed) s"; cat $OUT/rope_ab.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader -lms 20 \
  > /tmp/clocks.csv 2>&1 &
sampler=$!
timeout 120 build-dev-new/uniprefill_cuda_tests --gtest_also_run_disabled_tests \
  --gtest_filter='WgmmaAttentionTest.DISABLED_ThroughputDeepChunkBetweenGemms' \
  > $OUT/between.txt 2>&1
rc=$?
kill $sampler
echo "between rc $rc at $(elapsed) s"; grep -E "^phase" $OUT/between.txt
python3 - >> $OUT/between.txt <<'PY'
import datetime, os, re, statistics
rows = []
for line in open('/tmp/clocks.csv'):
    p = [x.strip() for x in line.split(',')]
    try:
        t = datetime.datetime.strptime(p[0], '%Y/%m/%d %H:%M:%S.%f').replace(
            tzinfo=datetime.timezone.utc).timestamp() * 1000
        rows.append((t, float(p[1].split()[0]), float(p[2].split()[0])))
    except (ValueError, IndexError):
        continue
text = open(os.path.join(os.environ['OUT'], 'between.txt')).read()
for m in re.finditer(r'phase (\S+) epoch ms (\d+) \.\. (\d+)', text):
    s = [r for r in rows if int(m[2]) <= r[0] <= int(m[3])]
    if s:
        print(f"clock during {m[1]}: {statistics.mean(r[1] for r in s):.0f} MHz, "
              f"{statistics.mean(r[2] for r in s):.0f} W ({len(s)} samples)")
PY
grep "^clock" $OUT/between.txt
wait_checkpoint
echo "checkpoint ready at $(elapsed) s"
deadline=${DEADLINE:-560}
MODES=dense KV_MEM=32GiB BUDGET=2048 PREFILL_ONLY=8192 WORKLOADS="mixed" UP_CKPT=/tmp/l8b \
  timeout $(( deadline - $(elapsed) )) \
  bash scripts/gpu_serve_mixed.sh build-dev-new/uniprefill /tmp/ac whole chunked > $OUT/serve_mixed.txt 2>&1
echo "serve mixed rc $? at $(elapsed) s"
[ $(( deadline - $(elapsed) )) -ge 110 ] && \
MODES=dense KV_MEM=32GiB BUDGET=2048 PREFILL_ONLY=2048 WORKLOADS="long1" UP_CKPT=/tmp/l8b \
  timeout $(( deadline - $(elapsed) )) \
  bash scripts/gpu_serve_mixed.sh build-dev-new/uniprefill /tmp/ac whole chunked > $OUT/serve_long1.txt 2>&1
echo "serve long1 rc $? at $(elapsed) s"
grep -h "GPU under load\|peak GPU" $OUT/serve_*.txt
rm -f /tmp/ac/memory_*.csv
python3 tools/serve_summary.py /tmp/ac 2>&1 | grep -v "^ " | head -12 | tee $OUT/summary.txt
tar -C /tmp -cJf $OUT/servers.tar.xz ac
pack_out
