#!/usr/bin/env bash
# 14th session, call 3 (issue 18): a second paired round on a fresh machine: both binaries built
# again (build.sh), then chunked servers old and new at prefill-only 8192 (the row cap), new at
# 16384 (segment-wise chunks of cheap segments hit the 8192-row cap: steps of 34-42 ms where the
# budget pays for ~52), one whole server; long4 only.
cd "$(dirname "$0")/../../../.."
t0=$(date +%s)
bash bench/results/gpu/issue18_fair_share/build.sh
R=/tmp/r2 && mkdir -p $R $OUT
run() {  # binary variant outdir prefill-only
  BUDGET=2048 PREFILL_ONLY=$4 WORKLOADS=long4 TRACE=1 timeout 100 bash scripts/gpu_serve_mixed.sh \
    $1 $R/$3 $2 > $R/$3_$2.txt 2>&1; echo "$3 $2 rc $? at $(( $(date +%s) - t0 )) s"
  tar -C /tmp -cJf $OUT/r2.tar.xz r2
}
run /tmp/old/uniprefill chunked old8k 8192
run /tmp/new/uniprefill chunked new8k 8192
run /tmp/new/uniprefill chunked new16k 16384
run /tmp/new/uniprefill whole new 8192
[ $(( $(date +%s) - t0 )) -lt 490 ] && run /tmp/new/uniprefill chunked new16kb 16384
for f in $R/*_*.txt; do echo "== $f"; grep -E "TTFT p50|ITL p99" $f; done
