#!/usr/bin/env bash
# 20th session, call I: where a chunked step's fixed cost goes (issue 18's ~4.3 ms per forward
# in the served step fit; issue 17's decode step at 7.3 ms against a ~4.3 ms HBM floor). Every
# kernel's duration under Nsight Compute (gpu__time_duration only, clocks left alone) for
#   (a) a 32K dense prefill of the 8B shape cut into 2048-row chunks (8 layers: the per-layer
#       picture; the whole prefill runs too, as the comparison), and
#   (b) decode steps of one request at 32K context (8 layers).
# Plain timings of the same commands first (no profiler).
t0=$(date +%s)
mkdir -p $OUT
export NCCL_NVLS_ENABLE=0
UP_GPU_TARGETS="uniprefill" bash scripts/gpu_build.sh build /tmp/bld > /tmp/build.log 2>&1
echo "build rc $? at $(( $(date +%s) - t0 )) s"
B=/tmp/bld/uniprefill
PRE="bench gpu-prefill --shape llama-3.1-8b --layers 8 --contexts 32768 --keep-ratios 1.0 --chunk-tokens 2048 --repeats 1"
DEC="bench gpu-decode --shape llama-3.1-8b --layers 8 --contexts 32768 --batch-sizes 1 --sampling device --graphs off --steps 4"
$B $PRE --json $OUT/prefill_plain.json > $OUT/prefill_plain.txt 2>&1; echo "plain prefill rc $? at $(( $(date +%s) - t0 )) s"
$B $DEC --json $OUT/decode_plain.json > $OUT/decode_plain.txt 2>&1; echo "plain decode rc $? at $(( $(date +%s) - t0 )) s"
tail -4 $OUT/prefill_plain.txt; tail -3 $OUT/decode_plain.txt
NCU="ncu --clock-control none --metrics gpu__time_duration.sum --csv --target-processes all"
timeout 200 $NCU --log-file /tmp/prefill_kernels.csv $B $PRE > /tmp/ncu_prefill.txt 2>&1
echo "ncu prefill rc $? at $(( $(date +%s) - t0 )) s"; tail -2 /tmp/ncu_prefill.txt
timeout 150 $NCU --log-file /tmp/decode_kernels.csv $B $DEC > /tmp/ncu_decode.txt 2>&1
echo "ncu decode rc $? at $(( $(date +%s) - t0 )) s"; tail -2 /tmp/ncu_decode.txt
wc -l /tmp/prefill_kernels.csv /tmp/decode_kernels.csv
xz -9 -c /tmp/prefill_kernels.csv > $OUT/prefill_kernels.csv.xz
xz -9 -c /tmp/decode_kernels.csv > $OUT/decode_kernels.csv.xz
