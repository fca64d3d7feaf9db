#!/usr/bin/env python3
"""Where a served GPU sat idle between forwards, from a step trace (UNIPREFILL_CUDA_STEP_TRACE,
scripts/gpu_serve_mixed.sh TRACE=1): each forward's `gpu_idle_before_ms` (the GPU's idle time
since the previous forward ended: the host's scheduling, bookkeeping and whatever it waited for
before the forward's first launch), summed, and the gaps over --min-ms listed with the forward's
requests, rows and work units ([segment, rows, cached keys, ends segment]).

Gaps of --max-ms or more are left out of the sums: they are the server waiting for requests.

  python3 tools/trace_gpu_idle.py TRACE.jsonl [--min-ms 2] [--max-ms 100] [--list 40]

What to look for (docs/gpu_performance.md, 25th session): gaps of a few ms at forwards whose
request count or depth is a new high were the staging halves regrowing; after the fix they
should be left only where a prompt is admitted.
"""
import argparse
import json


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--min-ms", type=float, default=2.0)
    ap.add_argument("--max-ms", type=float, default=100.0)
    ap.add_argument("--list", type=int, default=40, help="gaps listed (0: none)")
    a = ap.parse_args()
    with open(a.trace) as f:
        forwards = [json.loads(l) for l in f if l.strip()]
    forwards = [x for x in forwards if "gpu_ms" in x]
    gaps = [(i, x) for i, x in enumerate(forwards) if 0 < x["gpu_idle_before_ms"] < a.max_ms]
    big = [(i, x) for i, x in gaps if x["gpu_idle_before_ms"] >= a.min_ms]
    gpu = sum(x["gpu_ms"] for x in forwards)
    print(f"{len(forwards)} forwards, GPU {gpu / 1e3:.3f} s; idle between them (gaps under "
          f"{a.max_ms:g} ms) {sum(x['gpu_idle_before_ms'] for _, x in gaps):.1f} ms; "
          f"{len(big)} gaps of {a.min_ms:g} ms or more: "
          f"{sum(x['gpu_idle_before_ms'] for _, x in big):.1f} ms")
    for i, x in big[: a.list]:
        units = x.get("units", [])
        shown = [u for u in units if u[1] > 1][:3]
        decodes = sum(1 for u in units if u[1] == 1)
        print(f"  #{i:5d} idle {x['gpu_idle_before_ms']:6.1f} ms  requests {x['requests']:3d}  "
              f"rows {x['rows']:5d}  decodes {decodes:3d}  {shown}")


if __name__ == "__main__":
    main()
