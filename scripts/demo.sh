#!/usr/bin/env bash
# The main job from a fresh machine: set up, build, and answer a long-context question with the
# default model (Gemma 3 270M), printing TTFT, prefill and decode speed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --no-python-tools
bash scripts/build.sh
./build/uniprefill run --prompt-file examples/long_context_prompt.txt --max-tokens 48 "$@"
