#!/usr/bin/env bash
# 18th session, call A: where the 130K prompt's chunked time goes beside 16 decoding shorts.
# The CUDA tests of chunks and the kernel (8753fed's HopperKernelCovers refactor), 128K in
# 512- and 1024-row chunks without the server (the sizes deep chunks get beside decodes), then the
# mixed workload whole and chunked with the step trace (TRACE=1).
t0=$(date +%s)
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv > $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD
( python3 tools/make_synthetic_checkpoint.py --preset llama-3.1-8b --dtype bf16 --out /tmp/l8b \
    > /tmp/ckpt.txt 2>&1; echo "checkpoint rc $? at $(( $(date +%s) - t0 )) s" ) &
ck=$!
UP_GPU_TARGETS="uniprefill uniprefill_cuda_tests" bash scripts/gpu_build.sh build /tmp/bld > /tmp/build.log 2>&1
echo "build rc $? at $(( $(date +%s) - t0 )) s"; grep -E " error|cuDNN attention" /tmp/build.log | head -3
timeout 100 /tmp/bld/uniprefill_cuda_tests \
  --gtest_filter='CudaPrefixInPlace*:*SegmentChunk*:WgmmaAttention*:*Wgmma*' > $OUT/cuda_tests.log 2>&1
echo "tests rc $? at $(( $(date +%s) - t0 )) s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|SKIPPED \] [0-9]" $OUT/cuda_tests.log | head -20
xz -9 $OUT/cuda_tests.log
wait $ck
tail -1 /tmp/ckpt.txt
for c in 512 1024; do
  timeout 70 /tmp/bld/uniprefill bench gpu-prefill --shape llama-3.1-8b --contexts 131072 --keep-ratios "" \
    --repeats 1 --chunk-tokens $c --serving-graphs --commit WORKTREE >> $OUT/chunks_128k.txt 2>&1
  echo "gpu-prefill c$c rc $? at $(( $(date +%s) - t0 )) s"
done
grep -E "^[0-9]|chunked / whole" $OUT/chunks_128k.txt
left=$(( 580 - ($(date +%s) - t0) ))
TRACE=1 BUDGET=2048 PREFILL_ONLY=8192 WORKLOADS="mixed" UP_CKPT=/tmp/l8b \
  timeout $left bash scripts/gpu_serve_mixed.sh /tmp/bld/uniprefill /tmp/s whole chunked > $OUT/serve.txt 2>&1
echo "serve rc $? at $(( $(date +%s) - t0 )) s"
rm -f /tmp/s/memory_*.csv
tar -C /tmp -cJf $OUT/s.tar.xz s
python3 tools/serve_summary.py /tmp/s
