#!/usr/bin/env bash
# Accuracy at full size on a GPU machine (issue 19 items 3 and 4), one model's part per call:
#
#   bash scripts/gpu_accuracy.sh BINDIR OUTDIR gemma      # Gemma 3 270M: RULER 4K..32K, fidelity
#   bash scripts/gpu_accuracy.sh BINDIR OUTDIR smollm2    # SmolLM2-135M: RULER 2K..8K, fidelity
#   bash scripts/gpu_accuracy.sh BINDIR OUTDIR calibrate  # SmolLM2: calibrate, then its config
#
# RULER: 9 tasks x SAMPLES at each length, dense, the default UniPrefill settings and fixed-ratio
# keep 0.5 and 0.3 on the same prompts in one `eval ruler` per length (--keep-ratios 0.5,0.3),
# through the batch engine (--batch: many decodes per step; one length per invocation, so a call
# cut off at its limit still returns the lengths it finished). Prefill speedups come from
# `bench-prefill` (dense vs each setting, median of 3), since a batched request's TTFT is not its
# prefill time. Fidelity: `eval fidelity` at the same lengths, default / keep 0.5 / keep 0.3.
# Everything is logged to stdout with a timestamp per step; JSON lands in OUTDIR (a few files:
# at most 8 come back from the GPU machine). tools/plot_accuracy.py turns them into the plot.
#
# Environment: SAMPLES (default 50), LENGTHS (default per model), BATCH (default 64),
# FIDELITY_SAMPLES (default 8), KV (default 48GiB), CAL_SAMPLES (calibrate; default 3),
# CAL_LENGTHS (calibrate; default 4096).
# BINDIR holds `uniprefill` (and its lib.tar.xz, as for scripts/gpu_model_check.sh); the models
# must be at models/ (they travel in chunks of < 64 MiB, docs/cuda_model.md).
set -uo pipefail
cd "$(dirname "$0")/.."
usage="usage: gpu_accuracy.sh BINDIR OUTDIR gemma|smollm2|calibrate"
bin=${1:?$usage}
out=${2:?$usage}
part=${3:?$usage}
mkdir -p "$out" /tmp/uniprefill-libs
if [ -f "$bin/lib.tar.xz" ]; then tar -C /tmp/uniprefill-libs -xJf "$bin/lib.tar.xz"; fi
export LD_LIBRARY_PATH=/tmp/uniprefill-libs/lib:${LD_LIBRARY_PATH:-}
if ! ldconfig -p | grep -q libcublasLt.so.13; then
  lt=$(find / -name 'libcublasLt.so.13*' -not -path '/proc/*' 2>/dev/null | head -1 || true)
  [ -n "$lt" ] && export LD_LIBRARY_PATH=$(dirname "$lt"):$LD_LIBRARY_PATH
fi
export UP_SOURCE_DIR=$PWD
u() { "$bin/uniprefill" "$@"; }
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*"; }

samples=${SAMPLES:-50}
batch=${BATCH:-64}
kv=${KV:-48GiB}
fsamples=${FIDELITY_SAMPLES:-8}
case "$part" in
  gemma) model=models/gemma-3-270m-q4_k_m.gguf; name=gemma3_270m; lengths=${LENGTHS:-4096,8192,16384,32768}; ctx=32768 ;;
  smollm2|calibrate) model=models/smollm2-135m-instruct-q4_1.gguf; name=smollm2_135m; lengths=${LENGTHS:-2048,4096,8192}; ctx=8192 ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
