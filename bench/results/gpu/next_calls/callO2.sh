#!/usr/bin/env bash
# Prepared in the 23rd session: after call O on the same warm machine (its build-dev-new), the
# deep chunk beside 9 decodes as served and aligned, then the deep chunk's attention kernel
# against a shallow chunk's under Nsight Compute with DRAM and L2 counters (README.md).
t0=$(date +%s)
mkdir -p $OUT
export NCCL_NVLS_ENABLE=0
if [ ! -x build-dev-new/uniprefill ]; then
  UP_GPU_TARGETS="uniprefill" bash scripts/gpu_build.sh build build-dev-new > /tmp/build.log 2>&1
  echo "build rc $? at $(( $(date +%s) - t0 )) s"
fi
B=build-dev-new/uniprefill
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
# 1. The deep chunk beside 9 decodes, as served and aligned (375 + 9 = 384 rows).
left=$(( 585 - ($(date +%s) - t0) ))
timeout $left $B bench step --device cuda --shape llama-3.1-8b --budget 2048 --warmup 1 \
  --repeats 3 --commit $COMMIT --mixes "c384@80256+d9@600; c375@80256+d9@600; c384@80256" \
  --json /tmp/step_deep.json > $OUT/step_deep.txt 2> /tmp/step.err
echo "bench step (deep) rc $? at $(( $(date +%s) - t0 )) s"
cat $OUT/step_deep.txt; tail -3 /tmp/step.err
python3 tools/step_marginals.py /tmp/step_deep.json
# 2. The deep chunk's attention kernel against a shallow chunk's, with DRAM and L2 counters
#    (8 layers; the attention kernels only).
NCU="ncu --clock-control none --csv --target-processes all --kernel-name regex:FlashAttentionWgmma"
NCU+=" --metrics gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active"
for mix in "c384@80256" "c2048@16384"; do
  left=$(( 585 - ($(date +%s) - t0) ))
  [ $left -lt 40 ] && { echo "out of time before ncu $mix"; break; }
  timeout $(( left - 10 )) $NCU --log-file /tmp/ncu_$mix.csv $B bench step --device cuda \
    --shape llama-3.1-8b --layers 8 --budget 2048 --warmup 0 --repeats 1 --mixes "$mix" \
    > /tmp/ncu_$mix.txt 2>&1
  echo "ncu $mix rc $? at $(( $(date +%s) - t0 )) s"
  grep -c FlashAttentionWgmma /tmp/ncu_$mix.csv
done
tar -C /tmp -cJf $OUT/ncu_data.tar.xz step_deep.json step.err $(cd /tmp && ls ncu_*.csv 2>/dev/null)
