#!/usr/bin/env bash
# usage: perf.sh BINARY OUT_PREFIX [start delay s]
bin=$1; pre=$2; delay=${3:-24}
port=18650
$bin serve --port $port --threads 2 --kv-cache-memory 4GiB --max-batched-tokens 8192 -q &
pid=$!
for i in $(seq 60); do curl -sf http://127.0.0.1:$port/health >/dev/null && break; sleep 1; done
/work/h-cpu19/build/uniprefill bench serve --url http://127.0.0.1:$port --concurrency 16 -n 16 \
  --prompt-tokens 1024 --output-tokens 128 --modes dense --warmup 0 -o ${pre}_bench.json > ${pre}_bench.log 2>&1 &
bpid=$!
sleep $delay
perf record -g -o ${pre}.data -p $pid -- sleep 6 2>/dev/null
wait $bpid
kill $pid; wait $pid 2>/dev/null
perf report -i ${pre}.data --no-children --sort symbol -g none 2>/dev/null | grep '%' | cut -c1-160 > ${pre}.txt
