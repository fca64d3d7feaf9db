#!/usr/bin/env bash
# 11th session, call 2: served 4 x 32K with chunks cut to end steps on 128 rows (issue 18).
source "$(dirname "$0")/env.sh"
t0=$(date +%s)
python3 tools/make_synthetic_checkpoint.py --preset llama-3.1-8b --dtype bf16 --out /tmp/l8b --quiet > $R/ckpt.txt 2>&1
echo "checkpoint $(( $(date +%s) - t0 )) s"
save() { mkdir -p $OUT; tar -C /tmp -cJf $OUT/r.tar.xz r; }
run() {  # variant workloads outdir budget
  BUDGET=$4 PREFILL_ONLY=8192 WORKLOADS="$2" TRACE=1 timeout 150 bash scripts/gpu_serve_mixed.sh \
    /tmp/b/uniprefill $R/$3 $1 > $R/$3_$1.txt 2>&1; echo "$3 $1 rc $? at $(( $(date +%s) - t0 )) s"; save
}
run chunked long4 b2048 2048
run unaligned long4 b2048 2048
run whole long4 b2048 2048
run chunked long4 b2304 2304
timeout 90 /tmp/b/uniprefill_cuda_tests --gtest_filter='CudaTensorParallelServingTest.*' > $R/tp_serving.txt 2>&1
echo "tp serving rc $?"; grep -E "PASSED|FAILED" $R/tp_serving.txt
[ $(( $(date +%s) - t0 )) -lt 400 ] && run chunked mixed b2048m 2048
for d in $R/b2048 $R/b2304 $R/b2048m; do [ -d $d ] && python3 tools/serve_summary.py $d 2>/dev/null | grep -v trace; done
save
