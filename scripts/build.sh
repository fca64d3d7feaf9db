#!/usr/bin/env bash
# Configures and builds uniprefill (Release, Ninja) into build/. Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/tmp/uniprefill-cmake.log 2>&1 ||
  { cat /tmp/uniprefill-cmake.log; echo "build: cmake configure failed" >&2; exit 1; }
cmake --build build -j "$(nproc)"
