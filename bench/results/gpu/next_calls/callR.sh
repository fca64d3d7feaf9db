#!/usr/bin/env bash
# Prepared in the 24th session: what the ~7 ms of a deep chunk's forward that are neither its
# attention nor its GEMMs are made of (session24/README.md: c384@80256 42.4 ms = attention 26.3
# + GEMMs 9.0 + ~7). 8 layers of the 8B shape, budget 2048:
#  1. `bench step` wall times of four mixes (no profiler): the deep chunk beside 9 decodes and
#     alone, a 256-row chunk deeper still beside 1 decode (the 130K trace's last chunks), and a
#     2048-row chunk over 16K keys (a shallow reference);
#  2. each mix's kernels under Nsight Compute (durations only, clocks left alone; the last
#     forward of each log is the timed one), summed by kind and by name
#     (tools/ncu_step_kernels.py --names 25). Wall time minus the kernels' sum is the forward's
#     idle GPU time between kernels (launch-bound stretches);
#  3. with nsys present, the deep mix's 32-layer forward timeline: GPU idle between kernels.
# Predicted: RMSNorm, RoPE/append, SiLU*up, residuals and the split merge ~1.5-2 ms of a 32-layer
# forward, the decodes' attention and head ~0.5 ms; if the kernels' sum falls well short of the
# wall time, the rest is idle GPU between them: the small in-stream uploads (PinnedStaging::Put,
# one cudaMemcpyAsync per array: the step's slots, the attention's problem arrays, the decodes'
# block tables; ~8-12 a layer, ~300 a forward) and the host launching ~15 small kernels a layer.
# nsys.txt counts the copies and the gaps next to them: if they hold most of the ~4.8 ms a deep
# forward has over whole-prefill rates, one upload per forward (or kernels reading mapped pinned
# memory) is the fix.
# 4 files back: step8.txt kernels.txt ncu_logs.tar.xz nsys.txt. Reuses build-dev-new when warm.
source "$(dirname "$0")/lib.sh"
call_begin
ensure_uniprefill
B=build-dev-new/uniprefill
STEP8="bench step --device cuda --shape llama-3.1-8b --layers 8 --budget 2048"
MIXES=("c384@80256+d9@600" "c384@80256" "c256@102272+d1@600" "c2048@16384")
joined=$(printf "%s; " "${MIXES[@]}")
timeout 150 $B $STEP8 --warmup 2 --repeats 7 --mixes "${joined%; }" > $OUT/step8.txt 2>&1
echo "bench step (8 layers) rc $? at $(elapsed) s"; cat $OUT/step8.txt
NCU="ncu --clock-control none --metrics gpu__time_duration.sum --csv --target-processes all"
i=0
for mix in "${MIXES[@]}"; do
  i=$((i + 1))
  left=$(( 480 - $(elapsed) ))
  [ $left -lt 30 ] && { echo "out of time before ncu mix $i"; break; }
  timeout $(( left < 120 ? left : 120 )) $NCU --log-file /tmp/r_mix$i.csv \
    $B $STEP8 --warmup 0 --repeats 1 --mixes "$mix" > /tmp/r_mix$i.txt 2>&1
  echo "ncu mix $i ($mix) rc $? at $(elapsed) s"
  python3 tools/ncu_step_kernels.py /tmp/r_mix$i.csv --names 25 | tee -a $OUT/kernels.txt
done
tar -C /tmp -cJf $OUT/ncu_logs.tar.xz $(cd /tmp && ls r_mix*.csv r_mix*.txt 2>/dev/null)
if command -v nsys > /dev/null && [ $(( 560 - $(elapsed) )) -gt 40 ]; then
  timeout 60 nsys profile -t cuda -o /tmp/r_deep --force-overwrite true $B bench step \
    --device cuda --shape llama-3.1-8b --budget 2048 --warmup 1 --repeats 2 \
    --mixes "c384@80256+d9@600" > /tmp/nsys_run.txt 2>&1
  timeout 40 nsys stats -r cuda_gpu_trace -f csv -o /tmp/r_deep /tmp/r_deep.nsys-rep \
    > /dev/null 2>&1
  python3 tools/nsys_forward_gaps.py /tmp/r_deep_cuda_gpu_trace.csv > $OUT/nsys.txt 2>&1
  cat $OUT/nsys.txt
else
  echo "nsys: not here or no time" > $OUT/nsys.txt
fi
echo "done at $(elapsed) s"
