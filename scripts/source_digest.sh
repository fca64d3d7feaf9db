#!/usr/bin/env bash
# Prints one hash of every file the engine's binaries are built from (sources, headers, tests,
# CMake), by content and path: `gpu_cycle.sh pack` records it beside its binaries, and a device
# call unpacks them only where its copy of the tree gives the same hash. (Not a git commit: a
# device call's copy of the checkout does not keep this machine's HEAD.)
set -euo pipefail
cd "$(dirname "$0")/.."
paths=()
for p in src include apps tests cmake CMakeLists.txt; do [ -e "$p" ] && paths+=("$p"); done
find "${paths[@]}" -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 |
  LC_ALL=C sort -z | xargs -0 sha1sum | sha1sum | cut -c1-16
