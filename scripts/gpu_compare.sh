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
  python3 - "$out" <<'PY' | tee "$out/decode_compare.txt"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
print(f"{'context':>7} {'batch':>5} {'old ms':>8} {'new ms':>8} {'new/old':>8}")
for new in sorted(out.glob("decode_new_*.json")):
    old = out / new.name.replace("decode_new_", "decode_old_", 1)
    if not old.exists():
        continue
    rows = lambda p: {(r["context"], r["batch"]): r for r in json.load(open(p))["rows"]}
    o, n = rows(old), rows(new)
    for key in sorted(n):
        if key in o:
            a, b = o[key].get("itl_ms_median", 0), n[key].get("itl_ms_median", 0)
            if not a or not b:
                continue
            print(f"{key[0]:>7} {key[1]:>5} {a:8.2f} {b:8.2f} {b / a:8.3f}")
PY
fi
if [[ $stages == *" others "* ]]; then
  bench "$new_build" new gemma-3-12b 32768
  bench "$old_build" old gemma-3-12b 32768
  bench "$old_build" old qwen3-next-80b-a3b 32768
  bench "$new_build" new qwen3-next-80b-a3b 32768
fi
python3 - "$out" <<'PY' | tee "$out/compare.txt"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
print(f"{'shape':<20} {'context':>7} {'mode':<9} {'old ms':>9} {'new ms':>9} {'new/old':>8}")
for new in sorted(out.glob("new_*.json")):
    old = out / new.name.replace("new_", "old_", 1)
    if not old.exists():
        continue
    rows = lambda p: {(r["context"], r["batch"], r["mode"]): r for r in json.load(open(p))["rows"]}
    o, n = rows(old), rows(new)
    for key in sorted(n):
        if key in o:
            a, b = o[key]["ttft_ms_median"], n[key]["ttft_ms_median"]
            print(f"{new.stem[4:]:<20} {key[0]:>7} {key[2]:<9} {a:9.1f} {b:9.1f} {b / a:8.3f}")
PY
