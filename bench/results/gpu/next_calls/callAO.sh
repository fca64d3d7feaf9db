#!/usr/bin/env bash
# 33rd session, first call: the whole CUDA suite under the attention kernel's new defaults (group
# order, skipped unit rescale, pv_beside_exp; made the defaults in the 32nd session from calls AM
# and AN, whose tests ran before the change: the kernel's and the model paths' 37, all passing,
# and every choice bit-identical to the old launch). Builds uniprefill and uniprefill_cuda_tests
# (~3-4 min cold), then every CUDA test (~3 min; assets the machine lacks skipped). Predicted:
# all pass (the new launch is bit-identical to the old one on every problem the tests pose).
source "$(dirname "$0")/lib.sh"
call_begin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
build_and_test "uniprefill uniprefill_cuda_tests" '*' 360
grep -E "tests ran|SKIPPED \]" $OUT/tests.txt | head -8
pack_out
