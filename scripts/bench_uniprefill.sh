#!/usr/bin/env bash
# Dense vs UniPrefill prefill on the default model (Gemma 3 270M) at 4K-32K tokens of natural
# English (the license texts every Debian system ships in /usr/share/common-licenses, ~55K tokens),
# medians of 3 runs per point. Writes docs/results/uniprefill_gemma3_270m.json.
#   bash scripts/bench_uniprefill.sh [extra bench-prefill flags, e.g. --uniprefill-p 0.95]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
corpus=$(bash scripts/make_license_corpus.sh)
./build/uniprefill bench-prefill -f "$corpus" --lengths "${LENGTHS:-4096,8192,16384,32768}" \
  --repeats "${REPEATS:-3}" --json "${OUT:-docs/results/uniprefill_gemma3_270m.json}" "$@"
