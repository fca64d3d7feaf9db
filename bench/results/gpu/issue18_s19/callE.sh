#!/usr/bin/env bash
# 19th session, call E: chunks' keys priced in whole query tiles (SegmentCost::query_tile_rows;
# deep chunks end at a tile's end) against per-row prices (UNIPREFILL_CUDA_UNTILED_PRICE=1), one
# binary; both served workloads whole, chunked (tiles) and chunkeduntiled, with step traces; the
# prefix and chunk CUDA tests (cuDNN's split no longer disables our kernel's).
t0=$(date +%s)
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv > $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD
( python3 tools/make_synthetic_checkpoint.py --preset llama-3.1-8b --dtype bf16 --out /tmp/l8b \
    > /tmp/ckpt.txt 2>&1; echo "checkpoint rc $? at $(( $(date +%s) - t0 )) s" ) &
ck=$!
UP_GPU_TARGETS="uniprefill uniprefill_cuda_tests" bash scripts/gpu_build.sh build /tmp/bld > /tmp/build.log 2>&1
echo "build rc $? at $(( $(date +%s) - t0 )) s"; grep -E " error|cuDNN attention" /tmp/build.log | head -3
timeout 60 /tmp/bld/uniprefill_cuda_tests \
  --gtest_filter='WgmmaAttention*:CudaPrefixInPlace*:*SegmentChunk*:*Split*' > $OUT/cuda_tests.log 2>&1
echo "tests rc $? at $(( $(date +%s) - t0 )) s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|SKIPPED \] [0-9]" $OUT/cuda_tests.log | head -12
xz -9 $OUT/cuda_tests.log
wait $ck
tail -1 /tmp/ckpt.txt
left=$(( 585 - ($(date +%s) - t0) ))
TRACE=1 BUDGET=2048 PREFILL_ONLY=8192 WORKLOADS="long4 mixed" UP_CKPT=/tmp/l8b \
  timeout $left bash scripts/gpu_serve_mixed.sh /tmp/bld/uniprefill /tmp/s whole chunked chunkeduntiled > $OUT/serve.txt 2>&1
echo "serve rc $? at $(( $(date +%s) - t0 )) s"
grep -E "peak GPU memory" $OUT/serve.txt
rm -f /tmp/s/memory_*.csv
tar -C /tmp -cJf $OUT/s.tar.xz s
python3 tools/serve_summary.py /tmp/s
