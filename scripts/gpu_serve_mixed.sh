#!/usr/bin/env bash
# Chunked prefill served on the GPU (docs/serving.md): the bf16 Llama-3.1-8B-shaped checkpoint
# (tools/make_synthetic_checkpoint.py) under `serve --device cuda`, one server per variant, dense
# and UniPrefill requests against each, one or more of these workloads:
#   long4  4 concurrent 32K-token prompts, 64 output tokens each (closed loop)
#   mixed  16 short requests (512-token prompts, 128 output tokens) arriving at 2/s with one
#          130,000-token prompt (the 128K context less room) landing among them (4 output tokens)
#   long1  the mixed workload's 130,000-token prompt alone (4 output tokens): chunked against
#          whole without the shorts' work in its steps (chunked steps then take PREFILL_ONLY);
#          no warmup request, so that each trace opens with the dense prompt's forwards
#   decode32    issue 17's decode goal: 32 concurrent 1K-token prompts, 128 output tokens, dense
#   decode4x32k 4 concurrent 32K-token prompts, 128 output tokens, dense
# Variants: chunked (--max-batched-tokens BUDGET, default 2048: chunks are charged for the keys
# they attend; --prefill-only-tokens PREFILL_ONLY, default 8192, for steps without decodes;
# split-KV for short chunks over deep prefixes, the default; chunks read their cached prefix in
# place), chunkedcopy (chunked's flags, the prefix copied out of the pool and priced, as before
# caches laid layers out in runs: UNIPREFILL_CUDA_PREFIX_COPY=1), chunkedcudnnsplit (chunked's
# flags, chunks our Hopper kernel runs split on cuDNN as before it split keys itself:
# UNIPREFILL_CUDA_SPLIT_ON_CUDNN=1), chunkeduntiled (chunked's flags, chunks' keys priced per
# row instead of per whole query tile, as before: UNIPREFILL_CUDA_UNTILED_PRICE=1),
# chunkeddecoderows (chunked's flags, a decode costing the budget its row only, its keys
# unpriced, as before: UNIPREFILL_CUDA_DECODES_AS_ROWS=1), chunkednofloor (chunked's flags,
# layers that only a step's decodes run not priced at their weights' stream, as before the 23rd
# session: UNIPREFILL_CUDA_WEIGHT_FLOOR=0), chunkedpieces (chunked's flags, chunks
# of less than a query tile allowed beside another prompt's, as before:
# UNIPREFILL_CUDA_SMALL_PIECES=1), chunkedaligned (chunked's flags, a step's rows aligned to the
# GEMMs' 128-row tiles: UNIPREFILL_CUDA_ALIGN_STEP_ROWS=1, not yet the default;
# chunkedalignedonelaunch adds UNIPREFILL_CUDA_PREFIX_ONE_LAUNCH=1), chunkedtuned (chunked's
# flags, the GEMMs' algorithms tuned per weight shape and 64-row bucket at start-up:
# UNIPREFILL_CUDA_GEMM_TUNE=1, not yet the default), chunkedovershoot (chunked's flags, a step
# beside decodes may run up to 15% over its budget for one more query tile of a deep chunk where
# that lands nearer the budget: UNIPREFILL_CUDA_TILE_OVERSHOOT=0.15, not yet the default;
# chunkedovershoottuned adds UNIPREFILL_CUDA_GEMM_TUNE=1), chunkedonelaunch (chunked's
# flags, the chunks of a step's
# prompts in one launch of our attention kernel: UNIPREFILL_CUDA_PREFIX_ONE_LAUNCH=1, not yet the
# default), nosplit (the same budget, no prefill-only budget, --gpu-prefix-split 0: the
# previous session's server), chunkedrows (the budget counting rows only,
# --budget-counts-rows), chunkedsegments (chunked's flags, a dense prefill too long for a step
# run segment by segment: --dense-segment-chunks, slower in the 33rd session's call AR), whole
# (--no-chunked-prefill) and chunkedsync (chunked's flags with
# the previous session's backend behaviour: a host sync after every forward and chunks priced
# by FLOPs alone, UNIPREFILL_CUDA_SYNC_EVERY_FORWARD=1 and UNIPREFILL_CUDA_ATTENTION_SLOWDOWN=1;
# src/backend/cuda/cuda_diagnostics.h).
# KV_MEM: the servers' --kv-cache-memory (default 48GiB, the H200's; 32GiB on an H100, where
# the whole 130K prefill beside 48 GiB of KV would not fit its 78 GiB).
# TRACE=1: each server writes its forwards' timeline to OUTDIR/trace_<variant>.jsonl; PHASES=1
# with it splits each forward's GPU time by walk phase (UNIPREFILL_CUDA_STEP_TRACE_PHASES=1;
# tools/trace_forward_excess.py --whole sets the chunked forwards' phases against whole's);
# KERNELS=1 adds each forward's kernels from CUPTI (UNIPREFILL_CUDA_STEP_TRACE_KERNELS=1: its GPU
# time busy in them and idle between them).
# MODES: the request modes each workload sends (default dense,uniprefill; decode workloads dense).
# Each server's GPU memory, SM clock and power are sampled every 100 ms (nvidia-smi); the peak
# memory and, over the samples above 200 W, the mean clock and power are printed per run.
#   bash scripts/gpu_serve_mixed.sh CLI OUTDIR [VARIANT...]     (on the GPU machine)
# CLI is the uniprefill binary; OUTDIR receives serve_<variant>_<workload>.json, server logs and
# memory samples. The checkpoint is written once to $UP_CKPT (default /tmp/l8b).
set -euo pipefail
cli=${1:?usage: gpu_serve_mixed.sh CLI OUTDIR [VARIANT...]}
out=${2:?usage: gpu_serve_mixed.sh CLI OUTDIR [VARIANT...]}
shift 2
variants=${*:-whole chunked}
budget=${BUDGET:-2048}
prefill_only=${PREFILL_ONLY:-8192}
ckpt=${UP_CKPT:-/tmp/l8b}
port=${PORT:-18090}
workloads=${WORKLOADS:-long4 mixed}
mkdir -p "$out"
if [ ! -f "$ckpt/config.json" ]; then
  t0=$(date +%s)
  python3 tools/make_synthetic_checkpoint.py --preset llama-3.1-8b --dtype bf16 --out "$ckpt"
  echo "checkpoint written in $(( $(date +%s) - t0 )) s"
