#!/usr/bin/env bash
# usage: serve_ab.sh OUTDIR ROUND NAME=BINARY [NAME=BINARY ...]: per config, a fresh serve, then
# bench serve at c1 (-n 4) and c16 (-n 16), 1K prompts, 64 output tokens; configs in the given order.
set -u
out=$1; round=$2; shift 2
port=18600
for cfg in "$@"; do
  name=${cfg%%=*}; bin=${cfg#*=}
  port=$((port + 1))
  echo "== $name round $round $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
  $bin serve --port $port --threads 2 --kv-cache-memory 4GiB --max-batched-tokens 8192 -q &
  pid=$!
  for i in $(seq 60); do curl -sf http://127.0.0.1:$port/health >/dev/null && break; sleep 1; done
  for c in 1 16; do
    n=$([ $c = 1 ] && echo 4 || echo 16)
    /work/h-cpu19/build/uniprefill bench serve --url http://127.0.0.1:$port --concurrency $c -n $n \
      --prompt-tokens 1024 --output-tokens 64 --modes dense --warmup 1 \
      -o $out/serve_${name}_r${round}_c$c.json > $out/log_${name}_r${round}_c$c.txt 2>&1
    python3 -c "
import json,sys; s=json.load(open('$out/serve_${name}_r${round}_c$c.json'))['modes'][0]['summary']
print('  c$c ITL p50 %.1f ms' % (1000*s['itl_s']['p50']))"
  done
  kill $pid; wait $pid 2>/dev/null
  echo "   end load $(cut -d' ' -f1-3 /proc/loadavg); others: $(ps -eo pcpu,comm --sort=-pcpu | grep -v -E 'uniprefill|ps|grep|head' | sed -n 2,3p | tr -s ' ' | tr '\n' ';')"
done
