#!/usr/bin/env bash
# 14th session, call 2 (issue 18): 4 x 32K served on the 8B checkpoint, budget 2048, prefill-only
# 8192, one server per variant in one call: whole and chunked on the new binary, chunked on the
# old one (HEAD 69c4cfe); then, if time is left, the mixed workload (130K + 16 shorts) on the new.
cd "$(dirname "$0")/../../../.."
t0=$(date +%s)
R=/tmp/r && mkdir -p $R $OUT
run() {  # binary variant outdir
  BUDGET=2048 PREFILL_ONLY=8192 WORKLOADS="${WL:-long4}" TRACE=1 timeout 170 bash scripts/gpu_serve_mixed.sh \
    $1 $R/$3 $2 > $R/$3_$2.txt 2>&1; echo "$3 $2 rc $? at $(( $(date +%s) - t0 )) s"
  tar -C /tmp -cJf $OUT/r.tar.xz r
}
run /tmp/new/uniprefill chunked new
run /tmp/old/uniprefill chunked old
run /tmp/new/uniprefill whole new
[ $(( $(date +%s) - t0 )) -lt 330 ] && WL=mixed run /tmp/new/uniprefill chunked newmixed
for f in $R/*_*.txt; do echo "== $f"; grep -E "TTFT p50|ITL p99|mixed prefill" $f; done
