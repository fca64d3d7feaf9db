#!/usr/bin/env bash
# Prepared in the 22nd session: one served-like step's kernels under Nsight Compute (durations
# only, clocks left alone), 8 layers of the 8B shape prepared for a 2048-row budget, one ncu run
# per mix of `uniprefill bench step` (--warmup 0 --repeats 1: the last forward of each log is the
# step; tools/ncu_step_kernels.py sums it by kernel kind). Mixes: a 1024-row chunk over 16K keys
# alone, beside 4 decodes at 32K, beside a second prompt's 128-row chunk (and that with
# UNIPREFILL_CUDA_PREFIX_ONE_LAUNCH=1), and a segment-0 UniPrefill chunk beside 4 decodes.
# Answers which kernels callM's differences are made of. Reuses build-dev-new when warm.
t0=$(date +%s)
mkdir -p $OUT
export NCCL_NVLS_ENABLE=0
if [ ! -x build-dev-new/uniprefill ]; then
  UP_GPU_TARGETS="uniprefill" bash scripts/gpu_build.sh build build-dev-new > /tmp/build.log 2>&1
  echo "build rc $? at $(( $(date +%s) - t0 )) s"
fi
B=build-dev-new/uniprefill
NCU="ncu --clock-control none --metrics gpu__time_duration.sum --csv --target-processes all"
STEP="bench step --device cuda --shape llama-3.1-8b --layers 8 --budget 2048 --warmup 0 --repeats 1"
i=0
for mix in "c1024@16384" "c1024@16384+d4@32768" "c896@16384+c128@2048" "onelaunch:c896@16384+c128@2048" \
           "s1024@16384+d4@32768"; do
  i=$((i + 1))
  env_set=""
  if [[ $mix == onelaunch:* ]]; then env_set="UNIPREFILL_CUDA_PREFIX_ONE_LAUNCH=1"; mix=${mix#onelaunch:}; fi
  left=$(( 585 - ($(date +%s) - t0) ))
  [ $left -lt 30 ] && { echo "out of time before mix $i"; break; }
  env $env_set timeout $(( left < 150 ? left : 150 )) $NCU --log-file /tmp/mix$i.csv \
    $B $STEP --mixes "$mix" > /tmp/mix$i.txt 2>&1
  echo "mix $i ($env_set $mix) rc $? at $(( $(date +%s) - t0 )) s"
  python3 tools/ncu_step_kernels.py /tmp/mix$i.csv | tee -a $OUT/kernels.txt
  xz -9 -c /tmp/mix$i.csv > $OUT/mix$i.csv.xz
done
