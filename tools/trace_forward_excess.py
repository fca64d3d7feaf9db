#!/usr/bin/env python3
"""What a long prompt's chunked forwards cost over whole-prefill rates, from a served step trace
(UNIPREFILL_CUDA_STEP_TRACE, scripts/gpu_serve_mixed.sh TRACE=1).

The long prompt's forwards are those holding a chunk over at least --min-cached cached keys (or
of at least 4096 rows); the first --forwards of them are one prompt's prefill (the dense run's,
when the server served dense first). Each forward's GPU time is set against a model at
whole-prefill rates: every prefill chunk's rows at --gemm-us-per-row (the layers' GEMMs) plus
its row-key pairs at --attn-ns-per-pair (r (p + r / 2) pairs, causal within the chunk). What is
left is the forward's excess: the decodes' own work, the small kernels, idle time.

  python3 tools/trace_forward_excess.py TRACE.jsonl [--forwards 252] [--min-cached 2048]
      [--gemm-us-per-row 20] [--attn-ns-per-pair 0.851] [--whole WHOLE.jsonl]
      [--prompt-tokens 130000] [--fit]

--prompt-tokens N takes the forwards up to the one whose chunk reaches N tokens (the first
prompt of that length, e.g. the dense run's, whatever its number of forwards).

With phases in the trace (UNIPREFILL_CUDA_STEP_TRACE_PHASES=1, scripts/gpu_serve_mixed.sh
PHASES=1) it also sums the chosen forwards' GPU time by walk phase (attention holds its qkv and
o GEMMs, ffn its three; finish the LM head and sampling), and with --whole (the whole run's
trace) sets them against the whole prompt's forward: where the chunked forwards' excess lies.
With the kernel view (UNIPREFILL_CUDA_STEP_TRACE_KERNELS=1, KERNELS=1 in the script) it sums
the forwards' GPU time in kernels, copies and memsets (busy) and between them (idle), counts
the largest gaps' neighbours, and (traces since the 27th session) lists the kernels by name:
launches a forward, their own time and the idle time before them, beside whole's, and their sums
by kind (attention kernels, GEMMs, the rest, idle) with the excess over whole's. --fit fits
each forward's GPU time (and each phase's) as c + a rows + b row-key pairs: c, what a forward
costs whatever its size, is what fewer forwards would save.

Defaults: the 8B shape on the H200 (24th session): GEMMs 20 us a row (32 layers at ~700 TFLOP/s),
attention 0.851 ns a row-key pair (32 layers x 16,384 FLOP at 616 TFLOP/s, Nsight Compute).
"""
import argparse
import collections
import json
import statistics


def long_forwards(path, min_cached, forwards, prompt_tokens=0):
    """(forward, its long unit) for the forwards holding a long prompt's chunk, the first
    `forwards` of them (0: all), or with `prompt_tokens` those up to the chunk that reaches it."""
    with open(path) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    chosen = []
    for s in (l for l in lines if "units" in l):
        long_units = [u for u in s["units"] if u[1] > 1 and (u[2] >= min_cached or u[1] >= 4096)]
        if long_units:
            chosen.append((s, long_units[0]))
            if prompt_tokens and long_units[0][2] + long_units[0][1] >= prompt_tokens:
                break
    if forwards:
        chosen = chosen[:forwards]
    if not chosen:
        raise SystemExit(f"{path}: no forward holds a chunk over {min_cached} cached keys")
    return chosen


def phase_totals(chosen):
    """Each phase's GPU ms summed over the forwards, phases in first-seen order; None when a
    forward has no phases."""
    totals = {}
    for s, _ in chosen:
        if "phases" not in s:
            return None
        for name, ms in s["phases"].items():
            totals[name] = totals.get(name, 0.0) + ms
    return totals


def print_phases(chosen, whole_path, min_cached):
    totals = phase_totals(chosen)
    if totals is None:
        return
    whole = None
    if whole_path:
        whole = phase_totals(long_forwards(whole_path, min_cached, 1))
        if whole is None:
            raise SystemExit(f"{whole_path}: its long forward has no phases")
    print(f"  {'phase':>18} {'chunked s':>10}" + (f" {'whole s':>8} {'excess s':>9}" if whole else ""))
    names = list(totals) + [n for n in (whole or {}) if n not in totals]
    for name in names:
        c = totals.get(name, 0.0) / 1e3
        line = f"  {name:>18} {c:>10.3f}"
        if whole is not None:
            w = whole.get(name, 0.0) / 1e3
            line += f" {w:>8.3f} {c - w:>+9.3f}"
        print(line)


