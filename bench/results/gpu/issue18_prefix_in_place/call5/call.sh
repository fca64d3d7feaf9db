#!/usr/bin/env bash
# Device call 3 (8th session): served 4 x 32K and 130K + shorts at another step budget.
set -u
cd "$(dirname "$0")/.."
mkdir -p /tmp/b /tmp/l
tar -C /tmp/b -xJf .gpu_carry/bins.tar.xz
tar -C /tmp/l -xJf .gpu_carry/lib.tar.xz
export LD_LIBRARY_PATH=/tmp/l/lib:$(dirname "$(find / -name 'libcublasLt.so.13' 2>/dev/null | head -1)"):$(dirname "$(find / -name 'libcudnn.so.9' 2>/dev/null | head -1)"):/usr/lib/x86_64-linux-gnu
export UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD NCCL_NVLS_ENABLE=0
R=/tmp/r; mkdir -p $R
python3 tools/make_synthetic_checkpoint.py --preset llama-3.1-8b --dtype bf16 --out /tmp/l8b > $R/ckpt.txt 2>&1
for b in ${BUDGETS:-2304}; do
  BUDGET=$b PREFILL_ONLY=8192 WORKLOADS="long4 mixed" timeout 200 bash scripts/gpu_serve_mixed.sh /tmp/b/uniprefill $R/serve_b$b chunked > $R/serve_b$b.txt 2>&1
  echo "budget $b rc $?"
done
WORKLOADS="long4" timeout 100 bash scripts/gpu_serve_mixed.sh /tmp/b/uniprefill $R/serve_whole whole > $R/serve_whole.txt 2>&1; echo "whole rc $?"
for d in $R/serve_*/; do python3 tools/serve_summary.py $d 2>/dev/null | grep -v trace; done
tar -C /tmp -cJf $OUT/r.tar.xz r