# A RULER length counts prompt + answer budget, so it may equal the context; bench-prefill and
# fidelity prompts need room for generated tokens: the context length becomes context - 768.
plain_lengths=$(tr , '\n' <<<"$lengths" | sed "s/^$ctx\$/$((ctx - 768))/" | paste -sd,)
[ -f "$model" ] || { echo "error: $model is missing (reassemble its chunks first)" >&2; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
log "$part: model $model, lengths $lengths"

if [ "$part" = calibrate ]; then
  # Item 4: drop layers (auto: the default set, each of its layers alone, the set one layer
  # earlier: 7 sets for SmolLM2) x (top-p 0.95, 0.99, keep 0.5) = 21 settings, one request at a
  # time (calibrate cannot batch: the sets differ in drop layers); the recommended setting (bar:
  # mean within 1 point, 3 per task where dense > 20) is written as a config and then checked
  # with the full sample count, batched, at every length. Llama has no sliding windows: the
  # window mode does not matter, so only one is tried.
  cal_samples=${CAL_SAMPLES:-3}
  cal_lengths=${CAL_LENGTHS:-4096}
  log "calibrate: ${cal_samples} samples x 9 tasks at $cal_lengths"
  u calibrate --model "$model" --device cuda --lengths "$cal_lengths" --samples "$cal_samples" --seed 11 \
    --p-values 0.95,0.99 --keep-ratios 0.5 --drop-layer-sets auto --window-modes position \
    -o "$out/calibrate_$name.json" --write-config "$out/uniprefill_$name.json" 2>&1 | grep -v '^calibrate'
  log "calibrate done"
  if grep -q '"enabled": *true' "$out/uniprefill_$name.json" 2>/dev/null; then
    for len in ${lengths//,/ }; do
      log "check the recommended config at $len (seed 1, batch $batch)"
      u eval ruler --model "$model" --device cuda --uniprefill-config "$out/uniprefill_$name.json" \
        --lengths "$len" --samples "$samples" --batch "$batch" --kv-cache-memory "$kv" \
        -o "$out/ruler_${name}_calibrated_$len.json" 2>&1 | grep -E '^(average|bar|progress|error|warning)'
    done
  fi
  log "done"
  exit 0
fi

# Prefill speedups on natural text (dense vs default, keep 0.5, keep 0.3): seconds of GPU time.
cat README.md docs/*.md > /tmp/acc_long.txt
for _ in 1 2 3 4 5 6 7 8; do cat /tmp/acc_long.txt; done > /tmp/acc_longer.txt
for setting in default 0.5 0.3; do
  flags=(); [ "$setting" = default ] || flags=(--keep-ratio "$setting")
  log "bench-prefill $setting"
  u bench-prefill --model "$model" --device cuda --prompt-file /tmp/acc_longer.txt --lengths "$plain_lengths" \
    --repeats 3 "${flags[@]}" --json "$out/bench_${name}_$setting.json" 2>&1 | tail -6
done

# First-token fidelity (natural text: the built-in report generator), each setting.
for setting in default 0.5 0.3; do
  flags=(); [ "$setting" = default ] || flags=(--keep-ratio "$setting")
  log "eval fidelity $setting"
  u eval fidelity --model "$model" --device cuda --lengths "$plain_lengths" --samples "$fsamples" \
    --greedy-tokens 16 "${flags[@]}" -o "$out/fidelity_${name}_$setting.json" 2>&1 | grep '^mean'
done

# RULER, one length per invocation, longest last (a call cut off loses the fewest lengths).
for len in ${lengths//,/ }; do
  log "eval ruler $len: 9 tasks x $samples samples x 4 settings, batch $batch"
  u eval ruler --model "$model" --device cuda --lengths "$len" --samples "$samples" \
    --keep-ratios 0.5,0.3 --batch "$batch" --kv-cache-memory "$kv" \
    -o "$out/ruler_${name}_$len.json" 2>&1 | grep -E '^(average|  keep|bar|progress|error|warning)'
  log "eval ruler $len done"
done

# At most 8 files come back: the small ones travel as one archive.
(cd "$out" && tar -czf "${name}_bench_fidelity.tgz" --remove-files bench_"$name"_*.json fidelity_"$name"_*.json)
log "done"
ls -la "$out"