def print_kernels(chosen, whole_path, min_cached):
    def sums(forwards):
        if any("kernels" not in s for s, _ in forwards):
            return None
        k = [s["kernels"] for s, _ in forwards]
        return {"activities": sum(x["n"] for x in k), "busy s": sum(x["busy_ms"] for x in k) / 1e3,
                "idle s": sum(x["gap_ms"] for x in k) / 1e3, "gaps": sum(x["gaps"] for x in k)}
    mine = sums(chosen)
    if mine is None:
        return
    whole = sums(long_forwards(whole_path, min_cached, 1)) if whole_path else None
    print(f"  {'kernels':>18} {'chunked':>10}" + (f" {'whole':>8}" if whole else ""))
    for key in mine:
        fmt = (lambda v: f"{v:.3f}") if key.endswith(" s") else (lambda v: f"{v:d}")
        print(f"  {key:>18} {fmt(mine[key]):>10}" + (f" {fmt(whole[key]):>8}" if whole else ""))
    # Who borders the largest gaps (each forward's three), most frequent pairs first.
    pairs = collections.Counter()
    for s, _ in chosen:
        for ms, before, after in s["kernels"]["largest_gaps"]:
            pairs[(before[:40], after[:40])] += 1
    for (before, after), n in pairs.most_common(5):
        print(f"    {n:5d} x largest gaps after {before} before {after}")
    print_kernel_names(chosen, long_forwards(whole_path, min_cached, 1) if whole_path else None)


def kernel_names(forwards):
    """name -> [count, own ms, idle ms before] summed over the forwards' kernel views (traces
    since the 27th session: "by_name"), or None where a forward has none."""
    totals = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for s, _ in forwards:
        if "by_name" not in s.get("kernels", {}):
            return None
        for name, n, ms, idle in s["kernels"]["by_name"]:
            t = totals[name[:48]]
            t[0] += n
            t[1] += ms
            t[2] += idle
    return totals


def kernel_category(name):
    """The attention kernels, the GEMMs (cuBLASLt's nvjet / CUTLASS kernels and split-K reduces)
    or the rest (norms, activations, RoPE, appends, merges, copies, memsets)."""
    low = name.lower()
    if "attention" in low and "merge" not in low:
        return "attention kernels"
    if "nvjet" in low or "gemm" in low or "splitk" in low or "cutlass" in low:
        return "GEMMs"
    return "other kernels, copies"


def category_totals(totals):
    """kernel_names' totals -> {category: own seconds} and the idle seconds before them."""
    out = collections.OrderedDict((c, 0.0) for c in
                                  ("attention kernels", "GEMMs", "other kernels, copies"))
    for name, (_, ms, _) in totals.items():
        out[kernel_category(name)] += ms / 1e3
    out["idle between kernels"] = sum(idle for _, _, idle in totals.values()) / 1e3
    return out


def print_kernel_names(chosen, whole_forwards, top=14):
    mine = kernel_names(chosen)
    if mine is None:
        return
    whole = kernel_names(whole_forwards) if whole_forwards else None
    # Where the chunked forwards' GPU time goes by kind of kernel, and over whole's.
    cats, whole_cats = category_totals(mine), category_totals(whole) if whole else None
    print(f"  {'GPU seconds by kind':>48} {'chunked':>8}"
          + (f" {'whole':>8} {'excess':>8}" if whole_cats else ""))
    for c, v in cats.items():
        print(f"  {c:>48} {v:>8.3f}" + (f" {whole_cats[c]:>8.3f} {v - whole_cats[c]:>+8.3f}"
                                          if whole_cats else ""))
    print(f"  {'kernel (by own + idle-before time)':>48} {'n/fwd':>6} {'own s':>7} {'idle s':>7}"
          + (f" {'whole own s':>11}" if whole else ""))
    ranked = sorted(mine.items(), key=lambda kv: -(kv[1][1] + kv[1][2]))
    for name, (n, ms, idle) in ranked[:top]:
        line = f"  {name:>48} {n / len(chosen):>6.1f} {ms / 1e3:>7.3f} {idle / 1e3:>7.3f}"
        if whole is not None:
            line += f" {whole.get(name, [0, 0.0, 0.0])[1] / 1e3:>11.3f}"
        print(line)
    rest = ranked[top:]
    if rest:
        print(f"  {f'{len(rest)} more names':>48} {sum(v[0] for _, v in rest) / len(chosen):>6.1f} "
              f"{sum(v[1] for _, v in rest) / 1e3:>7.3f} {sum(v[2] for _, v in rest) / 1e3:>7.3f}")


