#!/usr/bin/env bash
# For the 39th session (~5 min after a pack; written in the 38th without device time left):
# 1. The kept-queries model tests on a model whose drop is not its last layer (call BD's
#    tiny-GGUF versions never reached the new path: their drop is the last layer), then the
#    keep-all one with UNIPREFILL_CUDA_KEPT_QUERIES_ON_FLASH=1, which must FAIL (flash attention's
#    rounding for the gathered rows against the Hopper kernel's dense): proof the test sees it.
# 2. The residual added in the output projections' epilogue (UNIPREFILL_CUDA_RESIDUAL_IN_GEMM=1,
#    opt-in, never run): its op and model tests, then `bench gpu-prefill` 8B 32K / 128K dense and
#    keep 0.5 with it against without, arms new old old new, and the cuDNN anchor. Predicted:
#    dense 32K -5..-11 ms (two [32K, 4096] bf16 tensors fewer read and written per layer by the
#    norms, ~0.17 ms each, less what the GEMMs' epilogue spends reading the residual), 128K
#    -20..-45 ms; if it wins, make it the default (CudaDiagnostics, the mutation's expectation).
source "$(dirname "$0")/lib.sh"
call_begin
ensure_uniprefill
export UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD
timeout 150 build-dev-new/uniprefill_cuda_tests \
  --gtest_filter='CudaKeptQueriesTest.*:CudaGemmAccumulateTest.*:CudaResidualInGemmTest.*:CudaDiagnosticsTest.*' \
  > $OUT/tests.txt 2>&1
echo "tests rc $? at $(elapsed) s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|kept queries on our kernel|keep-all vs dense|residual in the GEMM" $OUT/tests.txt
UNIPREFILL_CUDA_KEPT_QUERIES_ON_FLASH=1 timeout 60 build-dev-new/uniprefill_cuda_tests \
  --gtest_filter='CudaKeptQueriesTest.KeepAll*' > $OUT/tests_flash.txt 2>&1
echo "keep-all with the flash path: rc $? (1 expected) at $(elapsed) s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|keep-all vs dense" $OUT/tests_flash.txt
prefill_ab UNIPREFILL_CUDA_RESIDUAL_IN_GEMM 1 0
pack_out
