#!/usr/bin/env bash
# RAN in the 33rd session (H100, code of 6cd3c51, session33/README.md): segment-wise dense was
# slower (1.184x against 1.164x whole; 4 x 32K 1.228x against 1.159x) and is opt-in since. Then
# `chunked` ran dense segment-wise and `chunkedlayers` all-layer chunks; today those are the
# variants `chunkedsegments` and `chunked`, which the loop below now names.
# 33rd session, first call: does running a dense prompt's layers in segments close issue 18's
# last gap? The 130K prompt among 16 shorts runs 1.175x whole chunked (H100, call AL) because past
# 32K of prefix the step budget leaves its chunks 256-580 rows of all 32 layers: GEMMs at 256 rows
# (519 against 755 TFLOP/s), ~500 small kernels a forward, gaps (28th session's split). A
# UniPrefill prefill already runs segment-wise (a chunk covers one segment's layers, priced by
# its share), and UniPrefill at keep ratio 1 keeps every token, i.e. computes dense through the
# same segments (Llama-8B's default drop layers 7/11/15/19/23/27: seven segments, 4-7.5 layers),
# so a deep chunk of segment 1 can hold ~8x the rows in a step of the same price.
# The engine now does this for dense prefills (ServingOptions::dense_segment_chunks, without the
# selections' scoring). Served: whole (dense), chunked (budget 2048; dense, now segment-wise, and
# uniprefill:keep_ratio=1) and chunkedlayers (dense through every layer, as before), the mixed
# workload and 4 x 32K (long4, goal 1.15x: segments' shallow chunks hit the 8192-row cap).
# Predicted (mixed): chunked dense and keep 1 ~1.08-1.10x whole (GEMMs at 1-2K rows, several
# times fewer small kernels per prompt row-layer), keep 1 a little slower (its scoring and
# syncs); chunkedlayers ~1.17x (call AL). long4: within 1.15x for all.
# While the checkpoint is written (~170 s) the CUDA suite runs under the 32nd session's defaults
# (cut at 160 s if it is not done).
source "$(dirname "$0")/lib.sh"
call_begin
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv \
  > $OUT/gpu.txt
start_checkpoint
build_and_test "uniprefill uniprefill_cuda_tests" '*' 160
wait_checkpoint
echo "checkpoint ready at $(elapsed) s"
mem_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
kv=$([ "${mem_mib:-0}" -gt 100000 ] && echo 48GiB || echo 32GiB)
for run in "whole dense" "chunkedsegments dense,uniprefill:keep_ratio=1" "chunked dense"; do
  read -r variant modes <<< "$run"
  left=$(( 585 - $(elapsed) ))
  [ $left -lt 60 ] && { echo "out of time before $variant"; break; }
  MODES="$modes" KV_MEM=$kv BUDGET=2048 PREFILL_ONLY=8192 WORKLOADS="mixed long4" \
    UP_CKPT=/tmp/l8b timeout $left bash scripts/gpu_serve_mixed.sh build-dev-new/uniprefill \
    /tmp/ar $variant >> $OUT/serve.txt 2>&1
  echo "$variant rc $? at $(elapsed) s"
done
grep -h "GPU under load\|peak GPU" $OUT/serve.txt
python3 tools/serve_summary.py /tmp/ar 2>&1 | grep -v "^ " | tee $OUT/summary.txt
rm -f /tmp/ar/memory_*.csv
tar -C /tmp -cJf $OUT/servers.tar.xz ar 2>/dev/null
pack_out
