#!/usr/bin/env bash
# 17th session, call B. Call A's build had no cuDNN headers (.gpu_deps fetched before setup.sh had
# put the cuDNN frontend in third_party/), so its chunks ran the cache kernel: 32K in 2048-row
# chunks 18.7x the whole prefill. That is what any server without cuDNN got; PrefixPrefill now
# runs such chunks on our Hopper kernel. This call: the tree with that change built with cuDNN,
# the CUDA tests of chunks and the kernel, bench gpu-prefill chunked with --attention ours (no
# cuDNN) and auto, then the served workloads (whole and chunked, default attention).
t0=$(date +%s)
mkdir -p $OUT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,temperature.gpu --format=csv > $OUT/gpu.txt
export NCCL_NVLS_ENABLE=0 UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD
( python3 tools/make_synthetic_checkpoint.py --preset llama-3.1-8b --dtype bf16 --out /tmp/l8b \
    > /tmp/ckpt.txt 2>&1; echo "checkpoint rc $? at $(( $(date +%s) - t0 )) s" ) &
ck=$!
UP_GPU_TARGETS="uniprefill uniprefill_cuda_tests" bash scripts/gpu_build.sh build /tmp/bld > /tmp/build.log 2>&1
echo "build rc $? at $(( $(date +%s) - t0 )) s"; grep -E " error|C7513|C7515|cuDNN|cudnn" /tmp/build.log | head -5
timeout 100 /tmp/bld/uniprefill_cuda_tests \
  --gtest_filter='CudaPrefixInPlace*:*SegmentChunk*:WgmmaAttention*' \
  > $OUT/cuda_tests.log 2>&1
echo "tests rc $? at $(( $(date +%s) - t0 )) s"
grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]|SKIPPED \] [0-9]|relative L2|in place" $OUT/cuda_tests.log | head -30
xz -9 $OUT/cuda_tests.log
wait $ck
tail -1 /tmp/ckpt.txt
for att in ours auto; do
  timeout 75 /tmp/bld/uniprefill bench gpu-prefill --shape llama-3.1-8b --contexts 32768 --keep-ratios 0.5 \
    --repeats 3 --chunk-tokens 2048 --serving-graphs --attention $att --commit WORKTREE \
    > $OUT/chunks_32k_$att.txt 2>&1
  echo "gpu-prefill $att rc $? at $(( $(date +%s) - t0 )) s"; grep -E "^[0-9]|chunked / whole" $OUT/chunks_32k_$att.txt
done
cat $OUT/chunks_32k_ours.txt >> $OUT/chunks_32k_auto.txt && rm $OUT/chunks_32k_ours.txt
# At most 8 files come back: the servers' JSON and logs travel as one archive.
left=$(( 575 - ($(date +%s) - t0) ))
BUDGET=2048 PREFILL_ONLY=8192 WORKLOADS="long4 mixed" UP_CKPT=/tmp/l8b \
  timeout $left bash scripts/gpu_serve_mixed.sh /tmp/bld/uniprefill /tmp/s whole chunked > $OUT/serve.txt 2>&1
echo "serve rc $? at $(( $(date +%s) - t0 )) s"
rm -f /tmp/s/memory_*.csv
tar -C /tmp -cJf $OUT/s.tar.xz s
python3 tools/serve_summary.py /tmp/s
