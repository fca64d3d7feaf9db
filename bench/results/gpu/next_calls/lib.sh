# Sourced by the prepared calls (S, R, S2, T, U): what each call's start repeated.
# call_begin: the clock, $OUT, NCCL's NVLink multicast off (the device README says why), and
# which card this is ($OUT/gpu.txt, printed: figures are compared only on the same kind).
call_begin() {
  t0=$(date +%s)
  mkdir -p "$OUT"
  export NCCL_NVLS_ENABLE=0
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total \
    --format=csv > "$OUT/gpu.txt"
  cat "$OUT/gpu.txt"
}
# Seconds since call_begin.
elapsed() { echo $(( $(date +%s) - t0 )); }
# The uniprefill binary in build-dev-new, built when this machine has none yet (a cold start).
ensure_uniprefill() {
  use_pack && return 0
  [ -x build-dev-new/uniprefill ] && return 0
  UP_GPU_TARGETS="uniprefill" bash scripts/gpu_build.sh build build-dev-new > /tmp/build.log 2>&1
  echo "build rc $? at $(elapsed) s"
}
# The 16 GB bf16 8B-shape checkpoint in /tmp/l8b, written in the background when missing
# (~170 s); wait_checkpoint before serving it.
start_checkpoint() {
  [ -f /tmp/l8b/config.json ] && return 0
  ( python3 tools/make_synthetic_checkpoint.py --preset llama-3.1-8b --dtype bf16 --out /tmp/l8b \
      > /tmp/ckpt.txt 2>&1; echo "checkpoint rc $? at $(elapsed) s" ) &
  ckpt_pid=$!
}
wait_checkpoint() { if [ -n "${ckpt_pid:-}" ]; then wait "$ckpt_pid"; fi; }
# build_and_test TARGETS FILTER [TIMEOUT]: build TARGETS into build-dev-new (build.txt), then run
# the CUDA tests FILTER names (tests.txt, assets the machine lacks skipped) and print the verdict.
build_and_test() {
  if ! use_pack; then
    UP_GPU_TARGETS="$1" bash scripts/gpu_build.sh build build-dev-new > $OUT/build.txt 2>&1
    echo "build rc $? at $(elapsed) s"
  fi
  export UNIPREFILL_ALLOW_MISSING_ASSETS=1 UP_SOURCE_DIR=$PWD
  timeout "${3:-120}" build-dev-new/uniprefill_cuda_tests --gtest_brief=1 --gtest_filter="$2" \
    > $OUT/tests.txt 2>&1
  echo "tests rc $? at $(elapsed) s"; grep -E "^\[  PASSED|^\[  FAILED|FAILED  \]" $OUT/tests.txt
}
# pack_out: a call returns at most 8 files from $OUT (the device README); past that, every .txt
# but gpu.txt and summary.txt goes into texts.tar.xz (call X lost its tests.txt and bench step
# tables to the limit in the 28th session). Call it last.
pack_out() {
  local n
  n=$(find "$OUT" -maxdepth 1 -type f | wc -l)
  [ "$n" -le 8 ] && return 0
  (cd "$OUT" && ls *.txt 2>/dev/null | grep -vxE 'gpu.txt|summary.txt' > /tmp/pack_list.txt &&
    tar -cJf texts.tar.xz -T /tmp/pack_list.txt && xargs rm -f < /tmp/pack_list.txt)
  echo "pack_out: $n files; the texts in texts.tar.xz"
}
# prefill_beside_anchor: our `bench gpu-prefill` (llama-3.1-8b, 8K / 32K / 128K, dense and keep
# 0.5) then ANCHOR_SDPA=cudnn's PyTorch anchor, back to back, nvidia-smi sampling the clock and
# power (clocks.csv) and phases.txt marking when each ran; needs build-dev-new/uniprefill and
# .gpu_deps/anchor/pytorch_anchor.py. Calls AF and AI.
prefill_beside_anchor() {
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader -lms 100 \
    > $OUT/clocks.csv 2>&1 &
  local sampler=$!
  echo "ours from $(date +%s%3N)" > $OUT/phases.txt
  build-dev-new/uniprefill bench gpu-prefill --commit "$(git rev-parse --short HEAD)" \
    --shape llama-3.1-8b --contexts 8192,32768,131072 --keep-ratios 0.5 --repeats 2 \
    --json $OUT/llama8b_b1.json > $OUT/ours.txt 2>&1
  echo "ours rc $? at $(elapsed) s"; cat $OUT/ours.txt
  echo "anchor from $(date +%s%3N)" >> $OUT/phases.txt
  ANCHOR_SDPA=cudnn PYTHONUNBUFFERED=1 timeout $(( ${DEADLINE:-585} - $(elapsed) )) \
    python3 .gpu_deps/anchor/pytorch_anchor.py 8192 32768 131072 > $OUT/anchor_cudnn.jsonl 2>&1
  echo "anchor rc $? at $(elapsed) s"; cat $OUT/anchor_cudnn.jsonl
  echo "end $(date +%s%3N)" >> $OUT/phases.txt
  kill $sampler
}
# use_pack: where `bash scripts/gpu_cycle.sh pack` was run here on these sources and .gpu_carry is
# carried, its binaries (built for sm_90 here, xz-compressed: ~6 MB each) go into build-dev-new/
# and their libraries into /tmp/uniprefill-libs, so that the call builds nothing (a cold build of
# both binaries is 80-200 s of device time). Returns 1 (and the call builds) where there is no
# pack or it was built from other sources (scripts/source_digest.sh). The mutation check still
# needs a build folder.
use_pack() {
  local carry=${UP_GPU_CARRY:-.gpu_carry}
  [ -f "$carry/uniprefill.xz" ] || return 1
  # The same sources by content (a device call's copy of the checkout has a HEAD of its own).
  [ "$(cat "$carry/sources" 2>/dev/null)" = "$(bash scripts/source_digest.sh)" ] ||
    { echo "use_pack: $carry was built from other sources (commit $(cat "$carry/commit")): building"; return 1; }
  mkdir -p build-dev-new /tmp/uniprefill-libs
  tar -C /tmp/uniprefill-libs -xJf "$carry/lib.tar.xz"
  for b in uniprefill uniprefill_cuda_tests; do
    xz -dc "$carry/$b.xz" > "build-dev-new/$b" && chmod +x "build-dev-new/$b"
  done
  export LD_LIBRARY_PATH=/tmp/uniprefill-libs/lib:${LD_LIBRARY_PATH:-}
  if ! ldconfig -p | grep -q libcublasLt.so.13; then
    local lt
    lt=$(find / -name 'libcublasLt.so.13*' -not -path '/proc/*' 2>/dev/null | head -1 || true)
    [ -n "$lt" ] && export LD_LIBRARY_PATH=$(dirname "$lt"):$LD_LIBRARY_PATH
  fi
  # A pack whose binary does not start here (a library missing) is no use: build instead.
  build-dev-new/uniprefill --help > /dev/null 2>&1 ||
    { echo "use_pack: the unpacked uniprefill does not start: building"; rm -f build-dev-new/uniprefill build-dev-new/uniprefill_cuda_tests; return 1; }
  echo "use_pack: binaries of $(cat "$carry/commit") unpacked at $(elapsed) s"
}
# prefill_ab VAR NEW OLD: `bench gpu-prefill` (8B shape, 32K / 128K, dense and keep 0.5) with VAR
# set to NEW and to OLD, arms new old old new (llama8b_ARM.json, ours_ARM.txt), then the cuDNN
# anchor at the same sizes (anchor_cudnn.jsonl); nvidia-smi samples the clock and power meanwhile
# (clocks.csv.xz), phases.txt marks each part. Needs build-dev-new/uniprefill and
# .gpu_deps/anchor/pytorch_anchor.py. Calls AW, AZ and BA wrote the same steps out by hand.
prefill_ab() {
  local var=$1 new=$2 old=$3 commit arm value
  commit=$(cat .gpu_carry/commit 2>/dev/null || git rev-parse --short HEAD)
  nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader -lms 100 \
    > /tmp/clocks.csv 2>&1 &
  local sampler=$!
  for arm in new1 old1 old2 new2; do
    value=$new; [[ $arm == old* ]] && value=$old
    echo "$arm ($var=$value) from $(date +%s%3N)" >> $OUT/phases.txt
    env "$var=$value" build-dev-new/uniprefill bench gpu-prefill --commit "$commit" \
      --shape llama-3.1-8b --contexts 32768,131072 --keep-ratios 0.5 --repeats 1 \
      --json $OUT/llama8b_$arm.json > $OUT/ours_$arm.txt 2>&1
    echo "$arm rc $? at $(elapsed) s"; grep -E "^(context|[0-9]+ )" $OUT/ours_$arm.txt | head -6
  done
  echo "cudnn anchor from $(date +%s%3N)" >> $OUT/phases.txt
  ANCHOR_SDPA=cudnn PYTHONUNBUFFERED=1 timeout 150 python3 .gpu_deps/anchor/pytorch_anchor.py \
    32768 131072 > $OUT/anchor_cudnn.jsonl 2>&1
  echo "cudnn anchor rc $? at $(elapsed) s"; cat $OUT/anchor_cudnn.jsonl
  echo "anchor end $(date +%s%3N)" >> $OUT/phases.txt
  kill $sampler
  xz -c /tmp/clocks.csv > $OUT/clocks.csv.xz
}
