#!/usr/bin/env python3
"""Where the GPU idles inside one forward, from an Nsight Systems GPU trace of
`uniprefill bench step` (`nsys stats -r cuda_gpu_trace -f csv -o PREFIX REPORT.nsys-rep`).

Forwards are told apart by the embedding kernel each starts with; the last is reported (or the
K-th from the end): its span from the first kernel's start to the last one's end, the kernels'
and copies' busy time, the idle time between them, and the longest idle stretches with the
kernel that ended each.

  python3 tools/nsys_forward_gaps.py TRACE.csv [--forward K] [--top N]
"""
import csv
import sys


def column(header, *names):
    for name in names:
        for i, h in enumerate(header):
            if h.strip().lower().startswith(name.lower()):
                return i
    sys.exit(f"no column like {names} in {header}")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    back = int(sys.argv[sys.argv.index("--forward") + 1]) if "--forward" in sys.argv else 1
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 12
    with open(sys.argv[1]) as f:
        rows = list(csv.reader(f))
    header = rows[0]
    start_col = column(header, "Start")
    dur_col = column(header, "Duration")
    name_col = column(header, "Name")
    ops = sorted((int(float(r[start_col])), int(float(r[dur_col])), r[name_col])
                 for r in rows[1:] if len(r) > max(start_col, dur_col, name_col))
    starts = [i for i, (_, _, name) in enumerate(ops) if "EmbeddingKernel" in name]
    if len(starts) < back:
        sys.exit(f"{sys.argv[1]}: {len(starts)} forwards found, asked for the {back}th from the end")
    begin = starts[-back]
    end = starts[-back + 1] if back > 1 else len(ops)
    forward = ops[begin:end]
    span = forward[-1][0] + forward[-1][1] - forward[0][0]
    busy, gaps, reach = 0, [], forward[0][0]
    for i, (start, dur, name) in enumerate(forward):
        if start > reach and i > 0:
            gaps.append((start - reach, forward[i - 1][2], name))
        busy += max(0, start + dur - max(start, reach))
        reach = max(reach, start + dur)
    idle = span - busy
    print(f"{sys.argv[1]}: forward {len(starts) - back + 1} of {len(starts)}, {len(forward)} "
          f"kernels and copies, span {span / 1e6:.3f} ms, busy {busy / 1e6:.3f} ms, idle "
          f"{idle / 1e6:.3f} ms in {len(gaps)} gaps")
    for gap, before, after in sorted(gaps, reverse=True)[:top]:
        print(f"  {gap / 1e3:9.1f} us after {before[:60]}  before {after[:60]}")
    small = sum(g for g, _, _ in gaps if g < 20_000)
    print(f"  gaps under 20 us: {small / 1e6:.3f} ms")
    # The forward's small host-to-device uploads (PinnedStaging::Put, one per array): each is an
    # in-stream copy between kernels, and the gaps around them are what they cost.
    copies = [(start, dur) for start, dur, name in forward if "memcpy" in name.lower()]
    around = sum(g for g, before, after in gaps
                 if "memcpy" in before.lower() or "memcpy" in after.lower())
    print(f"  copies: {len(copies)}, {sum(d for _, d in copies) / 1e6:.3f} ms busy, "
          f"{around / 1e6:.3f} ms of gaps next to them")


if __name__ == "__main__":
    main()
