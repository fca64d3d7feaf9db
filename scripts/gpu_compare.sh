#!/usr/bin/env bash
# Old and new binary in one GPU call: a refactor or kernel change proves itself this way (issue 16's
# acceptance: `bench gpu-prefill` of both at the same shapes, medians of 3, the new one within 3%).
#
#   here:  rm -rf .old_src && mkdir .old_src &&
#          git archive OLD_COMMIT src apps include CMakeLists.txt scripts | tar -x -C .old_src
#          (.old_src is git-ignored via .git/info/exclude; carry it and .gpu_deps)
#   there: bash scripts/gpu_compare.sh .old_src OUTDIR [STAGE...]
#          stages: build (both trees, in parallel), tests (the new CUDA tests), llama (Llama-3.1-8B
#          shape at 8K/32K/128K), others (Gemma-3-12B and Qwen3-Next shapes at 32K), decode (the
#          8B shape's decode steps, graphs and device sampling as served: 1 and 32 requests at 1K,
#          1 and 4 at 32K; OUTDIR/decode_compare.txt); default all but decode.
# Builds land in build-dev-new/ and build-dev-old/ (git-ignored, kept while the machine stays
# warm). Each shape runs dense and keep 0.5, the old binary and the new one back to back (the order
# alternates between shapes), and OUTDIR/compare.txt lists new / old per point.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
old_src=$(readlink -f "${1:?usage: gpu_compare.sh OLD_SRC OUTDIR [STAGE...]}")
out=${2:?usage: gpu_compare.sh OLD_SRC OUTDIR [STAGE...]}
shift 2
stages=" ${*:-build tests llama others} "
new_build=$ROOT/build-dev-new
old_build=$ROOT/build-dev-old
mkdir -p "$out"

if [[ $stages == *" build "* ]]; then
  UP_GPU_PREFIX=/tmp/up-deps-new bash scripts/gpu_build.sh build "$new_build" \
    >"$out/build_new.log" 2>&1 &
  new_pid=$!
  (cd "$old_src" && UP_GPU_DEPS=$ROOT/.gpu_deps UP_GPU_PREFIX=/tmp/up-deps-old \
    UP_GPU_TARGETS=uniprefill bash scripts/gpu_build.sh build "$old_build" -DUNIPREFILL_TESTS=OFF) \
    >"$out/build_old.log" 2>&1 &
  old_pid=$!
  wait $new_pid || { tail -30 "$out/build_new.log"; exit 1; }
  wait $old_pid || { tail -30 "$out/build_old.log"; exit 1; }
  echo "built both trees"
fi
if [[ $stages == *" tests "* ]]; then
  UNIPREFILL_ALLOW_MISSING_ASSETS=${UNIPREFILL_ALLOW_MISSING_ASSETS:-1} \
    "$new_build/uniprefill_cuda_tests" --gtest_brief=1 >"$out/cuda_tests.log" 2>&1 || true
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |tests ran' "$out/cuda_tests.log" || true
fi

# bench BUILD NAME SHAPE CONTEXTS
bench() {
  "$1/uniprefill" bench gpu-prefill --shape "$3" --contexts "$4" --keep-ratios 0.5 --repeats 3 \
    --json "$out/$2_$3.json" >"$out/$2_$3.txt" 2>&1 || { cat "$out/$2_$3.txt"; return 1; }
}
if [[ $stages == *" llama "* ]]; then
  bench "$old_build" old llama-3.1-8b 8192,32768,131072
  bench "$new_build" new llama-3.1-8b 8192,32768,131072
fi
# compare PREFIX METRIC: new / old for each row of every PREFIXnew_*.json with a PREFIXold_ twin
# (rows matched by context, batch and mode or sampling).
compare() {
  python3 - "$out" "$1" "$2" <<'PY'
import json, pathlib, sys
out, prefix, metric = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3]
print(f"{'run':<20} {'context':>7} {'batch':>5} {'mode':<9} {'old ms':>9} {'new ms':>9} {'new/old':>8}")
key = lambda r: (r["context"], r["batch"], r.get("mode", r.get("sampling", "")))
rows = lambda p: {key(r): r for r in json.load(open(p))["rows"]}
for new in sorted(out.glob(prefix + "new_*.json")):
    old = out / new.name.replace(prefix + "new_", prefix + "old_", 1)
    if not old.exists():
        continue
    o, n = rows(old), rows(new)
    for k in sorted(n):
        a, b = o.get(k, {}).get(metric), n[k].get(metric)
        if a and b:
            print(f"{new.stem[len(prefix) + 4:]:<20} {k[0]:>7} {k[1]:>5} {k[2]:<9} "
                  f"{a:9.2f} {b:9.2f} {b / a:8.3f}")
PY
}

# decode BUILD NAME CONTEXT BATCHES
decode() {
  "$1/uniprefill" bench gpu-decode --shape llama-3.1-8b --contexts "$3" --batch-sizes "$4" \
    --sampling device --graphs on --steps 64 --json "$out/decode_$2_$3.json" \
    >"$out/decode_$2_$3.txt" 2>&1 || { cat "$out/decode_$2_$3.txt"; return 1; }
}
if [[ $stages == *" decode "* ]]; then
  decode "$old_build" old 1024 1,32
  decode "$new_build" new 1024 1,32
  decode "$new_build" new 32768 1,4
  decode "$old_build" old 32768 1,4
  compare decode_ itl_ms_median | tee "$out/decode_compare.txt"
fi
if [[ $stages == *" others "* ]]; then
  bench "$new_build" new gemma-3-12b 32768
  bench "$old_build" old gemma-3-12b 32768
  bench "$old_build" old qwen3-next-80b-a3b 32768
  bench "$new_build" new qwen3-next-80b-a3b 32768
fi
compare "" ttft_ms_median | tee "$out/compare.txt"