fi
# The chunked variants: the environment each adds to chunked's (cuda_diagnostics.h).
declare -A chunked_env=(
  [chunked]=""
  [chunkedcopy]="UNIPREFILL_CUDA_PREFIX_COPY=1"
  [chunkedcudnnsplit]="UNIPREFILL_CUDA_SPLIT_ON_CUDNN=1"
  [chunkeduntiled]="UNIPREFILL_CUDA_UNTILED_PRICE=1"
  [chunkeddecoderows]="UNIPREFILL_CUDA_DECODES_AS_ROWS=1"
  [chunkednofloor]="UNIPREFILL_CUDA_WEIGHT_FLOOR=0"
  [chunkedpieces]="UNIPREFILL_CUDA_SMALL_PIECES=1"
  [chunkedonelaunch]="UNIPREFILL_CUDA_PREFIX_ONE_LAUNCH=1"
  [chunkedaligned]="UNIPREFILL_CUDA_ALIGN_STEP_ROWS=1"
  [chunkedalignedonelaunch]="UNIPREFILL_CUDA_ALIGN_STEP_ROWS=1 UNIPREFILL_CUDA_PREFIX_ONE_LAUNCH=1"
  [chunkedtuned]="UNIPREFILL_CUDA_GEMM_TUNE=1"
  [chunkedovershoot]="UNIPREFILL_CUDA_TILE_OVERSHOOT=0.15"
  [chunkedovershoottuned]="UNIPREFILL_CUDA_TILE_OVERSHOOT=0.15 UNIPREFILL_CUDA_GEMM_TUNE=1"
  [chunkedsync]="UNIPREFILL_CUDA_SYNC_EVERY_FORWARD=1 UNIPREFILL_CUDA_ATTENTION_SLOWDOWN=1"
)
for variant in $variants; do
  env_vars=()
  [ "${TRACE:-0}" = 1 ] && env_vars+=("UNIPREFILL_CUDA_STEP_TRACE=$out/trace_$variant.jsonl")
  [ "${TRACE:-0}" = 1 ] && [ "${PHASES:-0}" = 1 ] && env_vars+=("UNIPREFILL_CUDA_STEP_TRACE_PHASES=1")
  [ "${TRACE:-0}" = 1 ] && [ "${KERNELS:-0}" = 1 ] && env_vars+=("UNIPREFILL_CUDA_STEP_TRACE_KERNELS=1")
  if [[ -v chunked_env[$variant] ]]; then  # chunked's flags, and what the variant changes
    flags=(--max-batched-tokens "$budget" --prefill-only-tokens "$prefill_only")
    read -r -a extra <<< "${chunked_env[$variant]}"
    env_vars+=("${extra[@]}")
  else
    case "$variant" in
      # (the CUDA default prefill-only budget, 8192 since the 24th session, off as before)
      nosplit) flags=(--max-batched-tokens "$budget" --prefill-only-tokens 0 --gpu-prefix-split 0) ;;
      chunkedrows) flags=(--max-batched-tokens "$budget" --prefill-only-tokens 0 --budget-counts-rows) ;;
      whole) flags=(--no-chunked-prefill) ;;
      # dense prefills segment by segment (33rd session; slower on an H100, so opt-in)
      chunkedsegments) flags=(--max-batched-tokens "$budget" --prefill-only-tokens "$prefill_only"
                              --dense-segment-chunks) ;;
      *) echo "unknown variant $variant (${!chunked_env[*]} nosplit chunkedrows chunkedsegments whole)" >&2
         exit 2 ;;
    esac
  fi
  env "${env_vars[@]}" "$cli" serve --model "$ckpt" --device cuda --port "$port" \
    --kv-cache-memory "${KV_MEM:-48GiB}" --quiet "${flags[@]}" 2> "$out/server_$variant.log" &
  server=$!
  trap 'kill $server 2>/dev/null || true' EXIT
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    kill -0 "$server" 2>/dev/null || { tail -20 "$out/server_$variant.log"; exit 1; }
    sleep 1
  done
  for w in $workloads; do
    nvidia-smi --query-gpu=memory.used,clocks.sm,power.draw --format=csv,noheader,nounits \
      -lms 100 > "$out/memory_${variant}_$w.csv" &
    sampler=$!
    modes=${MODES:-dense,uniprefill}
    if [ "$w" = long4 ]; then
      args=(--concurrency 4 -n 4 --prompt-tokens 32768 --output-tokens 64 --warmup 1)
    elif [ "$w" = long1 ]; then
      args=(--concurrency 1 -n 1 --prompt-tokens 130000 --output-tokens 4 --warmup 0)
    elif [ "$w" = decode32 ]; then
      args=(--concurrency 32 -n 64 --prompt-tokens 1024 --output-tokens 128 --warmup 1)
      modes=dense
    elif [ "$w" = decode4x32k ]; then
      args=(--concurrency 4 -n 4 --prompt-tokens 32768 --output-tokens 128 --warmup 1)
      modes=dense
    else
      args=(--rate 2 -n 16 --prompt-tokens 512 --output-tokens 128 --long-prompt-tokens 130000
            --long-requests 1 --long-output-tokens 4 --slo-ttft-ms 2000 --slo-itl-ms 60
            --warmup 1)
    fi
    echo "== $variant (${flags[*]}), $w"
    "$cli" bench serve --url "http://127.0.0.1:$port" "${args[@]}" --modes "$modes" \
      -o "$out/serve_${variant}_$w.json"
    kill "$sampler" 2>/dev/null || true
    echo "peak GPU memory during $variant $w: $(cut -d, -f1 "$out/memory_${variant}_$w.csv" | sort -n | tail -1) MiB"
    # Under load the GPU holds its power limit by lowering the SM clock (28th session: 700 W,
    # 1.3-1.6 GHz sustained against 1.98 GHz boost on an H100), so runs compare at their clocks.
    awk -F', *' '$2 > 0 && $3 > 200 { n++; c += $2; p += $3 }
      END { if (n) printf "GPU under load during %s %s: %d samples, SM clock mean %.0f MHz, power mean %.0f W\n", v, w, n, c / n, p / n }' \
      v="$variant" w="$w" "$out/memory_${variant}_$w.csv"
  done
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
done
