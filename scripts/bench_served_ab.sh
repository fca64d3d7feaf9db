#!/usr/bin/env bash
# Two uniprefill binaries served side by side in one invocation, rounds interleaved (old, new,
# then the peer), so that a change's served gain is measured on one machine in one hour
# (docs/benchmarks.md: ratios from one run). Each round starts each binary's server, sends one
# long prompt alone (`bench serve -n 1`) and reads its TTFT; then runs
# bench/bench_vs_llamacpp.py once at the same length (uniprefill `run` whole beside llama.cpp,
# which prefills in 512-token batches over its cache) as the peer's figure.
#
#   bash scripts/bench_served_ab.sh OLD_BIN NEW_BIN [SERVE_FLAG...]
#
# Environment: LONG (prompt tokens, 16384), ROUNDS (3), THREADS (2), PORT (18091), OUT
# (bench/out/served_ab). Prints every round and the medians; writes OUT/rounds.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: bench_served_ab.sh OLD_BIN NEW_BIN [SERVE_FLAG...]}
new=${2:?usage: bench_served_ab.sh OLD_BIN NEW_BIN [SERVE_FLAG...]}
shift 2
long=${LONG:-16384}
rounds=${ROUNDS:-3}
threads=${THREADS:-2}
port=${PORT:-18091}
out=${OUT:-bench/out/served_ab}
mkdir -p "$out"
: > "$out/rounds.jsonl"
served_ttft() {  # BIN NAME ROUND: one server, one long prompt alone; prints its TTFT in ms
  local bin=$1 name=$2 round=$3 server
  "$bin" serve --port "$port" --kv-cache-memory 4GiB --threads "$threads" --quiet "${@:4}" \
    2> "$out/server_${name}_$round.log" &
  server=$!
  for _ in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    sleep 1
  done
  "$new" bench serve --url "http://127.0.0.1:$port" -n 1 --concurrency 1 --prompt-tokens "$long" \
    --output-tokens 2 --warmup 0 --modes dense -o "$out/serve_${name}_$round.json" \
    > "$out/bench_${name}_$round.txt" 2>&1
  kill "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); \
print(round(d['modes'][0]['summary']['ttft_s']['p50'] * 1000, 1))" \
    "$out/serve_${name}_$round.json"
}
for r in $(seq 1 "$rounds"); do
  t_old=$(served_ttft "$old" old "$r" "$@")
  t_new=$(served_ttft "$new" new "$r" "$@")
  .venv/bin/python bench/bench_vs_llamacpp.py --lengths "$long" --threads "$threads" \
    --repeats 1 --decode-tokens 2 --ours-args="--uniprefill off" --out "$out/peer_$r.json" > "$out/peer_$r.txt" 2>&1
  peer=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['rows'][0]; \
print(round(r['prompt_tokens']/r['llama_cpp']['prefill_tok_s']*1000,1), \
round(r['prompt_tokens']/r['uniprefill']['prefill_tok_s']*1000,1))" "$out/peer_$r.json")
  read -r t_peer t_whole <<< "$peer"
  echo "{\"round\": $r, \"old_served_ttft_ms\": $t_old, \"new_served_ttft_ms\": $t_new, \"llama_cpp_prefill_ms\": $t_peer, \"ours_run_whole_prefill_ms\": $t_whole}" |
    tee -a "$out/rounds.jsonl"
done
python3 - "$out/rounds.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = {k: statistics.median(r[k] for r in rows) for k in rows[0] if k != "round"}
for k, v in med.items():
    print(f"median {k}: {v:.1f}")
print(f"new / old served TTFT: {med['new_served_ttft_ms'] / med['old_served_ttft_ms']:.3f} "
      f"(paired rounds: {statistics.median(r['new_served_ttft_ms'] / r['old_served_ttft_ms'] for r in rows):.3f})")
print(f"new served / llama.cpp prefill: {med['new_served_ttft_ms'] / med['llama_cpp_prefill_ms']:.3f}")
PY
