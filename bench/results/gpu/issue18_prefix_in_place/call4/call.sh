#!/usr/bin/env bash
# Device call 1 (8th session): the CUDA suite + served chunked/whole (issue 18 in-place fixes).
set -u
cd "$(dirname "$0")/.."
mkdir -p /tmp/b /tmp/l
tar -C /tmp/b -xJf .gpu_carry/bins.tar.xz
tar -C /tmp/l -xJf .gpu_carry/lib.tar.xz
export LD_LIBRARY_PATH=/tmp/l/lib:$(dirname "$(find / -name 'libcublasLt.so.13' 2>/dev/null | head -1)"):$(dirname "$(find / -name 'libcudnn.so.9' 2>/dev/null | head -1)"):/usr/lib/x86_64-linux-gnu
export UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD NCCL_NVLS_ENABLE=0
R=/tmp/r; mkdir -p $R
nvidia-smi > $R/gpu.txt 2>&1
( t0=$(date +%s); python3 tools/make_synthetic_checkpoint.py --preset llama-3.1-8b --dtype bf16 --out /tmp/l8b > $R/ckpt.txt 2>&1; echo "ckpt $(( $(date +%s)-t0 )) s" >> $R/ckpt.txt ) &
ck=$!
timeout 300 /tmp/b/uniprefill_cuda_tests --gtest_filter='-NcclBoundedWait*' > $R/cuda_tests.txt 2>&1; echo "suite rc $?" >> $R/cuda_tests.txt
timeout 60 /tmp/b/uniprefill_cuda_tests --gtest_filter='NcclBoundedWait*' > $R/tests_wait.txt 2>&1; echo "wait rc $?" >> $R/tests_wait.txt
tail -3 $R/cuda_tests.txt; grep -E "FAILED|rc" $R/cuda_tests.txt | head -20; tail -2 $R/tests_wait.txt
wait $ck; cat $R/ckpt.txt | tail -2
TRACE=1 BUDGET=2048 PREFILL_ONLY=8192 WORKLOADS="${WORKLOADS:-mixed long4}" timeout ${SERVE_T:-330} bash scripts/gpu_serve_mixed.sh /tmp/b/uniprefill $R/serve ${VARIANTS:-chunked whole} > $R/serve.txt 2>&1
echo "serve rc $?"; grep -E "==|peak|TTFT|ITL" $R/serve.txt | head -60
xz -9 $R/cuda_tests.txt $R/serve/trace_*.jsonl 2>/dev/null
tar -C /tmp -cJf $OUT/r.tar.xz r
