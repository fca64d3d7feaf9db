#!/usr/bin/env bash
# Peak host RSS per process of `uniprefill run` at tensor parallel 1 and 2 (issue 21's "memory per
# rank"): one process, then `mpirun -np 2`, the same prompt and flags; prints each run's peak RSS
# (the CLI's --json peak_rss_mib, getrusage) and TP 2's worst rank over TP 1.
#   bash bench/tp_memory.sh CLI MODEL PROMPT_ARGS... -- RUN_FLAGS...
# e.g. bash bench/tp_memory.sh build/uniprefill models/gemma-3-270m-q4_k_m.gguf -f docs/design.md \
#        -- --prefill-gemm int16 -n 16
set -euo pipefail
cli=${1:?usage: tp_memory.sh CLI MODEL PROMPT_ARGS... -- RUN_FLAGS...}
model=${2:?usage: tp_memory.sh CLI MODEL PROMPT_ARGS... -- RUN_FLAGS...}
shift 2
prompt=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do prompt+=("$1"); shift; done
[ $# -gt 0 ] && shift
flags=("$@")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$cli" run --model "$model" "${prompt[@]}" -q "${flags[@]}" --json "$tmp/tp1.json" \
  > /dev/null 2> "$tmp/tp1.err" || { cat "$tmp/tp1.err" >&2; exit 1; }
mpirun --allow-run-as-root --oversubscribe -np 2 "$cli" run --model "$model" "${prompt[@]}" -q \
  "${flags[@]}" --tensor-parallel 2 --json "$tmp/tp2.json" > /dev/null 2> "$tmp/tp2.err" ||
  { cat "$tmp/tp2.err" >&2; exit 1; }
python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
one = json.load(open(f"{tmp}/tp1.json"))["peak_rss_mib"]
two = [json.load(open(f"{tmp}/tp2.json{s}"))["peak_rss_mib"] for s in ("", ".rank1")]
print(f"peak RSS: TP 1 {one:.0f} MiB; TP 2 ranks {two[0]:.0f} / {two[1]:.0f} MiB; "
      f"worst rank / TP 1 = {max(two) / one:.2f}x")
PY
