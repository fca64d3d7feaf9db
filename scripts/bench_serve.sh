#!/usr/bin/env bash
# Serving benchmark on the default model (Gemma 3 270M) on this machine's CPU: `uniprefill serve`
# under `uniprefill bench serve` at concurrency 1, 4 and 16 with ~4K-token prompts of natural English
# (windows of the license texts Debian ships), 16 output tokens each, dense vs UniPrefill in one
# run per concurrency. Writes docs/results/serve_gemma3_270m_c{1,4,16}.json.
#   bash scripts/bench_serve.sh [extra serve flags, e.g. --threads 2]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
corpus=$(bash scripts/make_license_corpus.sh)
# 64 prompts of ~4K tokens (about 4.6 characters per token in this text), each a different window.
dataset=bench/out/serve_prompts_4k.jsonl
python3 - "$corpus" "$dataset" <<'PY'
import json, sys
text = open(sys.argv[1], encoding="utf-8", errors="replace").read()
chars = int(4096 * 4.6)
with open(sys.argv[2], "w") as out:
    for i in range(64):
        start = (i * 2749) % (len(text) - chars)
        out.write(json.dumps({"prompt": "Summarise this text.\n\n" + text[start:start + chars]}) + "\n")
PY
port=${PORT:-18080}
./build/uniprefill serve --port "$port" --kv-cache-memory 4GiB --max-batched-tokens 8192 "$@" \
  2> bench/out/serve_bench_server.log &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  sleep 1
done
for c in 1 4 16; do
  n=$((c < 4 ? 4 : c * 2 > 16 ? 16 : c * 2))
  ./build/uniprefill bench serve --url "http://127.0.0.1:$port" --concurrency "$c" -n "$n" \
    --dataset "$dataset" --output-tokens 16 --warmup 1 -o "docs/results/serve_gemma3_270m_c$c.json"
done
