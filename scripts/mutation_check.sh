#!/usr/bin/env bash
# Mutation check: each deliberate bug in tests/mutations/*.patch must make a named test fail.
#
#   bash scripts/mutation_check.sh BUILD_DIR [BINARY]   # BINARY: uniprefill_tests (default) or
#                                                      # uniprefill_cuda_tests (on a GPU machine)
#
# For every manifest line of that binary (tests/mutations/manifest.tsv: patch, binary, gtest
# filter) it applies the patch to src/, rebuilds the binary in BUILD_DIR, runs the filter and
# expects a failure, then reverses the patch; at the end it rebuilds the clean binary. It edits the
# checkout it runs in (each patch must apply exactly; a trap reverts it on any exit), so run it
# where nothing else builds.
# Prints one line per mutation ("caught" / "MISSED") and exits non-zero if any was missed.
# MUTATIONS="a.patch b.patch" checks those manifest lines alone (a device call's time is short).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: mutation_check.sh BUILD_DIR [BINARY]}
binary=${2:-uniprefill_tests}
applied=""
restore() { if [ -n "$applied" ]; then git apply -R "$applied"; fi; }
trap restore EXIT
missed=0
while IFS=$'\t' read -r patch bin filter; do
  [[ -z "$patch" || "$patch" == \#* || "$bin" != "$binary" ]] && continue
  [[ -n "${MUTATIONS:-}" && " $MUTATIONS " != *" $patch "* ]] && continue
  # The patch must apply exactly: src/ as committed (other edits elsewhere are left alone).
  git apply --check "tests/mutations/$patch" ||
    { echo "mutation_check: $patch does not apply to this src/" >&2; exit 2; }
  git apply "tests/mutations/$patch"
  applied="tests/mutations/$patch"
  cmake --build "$build" --target "$bin" >/tmp/mutation-build.log 2>&1 ||
    { echo "mutation_check: $patch does not build (see /tmp/mutation-build.log)" >&2; exit 1; }
  log=/tmp/mutation-${patch%.patch}.log
  if "$build/$bin" --gtest_filter="$filter" >"$log" 2>&1; then
    echo "MISSED  $patch: $filter all passed ($log)"
    missed=$((missed + 1))
  else
    echo "caught  $patch: $(grep -c '^\[  FAILED  \].*ms)$' "$log") failing test(s) of $filter, e.g." \
         "$(grep -m1 '^\[  FAILED  \].*ms)$' "$log" | sed 's/^\[  FAILED  \] //')"
  fi
  git apply -R "$applied"
  applied=""
done < tests/mutations/manifest.tsv
cmake --build "$build" --target "$binary" >/tmp/mutation-build.log 2>&1
exit $((missed > 0))
