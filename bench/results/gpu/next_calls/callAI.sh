#!/usr/bin/env bash
# Prepared in the 29th session (written after its device time was spent): GpuClockSampler
# (core/gpu_clock_sampler.h, NVML loaded at run time) has run only against a stand-in NVML. This
# call runs its CUDA test (GpuClockSamplerCudaTest.*: NVML finds the context's GPU by PCI bus id,
# a plausible SM clock and power while GEMMs run) and then call AF's comparison, whose
# `bench gpu-prefill` table now ends with each point's mean SM clock and power (JSON:
# sm_clock_mhz_mean / min / max, power_w_mean, clock_samples), beside nvidia-smi's sampling as a
# cross-check; between them the 8B layer GEMMs at served row counts (first vs fastest cuBLASLt
# proposal). Predicted (H100, as call AF): ours 32K ~1217 ms at ~1470 MHz / ~690 W, the same
# clock nvidia-smi reads within ~2%. Before: mkdir -p .gpu_deps/anchor && cp
# ../shared/bench/pytorch_anchor.py .gpu_deps/anchor/ (carry [".gpu_deps"]). ~6 min.
source "$(dirname "$0")/lib.sh"
call_begin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
UP_GPU_TARGETS="uniprefill uniprefill_cuda_tests" bash scripts/gpu_build.sh build build-dev-new \
  > /tmp/build.txt 2>&1
echo "build rc $? at $(elapsed) s"
export UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD
timeout 60 build-dev-new/uniprefill_cuda_tests --gtest_filter='GpuClockSampler*' > $OUT/tests.txt 2>&1
echo "tests rc $? at $(elapsed) s"; grep -E "clock \]|OK \]|FAILED|PASSED" $OUT/tests.txt
# The 8B layer's GEMMs at the rows served steps run, cuBLASLt's first proposal against its
# fastest (call X's table was lost to the 8-file limit): the served chunks' GEMMs ran 519 TFLOP/s
# at 256 rows against whole's 755 (28th session); is that the kernels' own rate at 256 rows?
timeout 120 build-dev-new/uniprefill_cuda_tests --gtest_also_run_disabled_tests \
  --gtest_filter='CudaGemmAlgoThroughputTest.DISABLED_HeuristicAgainstFastestAtServedRows' \
  > $OUT/gemm_rows.txt 2>&1
echo "gemm rows rc $? at $(elapsed) s"; grep -E "^(gemm|layer|qkv|o |gate_up|down)" $OUT/gemm_rows.txt | head -60
prefill_beside_anchor
pack_out
