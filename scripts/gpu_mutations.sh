#!/usr/bin/env bash
# The CUDA mutations of tests/mutations/manifest.tsv without building on the GPU machine: each
# mutated uniprefill_cuda_tests is built here, xz-compressed into a carry folder with its shared
# libraries, and run there against the manifest's filter, which must fail (scripts/
# mutation_check.sh does the same where it can build, rebuilding per patch: 1-3 min of device
# time each).
#
#   bash scripts/gpu_mutations.sh pack PATCH...   # here (nvcc; the build folder as for
#                                                 # `gpu_cycle.sh pack`): build and pack
#   bash scripts/gpu_mutations.sh run             # on the GPU machine, carrying the folder:
#                                                 # "caught" / "MISSED" per mutant; exit 1 if any
#                                                 # was missed
#
# UP_GPU_BUILD (default build-gpu) and UP_GPU_MUT (default .gpu_mut, git-ignored) name the build
# and carry folders. A device call carries at most 64 MiB with the checkout: ~6 MB a mutant.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${UP_GPU_BUILD:-build-gpu}
carry=${UP_GPU_MUT:-.gpu_mut}
case "${1:-}" in
  pack)
    shift
    [ $# -gt 0 ] || { echo "usage: gpu_mutations.sh pack PATCH..." >&2; exit 2; }
    applied=""
    restore() { if [ -n "$applied" ]; then git apply -R "$applied"; fi; }
    trap restore EXIT
    rm -rf "$carry" && mkdir -p "$carry"
    for patch in "$@"; do
      grep -qP "^$patch\tuniprefill_cuda_tests\t" tests/mutations/manifest.tsv ||
        { echo "gpu_mutations: $patch is no uniprefill_cuda_tests line of the manifest" >&2; exit 2; }
      git apply --check "tests/mutations/$patch"
      git apply "tests/mutations/$patch"
      applied="tests/mutations/$patch"
      cmake --build "$build" --target uniprefill_cuda_tests > /tmp/gpu-mutation-build.log 2>&1 ||
        { echo "gpu_mutations: $patch does not build (/tmp/gpu-mutation-build.log)" >&2; exit 1; }
      xz -T0 -6 -c "$build/uniprefill_cuda_tests" > "$carry/${patch%.patch}.xz"
      git apply -R "$applied"
      applied=""
    done
    cmake --build "$build" --target uniprefill_cuda_tests > /tmp/gpu-mutation-build.log 2>&1
    bash scripts/pack_shared_libs.sh "$carry" "$build/uniprefill_cuda_tests"
    cp tests/mutations/manifest.tsv "$carry/"
    du -sh "$carry"
    ;;
  run)
    [ -f "$carry/lib.tar.xz" ] || { echo "gpu_mutations: no $carry/lib.tar.xz (pack first)" >&2; exit 2; }
    mkdir -p /tmp/gpu-mutation-libs
    tar -C /tmp/gpu-mutation-libs -xJf "$carry/lib.tar.xz"
    export LD_LIBRARY_PATH=/tmp/gpu-mutation-libs/lib:${LD_LIBRARY_PATH:-}
    export UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD
    missed=0
    for packed in "$carry"/*.xz; do
      name=$(basename "$packed" .xz)
      [ "$name" = lib.tar ] && continue
      filter=$(awk -F'\t' -v p="$name.patch" '$1 == p { print $3 }' "$carry/manifest.tsv")
      xz -dc "$packed" > /tmp/gpu-mutant && chmod +x /tmp/gpu-mutant
      log=/tmp/gpu-mutation-$name.log
      rc=0
      timeout "${UP_MUTANT_TIMEOUT:-240}" /tmp/gpu-mutant --gtest_filter="$filter" > "$log" 2>&1 || rc=$?
      if [ "$rc" -eq 0 ]; then
        echo "MISSED  $name.patch: $filter all passed"
        missed=$((missed + 1))
      elif [ "$rc" -eq 124 ]; then  # a hang is not a failing test: not counted as caught
        echo "TIMEOUT $name.patch: $filter ran past ${UP_MUTANT_TIMEOUT:-240} s"
        missed=$((missed + 1))
      else
        echo "caught  $name.patch: $(grep -c '^\[  FAILED  \].*ms)$' "$log") failing test(s) of" \
             "$filter, e.g. $(grep -m1 '^\[  FAILED  \].*ms)$' "$log" | sed 's/^\[  FAILED  \] //')"
      fi
      grep -m3 "Failure\|Skipped\|no GPU" "$log" | sed 's/^/    /' || true
    done
    [ "$missed" -eq 0 ]
    ;;
  *)
    echo "usage: bash scripts/gpu_mutations.sh pack PATCH... | run" >&2
    exit 2
    ;;
esac
