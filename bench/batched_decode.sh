#!/usr/bin/env bash
# Batched decode through `serve` (issue 22): one request at a time (concurrency 1, 4 requests)
# and 16 concurrent ones, 1,024-token prompts, 64 output tokens, Gemma 3 270M; tokens/s =
# concurrency / ITL p50, so c16 / c1 = 16 x c1 ITL p50 / c16 ITL p50 (docs/performance.md).
#   bash bench/batched_decode.sh BIN PORT OUTDIR [serve flags...]
bin=$1; port=$2; out=$3; shift 3
mkdir -p $out
$bin serve --model models/gemma-3-270m-q4_k_m.gguf --port $port --threads 2 \
  --kv-cache-memory 4GiB --max-batched-tokens 8192 -q "$@" 2> $out/server.log &
srv=$!
for i in $(seq 1 60); do curl -sf http://127.0.0.1:$port/health > /dev/null && break; sleep 1; done
for c in 1 16; do
  n=$(( c == 1 ? 4 : 16 ))
  $bin bench serve --url http://127.0.0.1:$port --concurrency $c -n $n --prompt-tokens 1024 \
    --output-tokens 64 --modes dense --warmup 1 -o $out/c$c.json > $out/c$c.txt 2>&1
done
kill $srv; wait $srv 2>/dev/null
python3 - $out <<'PY'
import json,sys,statistics
o=sys.argv[1]
def itl(f):
    d=json.load(open(f)); m=d['modes'][0]
    v=[x for r in m['requests'] for x in r['itl_s']]
    return statistics.median(v)*1000
a=itl(o+'/c1.json'); b=itl(o+'/c16.json')
print(f"{o}: c1 ITL p50 {a:.1f} ms, c16 ITL p50 {b:.1f} ms, c16/c1 tokens/s {16*a/b:.2f}x")
PY
