#!/usr/bin/env python3
"""What each added part of a step costs, from `uniprefill bench step --json` output.

For every pair of mixes A, B of one run where B holds A's items plus others (items compared as
written, e.g. "c1024@16384", "d4@32768"), prints B's median minus A's: the cost of the added
items beside A. Also fits the mixes made of one dense chunk `cR@K` at one depth K to
ms = a + b * R (the forward's constant a and its per-row cost b), where at least three row counts
were run.

  python3 tools/step_marginals.py step.json [more.json ...]
"""
import collections
import json
import re
import sys


def items_of(mix):
    return collections.Counter(p.strip().replace(" ", "") for p in mix.split("+"))


def fit_line(points):
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - b * mx, b


def report(path):
    with open(path) as f:
        run = json.load(f)
    rows = [r for r in run["rows"] if "forward_ms_median" in r]
    print(f"# {path}: {run.get('shape')} on {run.get('device')}, budget {run.get('budget')}, "
          f"commit {run.get('commit') or '?'}")
    med = {r["mix"]: r["forward_ms_median"] for r in rows}
    bags = {r["mix"]: items_of(r["mix"]) for r in rows}
    lines = []
    for a in med:
        for b in med:
            if a == b:
                continue
            extra = bags[b] - bags[a]
            if bags[a] - bags[b] or not extra:
                continue  # B does not hold all of A, or adds nothing
            added = "+".join(sorted(extra.elements()))
            lines.append((added, a, b, med[b] - med[a]))
    for added, a, b, delta in sorted(lines):
        print(f"  {added:<24} beside {a:<32} {delta:+9.3f} ms  ({med[a]:.3f} -> {med[b]:.3f})")
    by_depth = collections.defaultdict(list)
    for mix, ms in med.items():
        m = re.fullmatch(r"c(\d+)@(\d+)", mix.replace(" ", ""))
        if m:
            by_depth[int(m.group(2))].append((int(m.group(1)), ms))
    for depth, pts in sorted(by_depth.items()):
        if len(pts) >= 3:
            fit = fit_line(sorted(pts))
            if fit:
                a, b = fit
                print(f"  dense chunks over {depth} cached tokens: {a:.3f} ms + {1e3 * b:.3f} us "
                      f"per row ({len(pts)} row counts)")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        report(p)
