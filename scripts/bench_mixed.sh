#!/usr/bin/env bash
# Mixed-workload serving benchmark on the default model (Gemma 3 270M) on this machine's CPU: short
# chat requests arriving as a Poisson stream with one long document landing among them, served
# with chunked prefill (a small step budget) and without (--no-chunked-prefill), dense vs
# UniPrefill, in one invocation. Writes docs/results/mixed_gemma3_270m_{chunked,whole}_{dense,
# uniprefill}.json, prints the tables and the server's peak resident memory after each mode.
# Chunked, a dense prefill runs every layer chunk by chunk and a UniPrefill prefill runs segment by
# segment (docs/design.md section 2).
#   bash scripts/bench_mixed.sh [extra serve flags, e.g. --threads 2]
# The short requests generate long enough (SHORT_OUT tokens) to be decoding while the long prompt
# is prefilled: their ITL then shows whether that prefill stalls them.
# Environment: LONG (long prompt tokens, default 16384), BUDGET (chunked step budget, default
# 256), SHORTS (short requests, default 6), RATE (short arrivals/s, default 1), SHORT_OUT (tokens
# each short request generates, default 600), VARIANTS (default "chunked whole"; also
# chunkedsegments: chunked with --dense-segment-chunks; default: no budget flag, the server's
# measured one; flops: the measured budget with cached keys priced by their FLOPs,
# --attention-slowdown 1; fixed: --target-step-ms 0), MODES (default "dense uniprefill"), OUT
# (the JSON folder, default docs/results), CLI (a built uniprefill binary; default: build
# ./build with scripts/build.sh and use it).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${CLI:-}" ]; then
  bash scripts/build.sh >/dev/null
  CLI=./build/uniprefill
fi
out=${OUT:-docs/results}
long=${LONG:-16384}
budget=${BUDGET:-256}
shorts=${SHORTS:-6}
rate=${RATE:-1}
short_out=${SHORT_OUT:-600}
port=${PORT:-18081}
mkdir -p bench/out "$out"
for variant in ${VARIANTS:-chunked whole}; do
  if [ "$variant" = chunked ]; then
    flags=(--max-batched-tokens "$budget")
  elif [ "$variant" = chunkedsegments ]; then
    flags=(--max-batched-tokens "$budget" --dense-segment-chunks)
  elif [ "$variant" = default ]; then
    flags=()  # the server's own budget: on the CPU measured at start (--target-step-ms)
  elif [ "$variant" = flops ]; then
    flags=(--attention-slowdown 1)  # the measured budget, cached keys priced by FLOPs (as before)
  elif [ "$variant" = fixed ]; then
    flags=(--target-step-ms 0)  # the fixed CPU default of 8192 tokens a step
  else
    flags=(--no-chunked-prefill)
  fi
  "$CLI" serve --port "$port" --kv-cache-memory 4GiB --quiet ${flags[@]+"${flags[@]}"} "$@" \
    2> "bench/out/mixed_server_$variant.log" &
  server=$!
  trap 'kill $server 2>/dev/null || true' EXIT
  for _ in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    sleep 1
  done
  # One bench serve per mode, so the server's peak resident memory (VmHWM, which only grows) is
  # read after the dense run alone and again after the UniPrefill run.
  for mode in ${MODES:-dense uniprefill}; do
    echo "== $variant prefill (${flags[*]-}), $mode"
    "$CLI" bench serve --url "http://127.0.0.1:$port" --rate "$rate" -n "$shorts" \
      --prompt-tokens 256 --output-tokens "$short_out" --long-prompt-tokens "$long" \
      --long-requests 1 --long-output-tokens 4 --slo-ttft-ms 2000 --slo-itl-ms 1000 \
      --modes "$mode" --warmup 1 -o "$out/mixed_gemma3_270m_${variant}_$mode.json"
    echo "server peak resident memory after the $mode run: $(grep VmHWM /proc/$server/status)"
  done
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
done
