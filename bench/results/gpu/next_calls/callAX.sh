#!/usr/bin/env bash
# 36th session (~3 min): after call AW, the last-row walk in sync-free forwards too and the
# prefix-in-place tests on the every-row walk: the whole CUDA suite from the pack's test binary,
# then the GPU mutant (gpu_last_rows_window_one_short: a fresh sliding prefill storing one entry
# too few for its last row), which CudaLastLayerRowsTest must catch. To fit a call's 64 MiB, the
# carry holds the test binary and libraries only (.gpu_carry without uniprefill.xz) and the
# mutant without its libraries (.gpu_mut; the pack's are a superset). FILTER narrows the suite
# (call AY: FILTER='CudaLastLayerRowsTest.*:CudaRandomModelTest.*' after cfb84e6, whose only
# changes were a preset option and that test).
source "$(dirname "$0")/lib.sh"
call_begin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > $OUT/gpu.txt
cat $OUT/gpu.txt
[ "$(cat .gpu_carry/sources)" = "$(bash scripts/source_digest.sh)" ] ||
  { echo "the pack is of other sources"; exit 1; }
mkdir -p build-dev-new /tmp/uniprefill-libs
tar -C /tmp/uniprefill-libs -xJf .gpu_carry/lib.tar.xz
xz -dc .gpu_carry/uniprefill_cuda_tests.xz > build-dev-new/uniprefill_cuda_tests
chmod +x build-dev-new/uniprefill_cuda_tests
export LD_LIBRARY_PATH=/tmp/uniprefill-libs/lib:${LD_LIBRARY_PATH:-}
export UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD
timeout 220 build-dev-new/uniprefill_cuda_tests --gtest_brief=1 --gtest_filter="${FILTER:-*}" \
  > $OUT/cuda_tests.txt 2>&1
echo "tests rc $? at $(elapsed) s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|SKIPPED \]|last rows only" $OUT/cuda_tests.txt | head -40
cp .gpu_carry/lib.tar.xz .gpu_mut/
bash scripts/gpu_mutations.sh run > $OUT/mutations.txt 2>&1
echo "mutations rc $? at $(elapsed) s"; cat $OUT/mutations.txt
