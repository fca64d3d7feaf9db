# Sourced by every call of the 9th session: binaries, libraries, cuDNN 9.28 parts kept in /tmp.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p /tmp/b /tmp/l /tmp/cparts /tmp/r
[ -x /tmp/b/uniprefill ] || tar -C /tmp/b -xJf .gpu_carry/bins.tar.xz
[ -d /tmp/l/lib ] || tar -C /tmp/l -xJf .gpu_carry/lib.tar.xz
for p in .cudnn/p*; do [ -f "$p" ] && cp -n "$p" /tmp/cparts/; done
OLD_CUDNN=$(dirname "$(find / -name 'libcudnn.so.9' -not -path '/tmp/*' 2>/dev/null | head -1)")
BASE_LD=/tmp/l/lib:$(dirname "$(find / -name 'libcublasLt.so.13' 2>/dev/null | head -1)"):/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$BASE_LD:$OLD_CUDNN
export UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD NCCL_NVLS_ENABLE=0
R=/tmp/r
# cuDNN 9.28 (PyPI nvidia-cudnn-cu13 9.28.1.4), assembled once all parts are here.
new_cudnn() {
  if [ ! -f /tmp/cdn/libcudnn.so.9 ]; then
    mkdir -p /tmp/cdn && cat /tmp/cparts/p* | tar -C /tmp/cdn -xf - && (cd /tmp/cdn && xz -d -T0 *.xz)
  fi
  ls -la /tmp/cdn
}
