#!/usr/bin/env bash
# One GPU cycle: build, run the CUDA tests, run the GPU benchmarks beside the PyTorch anchor, and
# write every result as JSON under a results folder.
#
#   bash scripts/gpu_cycle.sh pack                # here (any machine with nvcc): build for sm_90
#                                                 # and pack binaries + their libraries into
#                                                 # .gpu_carry/ (git-ignored) to send along
#   bash scripts/gpu_cycle.sh run OUTDIR [STAGE...]     # on the GPU machine; stages: tests llama
#                                                 # anchor cudnn decode batch gemma qwen (default:
#                                                 # tests llama anchor)
#   bash scripts/gpu_cycle.sh build-run OUTDIR [STAGE...]   # on the GPU machine, self-contained:
#                                                 # build there (scripts/gpu_build.sh, carry
#                                                 # .gpu_deps), then `run` the stages with that build
#
# UP_GPU_BUILD (default build-gpu) and UP_GPU_CARRY (default .gpu_carry) name the build folder and
# the packed folder, so that several people sharing one checkout can pack side by side (the carry
# folder must be git-ignored, e.g. build-NAME-carry, and named in the device call's carry list).
#
# Why pack here: the GPU machine has nvcc, cmake and ninja but not the engine's Debian libraries
# (OpenBLAS, cpp-httplib, GoogleTest), and device time is scarce; the binaries link the CUDA
# runtime statically and take cuBLASLt from the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
build=${UP_GPU_BUILD:-build-gpu}
carry=${UP_GPU_CARRY:-.gpu_carry}
case "$mode" in
  pack)
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DUNIPREFILL_CUDA=ON \
      -DUNIPREFILL_NATIVE=OFF -DUNIPREFILL_BENCH=OFF >/tmp/uniprefill-gpu-cmake.log 2>&1 ||
      { cat /tmp/uniprefill-gpu-cmake.log; exit 1; }
    cmake --build "$build" -j "$(nproc)" --target uniprefill uniprefill_cuda_tests
    rm -rf "$carry" && mkdir -p "$carry/anchor"
    # Compressed: the two binaries are ~30 MB each, ~6 MB each under xz, and a device call carries
    # at most 64 MiB.
    for b in uniprefill uniprefill_cuda_tests; do xz -T0 -6 -c "$build/$b" > "$carry/$b.xz"; done
    bash scripts/pack_shared_libs.sh "$carry" "$build/uniprefill" "$build/uniprefill_cuda_tests"
    if [ -f ../shared/bench/pytorch_anchor.py ]; then cp ../shared/bench/pytorch_anchor.py "$carry/anchor/"; fi
    git rev-parse --short HEAD > "$carry/commit" 2>/dev/null || echo unknown > "$carry/commit"
    bash scripts/source_digest.sh > "$carry/sources"
    du -sh "$carry"
    ;;
  build-run)
    out=${2:?usage: build-run OUTDIR STAGE...}
    shift 2
    bash scripts/gpu_build.sh build /tmp/uniprefill-gpu-build
    bindir=/tmp/uniprefill-gpu-bin
    rm -rf "$bindir" && mkdir -p "$bindir"
    cp /tmp/uniprefill-gpu-build/uniprefill /tmp/uniprefill-gpu-build/uniprefill_cuda_tests "$bindir/"
    if [ -d "$carry/anchor" ]; then cp -r "$carry/anchor" "$bindir/"; fi
    git rev-parse --short HEAD > "$bindir/commit" 2>/dev/null || echo unknown > "$bindir/commit"
    UP_GPU_CARRY=$bindir exec bash "$0" run "$out" "$@"
    ;;
  run)
    # Stages (any of): tests llama anchor batch gemma qwen; "quick" = tests + an 8K Llama point.
    out=${2:?usage: run OUTDIR STAGE...}
    shift 2
    stages=" ${*:-tests llama anchor} "
    mkdir -p "$out" /tmp/uniprefill-libs
    # Packed binaries bring their libraries; a build-run's carry an RPATH into its prefix.
    if [ -f "$carry/lib.tar.xz" ]; then tar -C /tmp/uniprefill-libs -xJf "$carry/lib.tar.xz"; fi
    for b in uniprefill uniprefill_cuda_tests; do
      if [ -f "$carry/$b.xz" ]; then xz -dc "$carry/$b.xz" > "/tmp/uniprefill-libs/$b" &&
        chmod +x "/tmp/uniprefill-libs/$b"; fi
    done
    export LD_LIBRARY_PATH=/tmp/uniprefill-libs/lib:${LD_LIBRARY_PATH:-}
    # cuBLASLt: the system's, else the copy inside PyTorch's wheels.
    if ! ldconfig -p | grep -q libcublasLt.so.13; then
      lt=$(find / -name 'libcublasLt.so.13*' -not -path '/proc/*' 2>/dev/null | head -1 || true)
      [ -n "$lt" ] && export LD_LIBRARY_PATH=$(dirname "$lt"):$LD_LIBRARY_PATH
    fi
    bin=$carry
    [ -f "$carry/uniprefill.xz" ] && bin=/tmp/uniprefill-libs  # unpacked there, above
    commit=$(cat "$carry/commit")
    # UP_CONTEXTS: the Llama / anchor contexts (default 8K, 32K, 128K); UP_ATTENTION: the prefill
    # attention kernel of every bench (ours or cudnn; the cudnn stage always runs cudnn).
    contexts=${UP_CONTEXTS:-8192,32768,131072}
    bench() {
      "$bin/uniprefill" bench gpu-prefill --commit "$commit" --attention "${UP_ATTENTION:-ours}" "$@"
    }
    nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,driver_version --format=csv | tee "$out/gpu.txt"
    if [[ $stages == *" tests "* || $stages == *" quick "* ]]; then
      echo "== CUDA tests"
      "$bin/uniprefill_cuda_tests" --gtest_filter='*Cuda*' --gtest_output="json:$out/cuda_tests.json" \
        > "$out/cuda_tests.log" 2>&1 || true
      grep -E '^\[  (FAILED|PASSED|SKIPPED) |^\[==========\]|Failure|error' "$out/cuda_tests.log" | tail -40
      echo "== flash attention throughput"
      "$bin/uniprefill_cuda_tests" --gtest_also_run_disabled_tests \
        --gtest_filter='CudaFlashAttentionTest.DISABLED_*' 2>&1 | { grep -iE 'tflop|error|FAIL' || true; } | tee "$out/flash_throughput.log"
      echo "== MoE throughput"
      "$bin/uniprefill_cuda_tests" --gtest_also_run_disabled_tests \
        --gtest_filter='CudaMoeTest.DISABLED_*' 2>&1 | { grep -iE 'tflop|error|FAIL' || true; } | tee "$out/moe_throughput.log"
    fi
    if [[ $stages == *" quick "* ]]; then
      bench --shape llama-3.1-8b --contexts 8192 --repeats 2 --compare-sync --json "$out/llama8b_quick.json"
    fi
    if [[ $stages == *" llama "* ]]; then
      echo "== Llama-3.1-8B shape, batch 1"
      bench --shape llama-3.1-8b --contexts "$contexts" --repeats 2 --compare-sync \
        --json "$out/llama8b_b1.json"
    fi
    if [[ $stages == *" anchor "* && -f "$carry/anchor/pytorch_anchor.py" ]]; then
      echo "== PyTorch anchor"
      PYTHONUNBUFFERED=1 python3 "$carry/anchor/pytorch_anchor.py" ${UP_ANCHOR_CONTEXTS:-${contexts//,/ }} |
        tee "$out/anchor.jsonl"
    fi
    if [[ $stages == *" cudnn "* ]]; then
      # Our walk with cuDNN's fused attention, its kernel rate, and the anchor on cuDNN attention
      # (the bar issue 17 sets), in the same call as the stages above.
      echo "== Llama-3.1-8B shape, batch 1, --attention cudnn"
      UP_ATTENTION=cudnn bench --shape llama-3.1-8b --contexts "$contexts" --repeats 3 \
        --json "$out/llama8b_b1_cudnn.json"
      "$bin/uniprefill_cuda_tests" --gtest_also_run_disabled_tests \
        --gtest_filter='CudnnAttentionTest.*' 2>&1 | { grep -iE 'tflop|error|FAIL' || true; } |
        tee "$out/cudnn_throughput.log"
      if [ -f "$carry/anchor/pytorch_anchor.py" ]; then
        echo "== PyTorch anchor, cuDNN attention"
        ANCHOR_SDPA=cudnn PYTHONUNBUFFERED=1 python3 "$carry/anchor/pytorch_anchor.py" ${contexts//,/ } |
          tee "$out/anchor_cudnn.jsonl"
      fi
    fi
    if [[ $stages == *" decode "* ]]; then
      echo "== decode, Llama-3.1-8B shape: host vs on-device token choice"
      "$bin/uniprefill" bench gpu-decode --commit "$commit" --shape llama-3.1-8b --contexts 1024 \
        --batch-sizes 1,32 --graphs off,on --json "$out/decode_1k.json" || true
      "$bin/uniprefill" bench gpu-decode --commit "$commit" --shape llama-3.1-8b --contexts 32768 \
        --batch-sizes 4 --graphs off --json "$out/decode_32k.json" || true
    fi
    if [[ $stages == *" batch "* ]]; then
      echo "== Llama-3.1-8B shape, batches 4 and 16"
      bench --shape llama-3.1-8b --contexts 8192,32768 --batch-sizes 4,16 --keep-ratios 0.5 \
        --repeats 2 --json "$out/llama8b_batch.json"
    fi
    if [[ $stages == *" gemma "* ]]; then
      echo "== Gemma-3-12B shape"
      bench --shape gemma-3-12b --contexts 32768,131072 --repeats 2 --json "$out/gemma3_12b.json"
    fi
    if [[ $stages == *" qwen "* ]]; then
      echo "== Qwen3-Next-80B-A3B shape (256 of 512 experts), batch 1"
      bench --shape qwen3-next-80b-a3b --contexts 32768,131072 --keep-ratios 0.5,0.3 --repeats 2 \
        --json "$out/qwen3_next.json"
    fi
    ;;
  *)
    echo "usage: bash scripts/gpu_cycle.sh pack | run OUTDIR [STAGE...] | build-run OUTDIR [STAGE...] (stages: tests quick llama anchor cudnn decode batch gemma qwen)" >&2
    exit 2
    ;;
esac
