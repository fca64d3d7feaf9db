#!/usr/bin/env bash
# Prepared in the 26th session, right after call V on the same machine: the mixed workload (the
# 130K prompt among 16 shorts) whole and chunked at the defaults, with the step trace's phases
# (PHASES=1), so that call V's phase split of the prompt alone can be set beside the prompt's
# among decodes: the difference is the shorts' work, phase by phase (their decodes' attention,
# LM head in finish, their GEMM rows). Predicted: chunked/whole as call U's 1.17x (H100) or the
# 24th session's 1.155x (H200), within ~1% (the event records cost ~0.1-0.2 ms a forward).
source "$(dirname "$0")/lib.sh"
call_begin
kernels=${KERNELS:-1}  # 0 when call V found no CUPTI (its tests.txt says "kernel view: 0")
start_checkpoint
ensure_uniprefill
wait_checkpoint
left=$(( 585 - $(elapsed) ))
KV_MEM=32GiB TRACE=1 PHASES=1 KERNELS=$kernels BUDGET=2048 PREFILL_ONLY=8192 WORKLOADS="mixed" UP_CKPT=/tmp/l8b \
  timeout $left bash scripts/gpu_serve_mixed.sh build-dev-new/uniprefill /tmp/w whole chunked \
  > $OUT/serve_mixed.txt 2>&1
echo "serve rc $? at $(elapsed) s"
rm -f /tmp/w/memory_*.csv
python3 tools/serve_summary.py /tmp/w 2>&1 | grep -v "^ " | head -8 | tee $OUT/summary.txt
python3 tools/trace_forward_excess.py /tmp/w/trace_chunked.jsonl --whole /tmp/w/trace_whole.jsonl \
  --prompt-tokens 130000 | tee $OUT/phases.txt
tar -C /tmp -cJf $OUT/servers_mixed.tar.xz w
