#!/usr/bin/env bash
# Dense vs UniPrefill prefill on the default model (Gemma 3 270M) at 4K-32K tokens of natural
# English (the license texts every Debian system ships in /usr/share/common-licenses, ~55K tokens),
# medians of 3 runs per point. Writes docs/results/uniprefill_gemma3_270m.json.
#   bash scripts/bench_uniprefill.sh [extra bench-prefill flags, e.g. --uniprefill-p 0.95]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
mkdir -p bench/out
corpus=bench/out/licenses.txt
: > "$corpus"
for f in GPL-3 GPL-2 LGPL-2.1 LGPL-2 MPL-1.1 GFDL-1.3 GFDL-1.2 MPL-2.0 GPL-1 Apache-2.0 LGPL-3 CC0-1.0 Artistic BSD; do
  if [ -f "/usr/share/common-licenses/$f" ]; then cat "/usr/share/common-licenses/$f" >> "$corpus"; fi
done
./build/uniprefill bench-prefill -f "$corpus" --lengths "${LENGTHS:-4096,8192,16384,32768}" \
  --repeats "${REPEATS:-3}" --json "${OUT:-docs/results/uniprefill_gemma3_270m.json}" "$@"
