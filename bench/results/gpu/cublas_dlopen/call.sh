#!/usr/bin/env bash
# Device call 2 (8th session): cuBLAS loaded at run time: the CUDA suite + bench gpu-prefill 32K.
set -u
cd "$(dirname "$0")/.."
mkdir -p /tmp/b /tmp/l
tar -C /tmp/b -xJf .gpu_carry/bins.tar.xz
tar -C /tmp/l -xJf .gpu_carry/lib.tar.xz
export LD_LIBRARY_PATH=/tmp/l/lib:$(dirname "$(find / -name 'libcublasLt.so.13' 2>/dev/null | head -1)"):$(dirname "$(find / -name 'libcudnn.so.9' 2>/dev/null | head -1)"):/usr/lib/x86_64-linux-gnu
export UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD NCCL_NVLS_ENABLE=0
R=/tmp/r; mkdir -p $R
ldd /tmp/b/uniprefill | grep -i cublas > $R/ldd_cublas.txt; echo "linked cublas lines: $(wc -l < $R/ldd_cublas.txt)"
timeout 300 /tmp/b/uniprefill_cuda_tests --gtest_filter='-NcclBoundedWait*' > $R/cuda_tests.txt 2>&1; echo "suite rc $?" >> $R/cuda_tests.txt
timeout 60 /tmp/b/uniprefill_cuda_tests --gtest_filter='NcclBoundedWait*' > $R/tests_wait.txt 2>&1; echo "wait rc $?" >> $R/tests_wait.txt
grep -E "PASSED|FAILED|rc " $R/cuda_tests.txt | head; tail -2 $R/tests_wait.txt
/usr/bin/time -v /tmp/b/uniprefill bench gpu-prefill --attention auto --contexts 32768 --keep-ratios 0.5 --repeats 2 --json $R/prefill32k.json > $R/prefill32k.txt 2> $R/prefill32k.time; tail -15 $R/prefill32k.txt; grep -E "Maximum resident" $R/prefill32k.time
xz -9 $R/cuda_tests.txt
tar -C /tmp -cJf $OUT/r.tar.xz r
