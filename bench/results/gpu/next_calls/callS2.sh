#!/usr/bin/env bash
# Prepared in the 24th session: `bench step` on the 8B shape, same binary, three arms in
# alternating order over two rounds: old (UNIPREFILL_CUDA_SEPARATE_UPLOADS=1: a copy per metadata
# array), new (PutAll, the default) and tuned (PutAll and UNIPREFILL_CUDA_GEMM_TUNE=1).
# Predicted: new ~0.3-0.8 ms under old on the deep steps with decodes (~5 fewer small copies a
# layer; nsys in callR counts them); tuned 1-2 ms under new at c2048@16384, ~0.3 ms on the deep
# 384-row step, c1024@16384 within noise; the tuned arm's start-up +3-6 s ("GEMM tuning").
# 3 files back: step.txt tune_log.txt step_json.tar.xz. Reuses callS's build when warm.
source "$(dirname "$0")/lib.sh"
call_begin
ensure_uniprefill
B=build-dev-new/uniprefill
COMMON="--device cuda --shape llama-3.1-8b --budget 2048 --warmup 2 --repeats 5"
MIXES="c2048@16384; c1024@16384; c384@80256+d9@600; c256@102272+d1@600; c1000@16384+d9@600; d32@1024"
declare -A arm_env=([old]="UNIPREFILL_CUDA_SEPARATE_UPLOADS=1" [new]="" [tuned]="UNIPREFILL_CUDA_GEMM_TUNE=1")
mkdir -p /tmp/s2json
for arm in old new tuned tuned new old; do
  left=$(( 575 - $(elapsed) ))
  [ $left -lt 40 ] && { echo "out of time before arm $arm"; break; }
  i=$(( ${i:-0} + 1 ))
  echo "# arm $arm (${arm_env[$arm]:-defaults}), run $i" >> $OUT/step.txt
  env ${arm_env[$arm]} timeout $left $B bench step $COMMON --mixes "$MIXES" \
    --json /tmp/s2json/step_${i}_$arm.json >> $OUT/step.txt 2>> $OUT/tune_log.txt
  echo "arm $arm rc $? at $(elapsed) s"
done
cat $OUT/step.txt; grep "GEMM tuning" $OUT/tune_log.txt
tar -C /tmp -cJf $OUT/step_json.tar.xz s2json
