#!/usr/bin/env bash
# Builds uniprefill (CUDA on) on the GPU machine itself, which has nvcc, cmake, ninja and g++ but
# neither the engine's Debian libraries nor any way to reach a package registry (docs/gpu_build.md).
#
#   bash scripts/gpu_build.sh fetch                  # here (Debian, registry reachable): download
#                                                    # the .deb files into .gpu_deps/ (git-ignored)
#   bash scripts/gpu_build.sh build BUILD_DIR [CMAKE_ARG...]   # there: unpack .gpu_deps/*.deb into
#                                                    # a private prefix (never into /), configure
#                                                    # (Release, CUDA on, sm_90) and build
#                                                    # uniprefill + uniprefill_cuda_tests
#
# Call the device tool with carry [".gpu_deps"]. The built binaries carry an RPATH into the prefix,
# so they run with no LD_LIBRARY_PATH; BUILD_DIR/gpu_env.sh exports one anyway (for other tools).
# Environment: UP_GPU_DEPS (default .gpu_deps), UP_GPU_PREFIX (default /tmp/uniprefill-deps),
# UP_GPU_TARGETS (default "uniprefill uniprefill_cuda_tests"), UP_GPU_CONFIGURE_ONLY=1 (stop
# after configuring: a dry run on any machine with nvcc).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DEPS=${UP_GPU_DEPS:-.gpu_deps}
PREFIX=${UP_GPU_PREFIX:-/tmp/uniprefill-deps}
ARCH_TRIPLET=x86_64-linux-gnu

# What CMakeLists.txt finds (pkg-config: openblas, cpp-httplib; CMake config: CLI11, nlohmann_json,
# GTest), what those need at compile time (cpp-httplib's pkg-config file requires openssl, zlib and
# brotli, whose headers httplib.h includes), at link and run time (shared libraries), and pkg-config
# itself. libc6, libstdc++6 and libgcc-s1 are the GPU machine's own (newer than Debian 12's).
PACKAGES=(
  libopenblas-pthread-dev libopenblas0-pthread libgfortran5 libquadmath0   # OpenBLAS + its Fortran runtime
  libcpp-httplib-dev libcpp-httplib0.11                                      # cpp-httplib (compiled)
  libssl-dev libssl3 zlib1g-dev zlib1g libbrotli-dev libbrotli1              # cpp-httplib's Requires.private
  nlohmann-json3-dev libcli11-dev libgtest-dev                               # header-only / static
  pkgconf-bin libpkgconf3                                                    # pkg-config
)

