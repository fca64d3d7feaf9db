#!/usr/bin/env python3
"""Summarises a directory of served GPU runs (scripts/gpu_serve_mixed.sh's OUTDIR, or a results
folder of them): per serve_<variant>_<workload>.json and mode, each class's TTFT p50 (and its
ratio to the `whole` variant's of the same workload, mode and class, issue 18's measure) and ITL
p50 / p99; per trace_<variant>.jsonl[.xz] (UNIPREFILL_CUDA_STEP_TRACE), what PrepareServing
measured, the GPU's time in forwards and idle between them, the host's launch time, and the
forwards holding a prefill chunk of fewer than 128 rows that does not end its segment beside
another prompt's chunk (SchedulerConfig::min_extra_chunk_rows keeps them out on CUDA; a dense
prompt's last chunk, which the rule allows, counts too: the trace does not mark it).

    python3 tools/serve_summary.py DIR
"""
import glob
import json
import lzma
import os
import sys


def runs(root):
    rows = []  # (variant, workload, mode, class, summary or None)
    for f in sorted(glob.glob(os.path.join(root, 'serve_*.json'))):
        name = os.path.basename(f)[len('serve_'):-len('.json')]
        variant, _, workload = name.rpartition('_')
        if os.path.getsize(f) == 0:  # its server died before the workload finished
            print(f"{name:24s} (empty: no result)")
            continue
        for m in json.load(open(f))['modes']:
            classes = m.get('classes') or {'all': m['summary']}
            for c, v in classes.items():
                rows.append((variant, workload, m['mode'], c, v))
    whole = {(w, m, c): v['ttft_s'].get('p50') for (var, w, m, c, v) in rows if var == 'whole'}
    for variant, workload, mode, c, v in rows:
        name = f"{variant}_{workload}"
        ttft, itl = v['ttft_s'], v['itl_s']
        if ttft.get('p50') is None or itl.get('p50') is None:  # every request failed
            print(f"{name:24s} {mode:10s} {c:5s} no request finished")
            continue
        base = whole.get((workload, mode, c))
        ratio = f" ({ttft['p50'] / base:.3f}x whole)" if base and variant != 'whole' else ""
        print(f"{name:24s} {mode:10s} {c:5s} TTFT p50 {ttft['p50']:7.3f} s{ratio}  "
              f"ITL p50 {itl['p50'] * 1e3:5.1f} p99 {itl['p99'] * 1e3:6.1f} ms")


def traces(root):
    for f in sorted(glob.glob(os.path.join(root, 'trace_*.jsonl*'))):
        opener = lzma.open if f.endswith('.xz') else open
        with opener(f, 'rt') as fh:
            rows = [json.loads(line) for line in fh]
        notes = [r for r in rows if 'gpu_ms' not in r]
        fw = [r for r in rows if 'gpu_ms' in r]
        if not fw:
            continue
        big = [r for r in fw if r['rows'] >= 256]
        median = lambda key: sorted(r[key] for r in big)[len(big) // 2] if big else 0.0
        print(f"{os.path.basename(f)}: {len(fw)} forwards ({sum(not r['synced'] for r in fw)} "
              f"without a host sync); GPU busy {sum(r['gpu_ms'] for r in fw) / 1e3:.1f} s, idle "
              f"between forwards {sum(max(r['gpu_idle_before_ms'], 0) for r in fw[1:]) / 1e3:.1f}"
              + (f" s (the trace's own time on the engine's thread "
                 f"{sum(r['host_trace_ms'] for r in fw) / 1e3:.1f} s); "
                 if all('host_trace_ms' in r for r in fw) else " s; ") +
              f"forwards of >= 256 rows: host launch p50 {median('host_launch_ms'):.2f} ms, GPU "
              f"idle before p50 {median('gpu_idle_before_ms'):.2f} ms")
        prefill = lambda u: not (u[0] == -1 and u[1] == 1)  # a decode: segment -1, one row
        pieces = [r for r in fw
                  if sum(map(prefill, r.get('units', []))) > 1 and
                  any(prefill(u) and u[1] < 128 and not u[3] for u in r['units'])]
        if any('units' in r for r in fw):
            print(f"  forwards with a sub-tile chunk beside another prompt's: {len(pieces)}, "
                  f"median {sorted(r['gpu_ms'] for r in pieces)[len(pieces) // 2] if pieces else 0:.1f}"
                  f" ms (forwards of >= 256 rows: median {median('gpu_ms'):.1f} ms)")
        for n in notes:
            print('  measured:', json.dumps(n))


if __name__ == '__main__':
    root = sys.argv[1] if len(sys.argv) > 1 else '.'
    runs(root)
    traces(root)
