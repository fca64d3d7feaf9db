#!/usr/bin/env python3
"""Served steps replayed alone: a step trace (UNIPREFILL_CUDA_STEP_TRACE) to `bench step` mixes,
and the replay's medians against the served forwards' GPU times.

  python3 tools/trace_to_mixes.py mixes TRACE.jsonl[.xz] SERVED.json [--count N]
      prints N of the trace's forwards (spread evenly over those that hold a prefill chunk) as
      one --mixes argument, and writes each mix's served GPU time to SERVED.json
  python3 tools/trace_to_mixes.py compare SERVED.json REPLAY.json
      served GPU ms / replayed median per mix, and their median: near 1 says a served step costs
      what its work costs alone; above 1, serving adds something the mix does not hold

A trace unit is [segment or -1, rows, cached keys, ends segment]: a decode (-1, 1 row) becomes
d1@keys, a dense chunk cR@keys (whether it was its prompt's last, and so ran the head, the trace
does not say), a segment-0 chunk sR@keys. Forwards holding a later segment's chunk are skipped
(bench step has no item for them).
"""
import collections
import json
import lzma
import sys


def load(path):
    opener = lzma.open if path.endswith('.xz') else open
    with opener(path, 'rt') as f:
        return [r for r in map(json.loads, f) if 'gpu_ms' in r and 'units' in r]


def mix_of(units):
    decodes = collections.Counter()
    chunks = []
    for segment, rows, keys, _ in units:
        if segment == -1 and rows == 1:
            decodes[keys] += 1
        elif segment == -1:
            chunks.append(f"c{rows}@{keys}")
        elif segment == 0:
            chunks.append(f"s{rows}@{keys}")
        else:
            return None
    if not chunks:
        return None
    return "+".join([f"d{n}@{k}" for k, n in sorted(decodes.items())] + chunks)


def mixes(trace, served_path, count):
    forwards = [(mix_of(r['units']), r['gpu_ms']) for r in load(trace)]
    forwards = [(m, ms) for m, ms in forwards if m]
    if not forwards:
        sys.exit(f"{trace}: no forward with a dense or segment-0 prefill chunk")
    step = max(1, len(forwards) // count)
    chosen = forwards[::step][:count]
    with open(served_path, 'w') as f:
        json.dump([{'mix': m, 'served_gpu_ms': ms} for m, ms in chosen], f, indent=1)
    print("; ".join(m for m, _ in chosen))


def compare(served_path, replay_path):
    served = json.load(open(served_path))
    replay = {r['mix']: r for r in json.load(open(replay_path))['rows']}
    ratios = []
    for s in served:
        r = replay.get(s['mix'])
        if not r or 'forward_ms_median' not in r:
            print(f"{s['mix']}: not replayed")
            continue
        ratio = s['served_gpu_ms'] / r['forward_ms_median']
        ratios.append(ratio)
        print(f"{s['mix']:<60} served {s['served_gpu_ms']:8.2f} ms  alone "
              f"{r['forward_ms_median']:8.2f} ms  x{ratio:.3f}")
    if ratios:
        print(f"median served / alone: {sorted(ratios)[len(ratios) // 2]:.3f} over {len(ratios)}")


if __name__ == '__main__':
    if len(sys.argv) >= 4 and sys.argv[1] == 'mixes':
        n = int(sys.argv[sys.argv.index('--count') + 1]) if '--count' in sys.argv else 8
        mixes(sys.argv[2], sys.argv[3], n)
    elif len(sys.argv) == 4 and sys.argv[1] == 'compare':
        compare(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
