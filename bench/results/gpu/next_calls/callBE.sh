#!/usr/bin/env bash
# 38th session (~1 min): the kept-queries model tests on a model whose drop is not its last layer
# (call BD's tiny-GGUF versions never reached the new path: their drop is the last layer), then
# the keep-all test again with UNIPREFILL_CUDA_KEPT_QUERIES_ON_FLASH=1, which must FAIL (flash
# attention's rounding for the gathered rows against the Hopper kernel's dense): proof the test
# sees the path.
source "$(dirname "$0")/lib.sh"
call_begin
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
ensure_uniprefill
export UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD
timeout 120 build-dev-new/uniprefill_cuda_tests --gtest_filter='CudaKeptQueriesTest.*' \
  > $OUT/tests.txt 2>&1
echo "tests rc $? at $(elapsed) s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|kept queries on our kernel|keep-all vs dense" $OUT/tests.txt
UNIPREFILL_CUDA_KEPT_QUERIES_ON_FLASH=1 timeout 60 build-dev-new/uniprefill_cuda_tests \
  --gtest_filter='CudaKeptQueriesTest.KeepAll*' > $OUT/tests_flash.txt 2>&1
echo "with the flash path: rc $? (1 expected) at $(elapsed) s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|keep-all vs dense" $OUT/tests_flash.txt
