#!/usr/bin/env bash
# 18th session, call B: our Hopper kernel splits the keys of chunks whose CTAs fill the SMs
# poorly (WgmmaPrefixSplits) instead of handing them to cuDNN's 8 pieces. The kernel and chunk
# tests; 128K in 384-row chunks without the server, new (default) and old
# (UNIPREFILL_CUDA_SPLIT_ON_CUDNN=1) in one binary; the mixed workload whole, chunked (new) and
# chunkedcudnnsplit (old), with the step trace.
t0=$(date +%s)
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv > $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD
( python3 tools/make_synthetic_checkpoint.py --preset llama-3.1-8b --dtype bf16 --out /tmp/l8b \
    > /tmp/ckpt.txt 2>&1; echo "checkpoint rc $? at $(( $(date +%s) - t0 )) s" ) &
ck=$!
UP_GPU_TARGETS="uniprefill uniprefill_cuda_tests" bash scripts/gpu_build.sh build /tmp/bld > /tmp/build.log 2>&1
echo "build rc $? at $(( $(date +%s) - t0 )) s"; grep -E " error|cuDNN attention|C7515" /tmp/build.log | head -3
timeout 100 /tmp/bld/uniprefill_cuda_tests \
  --gtest_filter='WgmmaAttention*:CudaPrefixInPlace*:*SegmentChunk*' > $OUT/cuda_tests.log 2>&1
echo "tests rc $? at $(( $(date +%s) - t0 )) s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|SKIPPED \] [0-9]|split-KV from|relative L2" $OUT/cuda_tests.log | head -24
xz -9 $OUT/cuda_tests.log
wait $ck
tail -1 /tmp/ckpt.txt
for v in ours cudnn; do
  env_split=(); [ $v = cudnn ] && env_split=(UNIPREFILL_CUDA_SPLIT_ON_CUDNN=1)
  env "${env_split[@]}" timeout 70 /tmp/bld/uniprefill bench gpu-prefill --shape llama-3.1-8b --contexts 131072 \
    --keep-ratios "" --repeats 1 --chunk-tokens 384 --serving-graphs --commit WORKTREE > /tmp/c_$v.txt 2>&1
  echo "gpu-prefill c384 split on $v rc $? at $(( $(date +%s) - t0 )) s"
  grep -E "^[0-9]|chunked / whole" /tmp/c_$v.txt
  { echo "== split on $v"; cat /tmp/c_$v.txt; } >> $OUT/chunks_128k.txt
done
left=$(( 585 - ($(date +%s) - t0) ))
TRACE=1 BUDGET=2048 PREFILL_ONLY=8192 WORKLOADS="mixed" UP_CKPT=/tmp/l8b \
  timeout $left bash scripts/gpu_serve_mixed.sh /tmp/bld/uniprefill /tmp/s whole chunked chunkedcudnnsplit > $OUT/serve.txt 2>&1
echo "serve rc $? at $(( $(date +%s) - t0 )) s"
rm -f /tmp/s/memory_*.csv
tar -C /tmp -cJf $OUT/s.tar.xz s
python3 tools/serve_summary.py /tmp/s
