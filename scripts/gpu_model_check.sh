#!/usr/bin/env bash
# The real-model GPU check, on a GPU machine: the CUDA tests (every op, the CUDA model against the
# host model on the tiny checkpoints and Gemma 3 270M), then `run`, `bench-prefill`, `eval fidelity`
# and `serve` with --device cuda on Gemma 3 270M, each writing its JSON/log to OUTDIR.
#
#   bash scripts/gpu_model_check.sh BINDIR OUTDIR
#
# BINDIR holds `uniprefill` and `uniprefill_cuda_tests`: packed here with their lib.tar.xz
# (scripts/gpu_cycle.sh pack), or built there (scripts/gpu_build.sh build BINDIR);
# models/gemma-3-270m-q4_k_m.gguf must exist (its test skips otherwise; it is 253 MB, so it
# travels to a GPU machine in chunks of < 64 MiB, see docs/cuda_model.md).
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:?usage: gpu_model_check.sh BINDIR OUTDIR}
out=${2:?usage: gpu_model_check.sh BINDIR OUTDIR}
mkdir -p "$out" /tmp/uniprefill-libs
if [ -f "$bin/lib.tar.xz" ]; then tar -C /tmp/uniprefill-libs -xJf "$bin/lib.tar.xz"; fi
export LD_LIBRARY_PATH=/tmp/uniprefill-libs/lib:${LD_LIBRARY_PATH:-}
if ! ldconfig -p | grep -q libcublasLt.so.13; then
  lt=$(find / -name 'libcublasLt.so.13*' -not -path '/proc/*' 2>/dev/null | head -1 || true)
  [ -n "$lt" ] && export LD_LIBRARY_PATH=$(dirname "$lt"):$LD_LIBRARY_PATH
fi
export UP_SOURCE_DIR=$PWD  # goldens and the model, for test binaries built elsewhere
model=models/gemma-3-270m-q4_k_m.gguf
u() { "$bin/uniprefill" "$@"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"

echo "== CUDA tests"
"$bin/uniprefill_cuda_tests" --gtest_output="json:$out/cuda_tests.json" > "$out/cuda_tests.log" 2>&1
grep -E '^\[  (FAILED|PASSED|SKIPPED) |^\[==========\]|Failure|^\[(gemma|llama|qwen|tiny)' "$out/cuda_tests.log" | tail -80

echo "== run --device cuda"
prompt="Write a short note on why long documents are slow to read for language models."
u run --model "$model" --device cuda --prompt "$prompt" --max-tokens 48 --json "$out/run_cuda.json" \
  > "$out/run_cuda.txt" 2> "$out/run_cuda.err"; echo "exit $?"; cat "$out/run_cuda.txt"; tail -4 "$out/run_cuda.err"
u run --model "$model" --device cpu --prompt "$prompt" --max-tokens 48 -q > "$out/run_cpu.txt" 2>/dev/null
echo "cpu text:"; cat "$out/run_cpu.txt"

echo "== bench-prefill --device cuda (dense vs UniPrefill, Gemma 3 270M)"
cat README.md docs/*.md > /tmp/long.txt
for i in 1 2 3 4 5 6; do cat /tmp/long.txt; done > /tmp/longer.txt
u bench-prefill --model "$model" --device cuda --prompt-file /tmp/longer.txt \
  --lengths 1024,4096,16384,32000 --repeats 3 --json "$out/bench_prefill_cuda.json" 2>&1 | tail -12

echo "== eval fidelity --device cuda"
u eval fidelity --model "$model" --device cuda --lengths 2048,8192 --samples 4 --greedy-tokens 16 \
  -o "$out/fidelity_cuda.json" 2>&1 | tail -8

echo "== fixed ratio (keep 0.5): sync-free drops on the real model"
u bench-prefill --model "$model" --device cuda --prompt-file /tmp/longer.txt --keep-ratio 0.5 \
  --lengths 4096,16384,32000 --repeats 3 --json "$out/bench_prefill_cuda_keep05.json" 2>&1 | tail -6
grep -o '"uniprefill_host_syncs": *[0-9]*' "$out/bench_prefill_cuda_keep05.json" | sort | uniq -c
u eval fidelity --model "$model" --device cuda --keep-ratio 0.5 --lengths 2048,8192 --samples 4 \
  --greedy-tokens 16 -o "$out/fidelity_cuda_keep05.json" 2>&1 | tail -8

echo "== serve --device cuda"
u serve --model "$model" --device cuda --port 8019 --kv-cache-memory 2GiB > "$out/serve.log" 2>&1 &
pid=$!
for _ in $(seq 1 120); do curl -sf localhost:8019/health >/dev/null && break; sleep 0.5; done
curl -s localhost:8019/v1/completions -H 'Content-Type: application/json' \
  -d '{"model":"gemma-3-270m-q4_k_m","prompt":"The capital of France is","max_tokens":12,"temperature":0}' | tee "$out/serve_completion.json"; echo
curl -sN localhost:8019/v1/chat/completions -H 'Content-Type: application/json' \
  -d '{"model":"gemma-3-270m-q4_k_m","messages":[{"role":"user","content":"Say hello in three words."}],"max_tokens":16,"stream":true}' | tail -3
pids=()
for i in $(seq 1 8); do
  curl -s localhost:8019/v1/completions -H 'Content-Type: application/json' \
    -d "{\"model\":\"gemma-3-270m-q4_k_m\",\"prompt\":\"$(head -c 6000 /tmp/long.txt | tr -d '\"\\\n' ) Question $i:\",\"max_tokens\":16,\"temperature\":0}" > "/tmp/c$i.json" &
  pids+=($!)
done
wait "${pids[@]}"
grep -h -o '"finish_reason":"[a-z]*"' /tmp/c*.json | sort | uniq -c
curl -s localhost:8019/metrics | grep -E '^uniprefill_(requests|mixed_steps|kv_blocks|prompt_tokens)' | head -12 | tee "$out/serve_metrics.txt"
kill $pid; wait $pid 2>/dev/null
# At most 8 files come back from the GPU machine: the small ones travel as one archive.
(cd "$out" && tar -czf small.tgz --remove-files gpu.txt run_cuda.* run_cpu.txt serve*.json serve.log serve_metrics.txt 2>/dev/null)
echo "== done"
