#!/usr/bin/env bash
# 11th session, call 1: does a chunk's row count off a multiple of 128 cost more (issue 18)?
source "$(dirname "$0")/env.sh"
B=/tmp/b/uniprefill
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv > $R/gpu.txt
for C in 768 776 832 896 1000 1024 1032 1152 1280 1408 1416; do
  timeout 100 $B bench gpu-prefill --layers 8 --contexts 32768 --keep-ratios "" --repeats 3 --chunk-tokens $C \
    --serving-graphs --json $R/l8_c$C.json > $R/l8_c$C.txt 2>&1; echo "c$C rc $?"
done
timeout 150 $B bench gpu-prefill --contexts 32768 --keep-ratios "" --repeats 3 --chunk-tokens 2048 \
  --serving-graphs --phases --json $R/c2048.json > $R/c2048.txt 2>&1; echo "c2048 rc $?"
python3 - $R <<'PY'
import json,sys,glob,os
for f in sorted(glob.glob(sys.argv[1]+'/l8_c*.json'), key=lambda f:int(f.split('_c')[1][:-5])):
    d=json.load(open(f)); rows=d.get('rows',d) if isinstance(d,dict) else d
    for r in rows:
        if isinstance(r,dict) and r.get('chunk_tokens'):
            print(os.path.basename(f), {k:r.get(k) for k in ('chunk_tokens','ttft_ms_median','chunked_over_whole','forwards')})
PY
mkdir -p $OUT; cp -r $R/* $OUT/