mode=${1:-}
case "$mode" in
  fetch)
    mkdir -p "$DEPS"
    grep -qxF "/$DEPS/" .git/info/exclude 2>/dev/null || echo "/$DEPS/" >> .git/info/exclude
    rm -f "$DEPS"/*.deb
    (cd "$DEPS" && apt-get download "${PACKAGES[@]}") >/tmp/uniprefill-gpu-fetch.log 2>&1 || {
      cat /tmp/uniprefill-gpu-fetch.log
      echo "gpu_build fetch: apt-get download failed (try 'apt-get update' first)" >&2
      exit 1
    }
    n=$(find "$DEPS" -maxdepth 1 -name '*.deb' | wc -l)
    if [ "$n" -ne "${#PACKAGES[@]}" ]; then
      echo "gpu_build fetch: expected ${#PACKAGES[@]} .deb files, got $n" >&2
      exit 1
    fi
    # Plain file names (the epoch's '%3a', '+' and '~' go); the manifest keeps the real ones.
    (cd "$DEPS" && for f in *.deb; do
      echo "$f"; g=$(echo "$f" | sed 's/%3a/_/g; s/[^A-Za-z0-9._-]/_/g'); [ "$f" = "$g" ] || mv "$f" "$g"
    done) > "$DEPS/MANIFEST"
    # cuDNN's headers and the cuDNN frontend's (scripts/setup.sh fetched those into third_party/):
    # the GPU machine has libcudnn.so.9 but no headers; cuDNN attention loads the library at run time.
    rm -rf "$DEPS/cudnn" && mkdir -p "$DEPS/cudnn/include"
    if ls /usr/local/cuda/include/cudnn*.h >/dev/null 2>&1; then
      cp /usr/local/cuda/include/cudnn*.h "$DEPS/cudnn/include/"
    fi
    if [ -f third_party/cudnn_frontend/include/cudnn_frontend.h ]; then
      mkdir -p "$DEPS/cudnn/frontend" && cp -r third_party/cudnn_frontend/include "$DEPS/cudnn/frontend/"
    else
      # Said loudly: a build without cuDNN attention runs (our kernels take every layer) but is
      # not the product's default, and its timings are not comparable.
      echo "gpu_build fetch: WARNING: no cuDNN frontend headers in third_party/ (run" \
           "scripts/setup.sh first, then fetch again): builds from these deps have no cuDNN" \
           "attention" >&2
    fi
    # CUTLASS's headers (setup.sh fetched them): the FFN's gated GEMM.
    rm -rf "$DEPS/cutlass"
    if [ -f third_party/cutlass/include/cutlass/cutlass.h ]; then
      mkdir -p "$DEPS/cutlass" && cp -r third_party/cutlass/include "$DEPS/cutlass/"
    fi
    # CUPTI's headers and library, for the step trace's kernel view
    # (UNIPREFILL_CUDA_STEP_TRACE_KERNELS=1): the engine loads libcupti only when that asks.
    rm -rf "$DEPS/cupti" && mkdir -p "$DEPS/cupti/include" "$DEPS/cupti/lib"
    if ls /usr/local/cuda/include/cupti*.h >/dev/null 2>&1; then
      cp /usr/local/cuda/include/cupti*.h "$DEPS/cupti/include/"
      cupti_lib=$(find -L /usr/local/cuda/ -name 'libcupti.so.13' 2>/dev/null | head -1 || true)
      [ -n "$cupti_lib" ] && cp -L "$cupti_lib" "$DEPS/cupti/lib/"
    fi
    if [ ! -f "$DEPS/cudnn/include/cudnn.h" ]; then
      echo "gpu_build fetch: WARNING: no cudnn.h under /usr/local/cuda/include: builds from" \
           "these deps have no cuDNN attention" >&2
    fi
    echo "gpu_build fetch: $n packages, $(du -sh "$DEPS" | cut -f1) in $DEPS/"
    ;;

  build)
    build=${2:?usage: bash scripts/gpu_build.sh build BUILD_DIR [CMAKE_ARG...]}
    shift 2
    case "$build" in /*) ;; *) build="$ROOT/$build" ;; esac
    ls "$DEPS"/*.deb >/dev/null 2>&1 ||
      { echo "gpu_build: no .deb files in $DEPS/ (run 'bash scripts/gpu_build.sh fetch' here and carry $DEPS)" >&2; exit 1; }
    case "$PREFIX" in ""|/|//) echo "gpu_build: refusing to unpack into '/'" >&2; exit 1 ;; esac
    t0=$(date +%s)

    # 1. Unpack every package into the prefix (dpkg-deb -x runs no maintainer scripts).
    rm -rf "$PREFIX" && mkdir -p "$PREFIX"
    for deb in "$DEPS"/*.deb; do
      if command -v dpkg-deb >/dev/null; then
        dpkg-deb -x "$deb" "$PREFIX"
      else   # no dpkg: a .deb is an ar archive holding data.tar.*
        tmp=$(mktemp -d) && deb_abs=$(readlink -f "$deb")
        (cd "$tmp" && ar x "$deb_abs" && tar -C "$PREFIX" -xf data.tar.*) && rm -rf "$tmp"
      fi
    done
    P=$PREFIX/usr
    LIBDIR=$P/lib/$ARCH_TRIPLET
    BLASDIR=$LIBDIR/openblas-pthread
    # Absolute symbolic links (e.g. libz.so -> /lib/.../libz.so.1) point into the prefix instead.
    find "$PREFIX" -type l | while read -r link; do
      target=$(readlink "$link")
      if [[ $target == /* ]]; then ln -sfn "$PREFIX$target" "$link"; fi
    done
    # What the postinst scripts would have made: OpenBLAS's alternatives (libopenblas.so.0 and
    # openblas.pc live in openblas-pthread/ only).
    ln -sfn openblas-pthread/libopenblas.so.0 "$LIBDIR/libopenblas.so.0"
    # pkg-config files name /usr (prefix=/usr, and openblas.pc's absolute libdir/includedir).
    find "$PREFIX" -name '*.pc' -print0 |
      xargs -0 sed -i -E "s#(=[[:space:]]*|-I|-L)/(usr|lib)(/|[[:space:]]|\$)#\1$PREFIX/\2\3#g"
    if find "$PREFIX" -name '*.pc' -exec grep -HE '(=|-I|-L)[[:space:]]*/(usr|lib)(/|[[:space:]]|$)' {} + ; then
      echo "gpu_build: the .pc files above still name /usr" >&2; exit 1
    fi
    LIBDIRS="$BLASDIR:$LIBDIR:$PREFIX/lib/$ARCH_TRIPLET"
    PKGDIRS="$BLASDIR/pkgconfig:$LIBDIR/pkgconfig:$P/share/pkgconfig"

    # 2. Tools: the prefix's pkgconf (searching only the prefix), the machine's nvcc.
    export PKG_CONFIG_LIBDIR=$PKGDIRS
    export PKG_CONFIG_PATH=
    cat > "$PREFIX/pkg-config" <<EOF
