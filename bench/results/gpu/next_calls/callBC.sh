#!/usr/bin/env bash
# For the 38th session (~6 min; written in the 37th without device time left): whether a prefill's
# GEMMs run faster as row blocks (UNIPREFILL_CUDA_GEMM_MAX_ROWS, CudaContext::SetGemmMaxRows).
# Calls AZ and BA timed cuBLASLt's gate | up GEMM at 726 / 680 TFLOP/s at 32K rows and 781 / 663 at
# 4K (the power limit's clock moved between calls), so first the four 8B GEMMs at 32K rows whole
# against blocks of 16K / 8K / 4K / 2K with the arms interleaved (and the heuristic's other
# algorithms), then `bench gpu-prefill` 8B 32K / 128K with the fastest block size against whole
# GEMMs, arms new old old new, then the cuDNN anchor. Needs .gpu_deps/anchor/pytorch_anchor.py (the
# command copies it from .gpu_carry/anchor). Predicted: if blocks of 4K run the GEMMs at ~780
# against ~730 TFLOP/s, the 32K dense prefill ~-35 ms (GEMMs ~0.59 s of ~1.17 s), 128K ~-150 ms.
# The 8B checkpoint for callAV.sh (next, on the same warm machine) is written meanwhile (CPU and
# disk only: numpy), and waited for at the end.
source "$(dirname "$0")/lib.sh"
call_begin
start_checkpoint
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $OUT/gpu.txt
cat $OUT/gpu.txt
ensure_uniprefill
export UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD
timeout 150 build-dev-new/uniprefill_cuda_tests --gtest_also_run_disabled_tests \
  --gtest_filter='CudaGemmRowBlocksTest.*:CudaGemmAlgoThroughputTest.DISABLED_PrefillRows*' \
  > $OUT/gemm_rows.txt 2>&1
echo "gemm tests rc $? at $(elapsed) s"
grep -E "^\{|^\[  PASSED|^\[  FAILED|FAILED  \]" $OUT/gemm_rows.txt
best=$(python3 - $OUT/gemm_rows.txt <<'PY'
import json, sys
total = {}
for line in open(sys.argv[1]):
    if line.startswith('{"gemm"'):
        j = json.loads(line)
        for k, v in j.items():
            if k.startswith("blocks_") and k.endswith("_ms"):
                total[k] = total.get(k, 0) + v
print(min(total, key=total.get).split("_")[1] if total else 0)
PY
)
echo "fastest row blocks over the four GEMMs: $best (0: whole)"
[ "$best" = "0" ] && best=4096  # still measure one block size end to end
prefill_ab UNIPREFILL_CUDA_GEMM_MAX_ROWS $best 0
wait_checkpoint
ls /tmp/l8b | head -3
pack_out
