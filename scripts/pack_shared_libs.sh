#!/usr/bin/env bash
# Packs every shared library the given binaries need, except glibc, the C++ runtime and CUDA's
# own (the GPU machine has those), into OUT/lib.tar.xz: what a device call needs beside binaries
# built here (`gpu_cycle.sh pack`, `gpu_mutations.sh pack`).
#   bash scripts/pack_shared_libs.sh OUT BINARY...
set -euo pipefail
out=${1:?usage: pack_shared_libs.sh OUT BINARY...}
shift
[ $# -gt 0 ] || { echo "usage: pack_shared_libs.sh OUT BINARY..." >&2; exit 2; }
rm -rf "$out/lib" && mkdir -p "$out/lib"
ldd "$@" | awk '/=> \//{print $3}' | sort -u |
  grep -Ev '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux[^/]*|libcublas[^/]*|libcudart[^/]*|libcuda)\.so' |
  while read -r lib; do cp -L "$lib" "$out/lib/"; done
tar -C "$out" -cJf "$out/lib.tar.xz" lib && rm -rf "$out/lib"
