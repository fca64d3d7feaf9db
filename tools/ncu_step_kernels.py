#!/usr/bin/env python3
"""Where one forward's GPU time goes, by kernel kind, from an Nsight Compute log of
`uniprefill bench step` (`ncu --metrics gpu__time_duration.sum --csv --log-file LOG ...`).

Forwards are told apart by the embedding kernel each starts with; the last forward of the log is
the timed one when the bench ran one mix with --warmup 0 --repeats 1 (the forwards before it
prefill the chunks' prefixes and the decodes' contexts).

  python3 tools/ncu_step_kernels.py LOG.csv [--forward K] [--names N]
      K: the forward's index from the end (default 1); N: also list the N kernels (by name,
      summed over the forward) that took longest
"""
import collections
import csv
import re
import sys

# Kind of a kernel by its name (first match wins).
KINDS = [
    ("gemm", r"nvjet|cublas|gemm|Gemm|splitKreduce"),
    ("attention (prefix / prefill)", r"FlashAttentionWgmma|cudnn|Cudnn|sm90_fmha|FlashAttention"),
    ("attention merge", r"MergeAttention|MergePieces"),
    ("paged decode attention", r"PagedDecode|SplitReduce"),
    ("rms norm", r"RmsNorm"),
    ("rope", r"Rope"),
    ("kv append / slot meta", r"Append|WriteSlotMeta|GatherCacheRows"),
    ("silu * up", r"Gated"),
    ("sampling / logits", r"ArgMax|Sample|Softmax|Bf16ToF32|TopK"),
    ("embedding", r"Embedding"),
]


def kind_of(name):
    for kind, pattern in KINDS:
        if re.search(pattern, name):
            return kind
    return "other"


def kernels(path):
    with open(path) as f:
        lines = [l for l in f if l.startswith('"')]
    out = []
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "ns")
        scale = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}.get(unit, 1e-3)
        out.append((row["Kernel Name"], value * scale))
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    back = int(sys.argv[sys.argv.index("--forward") + 1]) if "--forward" in sys.argv else 1
    ks = kernels(sys.argv[1])
    starts = [i for i, (name, _) in enumerate(ks) if "EmbeddingKernel" in name]
    if len(starts) < back:
        sys.exit(f"{sys.argv[1]}: {len(starts)} forwards found, asked for the {back}th from the end")
    begin = starts[-back]
    end = starts[-back + 1] if back > 1 else len(ks)
    forward = ks[begin:end]
    by_kind = collections.defaultdict(lambda: [0, 0.0])
    for name, us in forward:
        by_kind[kind_of(name)][0] += 1
        by_kind[kind_of(name)][1] += us
    total = sum(us for _, us in forward)
    print(f"{sys.argv[1]}: forward {len(starts) - back + 1} of {len(starts)}, {len(forward)} "
          f"kernels, {total / 1e3:.3f} ms")
    for kind, (n, us) in sorted(by_kind.items(), key=lambda kv: -kv[1][1]):
        print(f"  {kind:<30} {n:5d} kernels {us / 1e3:9.3f} ms  {100 * us / total:5.1f}%")
    top = int(sys.argv[sys.argv.index("--names") + 1]) if "--names" in sys.argv else 0
    if top > 0:
        by_name = collections.defaultdict(lambda: [0, 0.0])
        for name, us in forward:
            short = re.sub(r"\(.*", "", name)[:90]
            by_name[short][0] += 1
            by_name[short][1] += us
        for name, (n, us) in sorted(by_name.items(), key=lambda kv: -kv[1][1])[:top]:
            print(f"    {n:5d} x {us / n:8.1f} us = {us / 1e3:8.3f} ms  {name}")


if __name__ == "__main__":
    main()
