#!/usr/bin/env bash
# UniPrefill on random-weight checkpoints with real layer shapes (written by
# tools/make_synthetic_checkpoint.py): Llama-3.1-8B shape with 12 of its 32 layers, Qwen3-Next-80B-A3B
# shape with 16 of 48 layers and 32 of 512 experts (CPU memory), at fixed keep ratios 0.5 and 0.3
# (random weights give flat attention, so top-p would keep nearly everything), vs the FLOP
# reduction the segment structure predicts (bench/predict_speedup.py).
#   CKPT=/path/to/checkpoints bash scripts/bench_synthetic.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CKPT=${CKPT:-/work/ckpt}
N=${N:-2048}
bash scripts/build.sh >/dev/null
[ -d "$CKPT/llama8b-12l" ] || .venv/bin/python tools/make_synthetic_checkpoint.py \
  --preset llama-3.1-8b --layers 12 --out "$CKPT/llama8b-12l" --quiet
[ -d "$CKPT/qwen3next-16l-32e" ] || .venv/bin/python tools/make_synthetic_checkpoint.py \
  --preset qwen3-next-80b-a3b --layers 16 --experts 32 --out "$CKPT/qwen3next-16l-32e" --quiet
for model in llama8b-12l qwen3next-16l-32e; do
  for ratio in 0.5 0.3; do
    ./build/uniprefill bench-prefill -m "$CKPT/$model" --random-tokens --lengths "$N" \
      --repeats "${REPEATS:-1}" --keep-ratio "$ratio" --json "docs/results/synthetic_${model}_keep${ratio}.json"
  done
  .venv/bin/python bench/predict_speedup.py docs/results/synthetic_${model}_keep*.json "$CKPT/$model"
done
