#!/usr/bin/env bash
# The whole test suite from a fresh machine: set up, build, run every test (CTest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --no-python-tools
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" --timeout 1200