def least_squares(xs, ys):
    """The coefficients minimising |X c - y| for rows xs (lists of equal length), by the normal
    equations and Gaussian elimination with partial pivoting (no numpy on the device's python)."""
    n = len(xs[0])
    m = [[sum(x[i] * x[j] for x in xs) for j in range(n)] + [sum(x[i] * y for x, y in zip(xs, ys))]
         for i in range(n)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        if m[col][col] == 0:
            raise SystemExit("--fit: the forwards do not vary enough in rows and depth to fit")
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [v - f * w for v, w in zip(m[r], m[col])]
    return [m[i][n] / m[i][i] for i in range(n)]


def print_fit(chosen):
    """Each forward's GPU ms (and each phase's, with phases) as c + a rows + b pairs, rows the
    forward's prefill rows and pairs its chunks' row-key pairs in millions (r (p + r / 2)):
    c is what a forward costs whatever its size, what fewer forwards would save."""
    xs = []
    for s, _ in chosen:
        chunks = [u for u in s["units"] if u[1] > 1]
        rows = sum(u[1] for u in chunks)
        pairs = sum(u[1] * (u[2] + u[1] / 2) for u in chunks) / 1e6
        xs.append([1.0, rows, pairs])
    series = {"forward (GPU ms)": [s["gpu_ms"] for s, _ in chosen]}
    if all("phases" in s for s, _ in chosen):
        names = []
        for s, _ in chosen:
            names += [n for n in s["phases"] if n not in names]
        for n in names:
            series[n] = [s["phases"].get(n, 0.0) for s, _ in chosen]
    print(f"  fit over {len(chosen)} forwards: ms = c + a rows + b (million row-key pairs)")
    print(f"  {'':>18} {'c ms':>8} {'a us/row':>9} {'b ms/M':>8} {'rms ms':>7} {'c total s':>9}")
    for name, ys in series.items():
        c, a_, b = least_squares(xs, ys)
        rms = (sum((c + a_ * x[1] + b * x[2] - y) ** 2 for x, y in zip(xs, ys)) / len(ys)) ** 0.5
        print(f"  {name:>18} {c:>8.3f} {a_ * 1e3:>9.3f} {b:>8.4f} {rms:>7.3f} "
              f"{c * len(ys) / 1e3:>9.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--forwards", type=int, default=0, help="0: every such forward")
    ap.add_argument("--min-cached", type=int, default=2048)
    ap.add_argument("--gemm-us-per-row", type=float, default=20.0)
    ap.add_argument("--attn-ns-per-pair", type=float, default=0.851)
    ap.add_argument("--prompt-tokens", type=int, default=0,
                    help="stop at the forward whose chunk reaches this many tokens (0: off)")
    ap.add_argument("--whole", help="the whole run's trace: its first long forward's phases "
                    "beside the chosen forwards' (needs phases in both)")
    ap.add_argument("--fit", action="store_true",
                    help="least-squares fit of the forwards' GPU ms (and each phase's) as "
                    "c + a rows + b million row-key pairs: the fixed cost a forward")
    a = ap.parse_args()
    chosen = long_forwards(a.trace, a.min_cached, a.forwards, a.prompt_tokens)

    def model_ms(rows, cached):
        return rows * a.gemm_us_per_row * 1e-3 + rows * (cached + rows / 2) * a.attn_ns_per_pair * 1e-6

    by_depth = collections.defaultdict(list)
    total_gpu = total_model = 0.0
    for s, lu in chosen:
        chunks = [u for u in s["units"] if u[1] > 1]
        model = sum(model_ms(u[1], u[2]) for u in chunks)
        decodes = sum(1 for u in s["units"] if u[1] == 1)
        excess = s["gpu_ms"] - model
        total_gpu += s["gpu_ms"]
        total_model += model
        by_depth[lu[2] // 16384].append((excess, lu[1], decodes, s["gpu_ms"]))
    print(f"{a.trace}: {len(chosen)} forwards, GPU {total_gpu / 1e3:.3f} s, at whole-prefill "
          f"rates {total_model / 1e3:.3f} s, excess {(total_gpu - total_model) / 1e3:.3f} s "
          f"({(total_gpu - total_model) / len(chosen):.1f} ms a forward)")
    print(f"  {'cached keys':>14} {'forwards':>8} {'rows p50':>8} {'decodes p50':>11} "
          f"{'GPU ms p50':>10} {'excess ms p50':>13}")
    for d in sorted(by_depth):
        v = by_depth[d]
        print(f"  {d * 16:>6}K-{(d + 1) * 16:>4}K {len(v):>8} "
              f"{statistics.median(x[1] for x in v):>8.0f} "
              f"{statistics.median(x[2] for x in v):>11.0f} "
              f"{statistics.median(x[3] for x in v):>10.1f} "
              f"{statistics.median(x[0] for x in v):>13.1f}")
    print_phases(chosen, a.whole, a.min_cached)
    print_kernels(chosen, a.whole, a.min_cached)
    if a.fit:
        print_fit(chosen)


if __name__ == "__main__":
    main()