#!/bin/sh
LD_LIBRARY_PATH=$LIBDIR\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} PKG_CONFIG_LIBDIR=$PKGDIRS exec $P/bin/pkgconf "\$@"
EOF
    chmod +x "$PREFIX/pkg-config"
    "$PREFIX/pkg-config" --exists openblas cpp-httplib ||
      { "$PREFIX/pkg-config" --print-errors --exists openblas cpp-httplib; exit 1; }
    nvcc=$(command -v nvcc || true)
    [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
    [ -n "$nvcc" ] || { echo "gpu_build: no nvcc on PATH or in /usr/local/cuda/bin" >&2; exit 1; }
    cuda_root=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
    extra_inc="-isystem $P/include/$ARCH_TRIPLET"   # openssl/configuration.h (multiarch)
    cuda_args=()
    # cuBLASLt: the toolkit's, else the copy in a pip wheel (nvidia-cublas), found by file name.
    if ! ls "$cuda_root"/lib64/libcublasLt.so "$cuda_root"/targets/x86_64-linux/lib/libcublasLt.so >/dev/null 2>&1; then
      lt=$(find / -name 'libcublasLt.so*' -not -path '/proc/*' -not -path "$PREFIX/*" 2>/dev/null | sort | head -1 || true)
      [ -n "$lt" ] || { echo "gpu_build: no libcublasLt.so anywhere" >&2; exit 1; }
      echo "gpu_build: cuBLASLt from $lt"
      cuda_args+=(-DCUDA_cublasLt_LIBRARY="$lt")
      LIBDIRS="$LIBDIRS:$(dirname "$lt")"
      if ! ls "$cuda_root"/include/cublasLt.h "$cuda_root"/targets/x86_64-linux/include/cublasLt.h >/dev/null 2>&1; then
        h=$(find "$(dirname "$(dirname "$lt")")" / -name cublasLt.h -not -path '/proc/*' 2>/dev/null | head -1 || true)
        [ -n "$h" ] && extra_inc="$extra_inc -isystem $(dirname "$h")"
      fi
    fi

    # cuDNN attention: the carried headers (fetch), when present.
    if [ -f "$DEPS/cudnn/include/cudnn.h" ] && [ -f "$DEPS/cudnn/frontend/include/cudnn_frontend.h" ]; then
      deps_abs=$(readlink -f "$DEPS")
      cuda_args+=(-DUP_CUDNN_INCLUDE="$deps_abs/cudnn/include"
                  -DUP_CUDNN_FRONTEND_INCLUDE="$deps_abs/cudnn/frontend/include")
    fi

    if [ -f "$DEPS/cutlass/include/cutlass/cutlass.h" ]; then
      cuda_args+=(-DUP_CUTLASS_INCLUDE="$(readlink -f "$DEPS")/cutlass/include")
    fi

    # The step trace's kernel view: CUPTI's carried headers, its library beside the prefix's (on
    # the binaries' RPATH, where dlopen finds it).
    if [ -f "$DEPS/cupti/include/cupti_activity.h" ]; then
      cuda_args+=(-DUP_CUPTI_INCLUDE="$(readlink -f "$DEPS")/cupti/include")
      if [ -f "$DEPS/cupti/lib/libcupti.so.13" ]; then
        cp "$DEPS/cupti/lib/libcupti.so.13" "$LIBDIR/"
      fi
    fi

    # 3. Configure: packages from the prefix first; RPATH (not RUNPATH, so that libopenblas finds
    # libgfortran through it too) into the prefix, so the binaries need no LD_LIBRARY_PATH.
    rpath=${LIBDIRS//:/;}
    mkdir -p "$build"
    cmake -S "$ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DUNIPREFILL_CUDA=ON -DUNIPREFILL_NATIVE=OFF -DUNIPREFILL_BENCH=OFF \
      -DCMAKE_CUDA_COMPILER="$nvcc" "${cuda_args[@]}" \
      -DCMAKE_PREFIX_PATH="$P" -DPKG_CONFIG_EXECUTABLE="$PREFIX/pkg-config" \
      -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
      -DCMAKE_CXX_FLAGS="$extra_inc" -DCMAKE_CUDA_FLAGS="$extra_inc" \
      -DCMAKE_BUILD_RPATH="$rpath" \
      -DCMAKE_EXE_LINKER_FLAGS="-Wl,--disable-new-dtags -Wl,-rpath-link,$LIBDIRS" \
      "$@" >/tmp/uniprefill-gpu-build-cmake.log 2>&1 ||
      { cat /tmp/uniprefill-gpu-build-cmake.log; echo "gpu_build: cmake configure failed" >&2; exit 1; }
    grep -E 'uniprefill:|Found' /tmp/uniprefill-gpu-build-cmake.log || true
    t1=$(date +%s)
    if [ "${UP_GPU_CONFIGURE_ONLY:-0}" = 1 ]; then echo "gpu_build: configured $build"; exit 0; fi

    # 4. Build (gtest_discover_tests runs the test binary after linking: the RPATH covers it).
    targets=${UP_GPU_TARGETS:-uniprefill uniprefill_cuda_tests}
    # shellcheck disable=SC2086
    cmake --build "$build" -j "$(nproc)" --target $targets
    t2=$(date +%s)
    cat > "$build/gpu_env.sh" <<EOF
# Source this to run tools that are not built here against the unpacked libraries.
export LD_LIBRARY_PATH=$LIBDIRS\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
EOF
    echo "gpu_build: unpack+configure $((t1 - t0)) s, build $((t2 - t1)) s on $(nproc) cores"
    echo "gpu_build: run the binaries directly (RPATH into $PREFIX), e.g."
    echo "  $build/uniprefill_cuda_tests --gtest_filter='*Cuda*'"
    echo "  $build/uniprefill bench gpu-prefill --shape llama-3.1-8b --contexts 8192"
    echo "  (other tools: source $build/gpu_env.sh, or LD_LIBRARY_PATH=$LIBDIRS)"
    ;;

  *)
    echo "usage: bash scripts/gpu_build.sh fetch | build BUILD_DIR [CMAKE_ARG...]" >&2
    exit 2
    ;;
esac
