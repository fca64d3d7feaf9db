#!/usr/bin/env bash
# Builds the GGUF libFuzzer target with clang (ASan + UBSan), seeds a corpus and fuzzes.
#
#   scripts/fuzz_gguf.sh [seconds=600]        (JOBS=2 runs two fuzzers on a shared corpus)
#
# Seeds: tiny valid GGUF files written below (every metadata value type, nested arrays, a tensor of
# every dequantizable type) plus, when the real model is present, its first 64 KiB (a truncated
# header: real keys, the start of the token array). Crash inputs land in build-fuzz/artifacts/;
# replay one with `build-fuzz/gguf_fuzzer <file>` and add it to tests/io/gguf_test.cc.
set -euo pipefail

SECONDS_TO_RUN="${1:-600}"
JOBS="${JOBS:-1}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="$ROOT/build-fuzz"
CORPUS="$BUILD/corpus"
ARTIFACTS="$BUILD/artifacts"

CC=clang-14 CXX=clang++-14 cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DUNIPREFILL_FUZZ=ON -DUNIPREFILL_TESTS=OFF -DUNIPREFILL_BENCH=OFF >/dev/null
ninja -C "$BUILD" gguf_fuzzer

mkdir -p "$CORPUS" "$ARTIFACTS"
python3 - "$CORPUS" <<'PY'
import struct, sys, os
out = sys.argv[1]

def s(x):
    b = x.encode()
    return struct.pack('<Q', len(b)) + b

def kv(key, t, payload):
    return s(key) + struct.pack('<I', t) + payload

def arr(et, elems):
    return struct.pack('<IQ', et, len(elems)) + b''.join(elems)

def gguf(kvs, tensors, align=32, version=3):
    head = b'GGUF' + struct.pack('<IQQ', version, len(tensors), len(kvs)) + b''.join(kvs)
    infos, data = b'', b''
    for name, dims, ttype, blob in tensors:
        off = (len(data) + align - 1) // align * align
        data = data.ljust(off, b'\0') + blob
        infos += s(name) + struct.pack('<I', len(dims)) + b''.join(struct.pack('<Q', d) for d in dims)
        infos += struct.pack('<IQ', ttype, off)
    body = head + infos
    if tensors:
        body = body.ljust((len(body) + align - 1) // align * align, b'\0') + data
    return body

scalars = [
    kv('general.architecture', 8, s('gemma3')),
    kv('a.u8', 0, struct.pack('<B', 7)), kv('a.i8', 1, struct.pack('<b', -7)),
    kv('a.u16', 2, struct.pack('<H', 700)), kv('a.i16', 3, struct.pack('<h', -700)),
    kv('a.u32', 4, struct.pack('<I', 70000)), kv('a.i32', 5, struct.pack('<i', -70000)),
    kv('a.f32', 6, struct.pack('<f', 1.5)), kv('a.bool', 7, b'\x01'),
    kv('a.u64', 10, struct.pack('<Q', 1 << 40)), kv('a.i64', 11, struct.pack('<q', -(1 << 40))),
    kv('a.f64', 12, struct.pack('<d', 2.25)),
    kv('tokenizer.ggml.tokens', 9, arr(8, [s('<pad>'), s('a'), s('b')])),
    kv('tokenizer.ggml.scores', 9, arr(6, [struct.pack('<f', -1.0)] * 3)),
    kv('nested', 9, arr(9, [arr(4, [struct.pack('<I', 1)]), arr(8, [s('x')])])),
]
# Block sizes / bytes of the dequantizable types: F32 0, F16 1, Q4_0 2, Q4_1 3, Q5_0 6, Q5_1 7,
# Q8_0 8, Q4_K 12, Q5_K 13, Q6_K 14, BF16 30.
types = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
         12: (256, 144), 13: (256, 176), 14: (256, 210), 30: (1, 2), 10: (256, 84)}
tensors = []
for t, (be, bb) in types.items():
    blob = bytes((i * 37 + t) & 0xFF for i in range(bb * 2))
    tensors.append(('t%d.weight' % t, [be, 2], t, blob))
seeds = {
    'valid_all_types.gguf': gguf(scalars, tensors),
    'valid_kv_only.gguf': gguf(scalars, []),
    'valid_v2_align64.gguf': gguf([kv('general.alignment', 4, struct.pack('<I', 64))] + scalars[:3],
                                  tensors[:3], align=64, version=2),
    'valid_empty.gguf': gguf([], []),
    'valid_3d.gguf': gguf([], [('x', [4, 3, 2], 0, bytes(4 * 24))]),
}
for name, blob in seeds.items():
    with open(os.path.join(out, name), 'wb') as f:
        f.write(blob)
PY
for model in "$ROOT/models/gemma-3-270m-q4_k_m.gguf" /tmp/gemma.gguf; do
  if [[ -f "$model" ]]; then
    head -c 65536 "$model" > "$CORPUS/real_model_head_64k.gguf"
    break
  fi
done
# A dictionary of GGUF tokens helps mutations hit the magic, versions, the alignment key and type ids.
cat > "$BUILD/gguf.dict" <<'DICT'
"GGUF"
"\x03\x00\x00\x00"
"\x02\x00\x00\x00"
"general.alignment"
"general.architecture"
"tokenizer.ggml.tokens"
"\x11\x00\x00\x00\x00\x00\x00\x00general.alignment\x04\x00\x00\x00"
"\x09\x00\x00\x00"
"\x08\x00\x00\x00"
"\x0c\x00\x00\x00"
"\x0e\x00\x00\x00"
"\xff\xff\xff\xff\xff\xff\xff\xff"
"\x00\x00\x00\x00\x00\x00\x00\x10"
DICT
echo "corpus: $(ls "$CORPUS" | wc -l) files; fuzzing for ${SECONDS_TO_RUN}s on ${JOBS} job(s)"

ARGS=(-max_total_time="$SECONDS_TO_RUN" -max_len=65536 -timeout=10 -rss_limit_mb=2048
      -print_final_stats=1 -dict="$BUILD/gguf.dict" -artifact_prefix="$ARTIFACTS/")
start=$(date +%s)
pids=()
for ((j = 0; j < JOBS; ++j)); do
  "$BUILD/gguf_fuzzer" "${ARGS[@]}" "$CORPUS" >"$BUILD/fuzz-$j.log" 2>&1 &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=$?; done
elapsed=$(( $(date +%s) - start ))

execs=0
for ((j = 0; j < JOBS; ++j)); do
  n=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$BUILD/fuzz-$j.log" | awk '{print $2}' |
      tail -1)
  if [[ -z "$n" ]]; then  # a crash stops the run before the final stats: use the last status line
    n=$(grep -o '^#[0-9]*' "$BUILD/fuzz-$j.log" | tr -d '#' | tail -1)
  fi
  execs=$(( execs + ${n:-0} ))
done
crashes=$(find "$ARTIFACTS" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
          -o -name 'oom-*' \) | wc -l)
echo "duration_s=$elapsed jobs=$JOBS executions=$execs exec_per_s=$(( execs / (elapsed > 0 ? elapsed : 1) ))" \
     "corpus_files=$(ls "$CORPUS" | wc -l) crash_artifacts=$crashes fuzzer_exit=$status"
if (( crashes > 0 )); then
  echo "crash inputs:"; find "$ARTIFACTS" -type f
  exit 1
fi
