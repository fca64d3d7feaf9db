#!/usr/bin/env bash
# Writes bench/out/licenses.txt: the license texts every Debian system ships in
# /usr/share/common-licenses (~55K tokens of natural English), the long-context corpus the CPU
# benchmarks prefill. Prints the path.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/out
corpus=bench/out/licenses.txt
: > "$corpus"
for f in GPL-3 GPL-2 LGPL-2.1 LGPL-2 MPL-1.1 GFDL-1.3 GFDL-1.2 MPL-2.0 GPL-1 Apache-2.0 LGPL-3 CC0-1.0 Artistic BSD; do
  if [ -f "/usr/share/common-licenses/$f" ]; then cat "/usr/share/common-licenses/$f" >> "$corpus"; fi
done
echo "$corpus"
