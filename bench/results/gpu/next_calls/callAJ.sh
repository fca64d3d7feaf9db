#!/usr/bin/env bash
# 30th session, first call: the Hopper attention kernel's two new launch choices, measured and
# tested, and what call AI was to run (the clock sampler's CUDA test, the 8B GEMMs at served rows).
#   1. tools/gpu/wgmma_attention_probe.cu `ab`: 32 / 8 heads, d 128, causal 8K / 32K / 128K; the
#      default (overlap / 3 stages, head-major order) against the kv-group longest-first order,
#      the skipped unit rescale, both, the pv_beside_exp schedule and it with both, interleaved
#      rounds of 10 launches, medians, each output compared bit for bit with the default's; plus
#      its `check` of every variant against a naive f32 reference. Built with nvcc alone while
#      the project builds beside it.
#   2. The CUDA tests of the kernel and of the model paths that launch it, the new bit-identity
#      tests among them, and GpuClockSamplerCudaTest.
#   3. CudaGemmAlgoThroughputTest.DISABLED_HeuristicAgainstFastestAtServedRows.
# Predicted (H100 at its power limit): the order 0.5-1.5% faster at 32K, less at 128K (the
# head-major launch ends on its last head's tiles, up to one heavy tile of imbalance in ~62
# waves); the skip 1-3% (64 multiplies a thread less between two PV GEMMs in most tiles past
# the first few); pv_beside_exp 0-4% (in the default's SASS ptxas waits for PV before every
# exponential; in pv_beside_exp's the 8 PV wgmmas interleave with the 64 MUFU.EX2 of an unmasked
# tile); all variants bit-identical. ~5 min.
source "$(dirname "$0")/lib.sh"
call_begin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
( UP_GPU_TARGETS="uniprefill uniprefill_cuda_tests" bash scripts/gpu_build.sh build build-dev-new \
    > /tmp/build.txt 2>&1; echo "build rc $? at $(elapsed) s" > /tmp/build_rc.txt ) &
build_pid=$!
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc tools/gpu/wgmma_attention_probe.cu \
  src/ops/cuda/sm90/flash_attention_wgmma.cu -o /tmp/probe > /tmp/probe_build.txt 2>&1
echo "probe build rc $? at $(elapsed) s"
/tmp/probe ab 8192 32768 131072 > $OUT/probe_ab.txt 2>&1
echo "probe ab rc $? at $(elapsed) s"; cat $OUT/probe_ab.txt
/tmp/probe check > $OUT/probe_check.txt 2>&1
echo "probe check rc $? at $(elapsed) s"; grep -E "o3|check:" $OUT/probe_check.txt
wait $build_pid; cat /tmp/build_rc.txt; tail -3 /tmp/build.txt
export UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD
timeout 240 build-dev-new/uniprefill_cuda_tests --gtest_brief=1 \
  --gtest_filter='GpuClockSampler*:WgmmaAttention*:CudaPrefixInPlace*:CudaModel*:CudaRandomModel*' \
  > $OUT/tests.txt 2>&1
echo "tests rc $? at $(elapsed) s"; grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|clock|tests ran" $OUT/tests.txt
timeout 120 build-dev-new/uniprefill_cuda_tests --gtest_also_run_disabled_tests \
  --gtest_filter='CudaGemmAlgoThroughputTest.DISABLED_HeuristicAgainstFastestAtServedRows' \
  > $OUT/gemm_rows.txt 2>&1
echo "gemm rows rc $? at $(elapsed) s"; grep -vE "^\[ (RUN|  ) " $OUT/gemm_rows.txt | head -60
pack_out
