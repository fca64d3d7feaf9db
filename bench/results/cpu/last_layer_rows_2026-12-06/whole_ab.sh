#!/usr/bin/env bash
# The last-row walk against the every-row walk (UNIPREFILL_LAST_LAYER_EVERY_ROW=1), our whole
# `run` prefill beside llama.cpp in each invocation, arms new old old new.
cd /work/main
out=bench/results/cpu/last_layer_rows_2026-12-06
for arm in new1:0 old1:1 old2:1 new2:0; do
  name=${arm%%:*}; every=${arm##*:}
  UNIPREFILL_LAST_LAYER_EVERY_ROW=$every .venv/bin/python bench/bench_vs_llamacpp.py --lengths 4096 16384 \
    --threads 2 --repeats 1 --decode-tokens 2 --ours-args="--uniprefill off" \
    --out $out/whole_$name.json > $out/whole_$name.txt 2>&1
  echo "$name rc $?"
done
