#!/usr/bin/env python3
"""Draws the GPU prefill-throughput figure (in the style of the UniPrefill paper's Figure 1).

Reads the GPU benchmark results in bench/results/gpu/ (llama8b_b1.json, gemma3_12b.json,
qwen3_next.json and, when present, the PyTorch anchor's anchor.jsonl, the anchor on cuDNN attention
anchor_cudnn.jsonl, our run with cuDNN attention llama8b_b1_cudnn.json and with our wgmma
attention (the default since 2026-12-04) llama8b_b1_wgmma.json, the last three from one device call
(bench/results/gpu/issue17_wgmma/), drawn as markers on the Llama panel) and writes
<out>.png and <out>.svg: prompt tokens
per second (context * batch / TTFT) against context length, dense vs UniPrefill keep 0.5 / keep 0.3,
one panel per architecture, batch-1 rows only. Needs matplotlib (.venv/bin/pip install matplotlib).

  .venv/bin/python tools/plot_gpu_prefill.py [--results-dir bench/results/gpu]
                                             [--out bench/results/gpu/prefill_throughput_families]

One device call's results alone (ours and the anchors from the same call, e.g. the 33rd session's
H100 call AP, which is bench/results/gpu/prefill_throughput.png, Figure 1; the three-family figure
of mixed dates is prefill_throughput_families.png; the panels whose files the folder lacks are
skipped):

  .venv/bin/python tools/plot_gpu_prefill.py --results-dir bench/results/gpu/session33/callAP \
      --out bench/results/gpu/session33/callAP/prefill_throughput_h100
"""
import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CONTEXTS = [8192, 32768, 131072]
MODES = ["dense", "keep0.5", "keep0.3"]
MODE_LABEL = {"dense": "Dense", "keep0.5": "UniPrefill keep 0.5", "keep0.3": "UniPrefill keep 0.3"}
MODE_STYLE = {  # one colour family: dense solid, UniPrefill lighter and hatched
    "dense": dict(facecolor="#1f4e89", edgecolor="#1f4e89", hatch=None),
    "keep0.5": dict(facecolor="#7ea6d8", edgecolor="#1f4e89", hatch="//"),
    "keep0.3": dict(facecolor="#c3d7ef", edgecolor="#1f4e89", hatch="xx"),
}
ANCHOR_KEY = {"dense": "dense_ms", "keep0.5": "drop0.5_ms", "keep0.3": "drop0.3_ms"}
# (file, panel title, whether the PyTorch anchor belongs on this panel)
PANELS = [("llama8b_b1.json", "Llama-3.1-8B shape", True),
          ("gemma3_12b.json", "Gemma-3-12B shape", False),
          ("qwen3_next.json", "Qwen3-Next-80B-A3B shape\n(256 of 512 experts)", False)]


def ctx_label(n: int) -> str:
    return f"{n // 1024}K"


def load_throughputs(path: Path) -> tuple[dict, dict]:
    """Returns ({(context, mode): tokens/s} for batch-1 rows, file metadata)."""
    data = json.loads(path.read_text())
    tput = {}
    for r in data["rows"]:
        if r.get("batch") != 1 or r.get("mode") not in MODES:
            continue
        tput[(r["context"], r["mode"])] = r["context"] * r["batch"] / (r["ttft_ms_median"] / 1000.0)
    return tput, data


def load_anchor(path: Path) -> dict:
    """Returns {(context, mode): tokens/s} from anchor.jsonl (batch 1), or {} if absent."""
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        obj = json.loads(line)
        if "N" not in obj:
            continue
        for mode, key in ANCHOR_KEY.items():
            if obj.get(key):
                out[(obj["N"], mode)] = obj["N"] / (obj[key] / 1000.0)
    return out


# Markers drawn over the bars of the Llama panel: (results key, legend label, marker style).
MARKERS = [
    ("anchor", "PyTorch anchor, flash SDPA (Llama)",
     dict(marker="D", markersize=5.5, markerfacecolor="white", markeredgecolor="black",
          markeredgewidth=1.3)),
    ("anchor_cudnn", "PyTorch anchor, cuDNN SDPA (Llama)",
     dict(marker="D", markersize=5.5, markerfacecolor="black", markeredgecolor="black",
          markeredgewidth=1.3)),
    ("ours_cudnn", "ours with --attention cudnn (Llama)",
     dict(marker="*", markersize=9, markerfacecolor="#e07b00", markeredgecolor="#7a4300",
          markeredgewidth=0.8)),
    ("ours_wgmma", "ours with our wgmma attention, the default (Llama)",
     dict(marker="P", markersize=8, markerfacecolor="#2ca02c", markeredgecolor="#145214",
          markeredgewidth=0.8)),
]


def draw_panel(ax, title: str, tput: dict, markers: dict) -> None:
    width = 0.26
    modes = [m for m in MODES if any(k[1] == m for k in tput)]  # bars centred on what ran
    offsets = {m: (i - (len(modes) - 1) / 2) * width for i, m in enumerate(modes)}
    ymax = max(list(tput.values()) + [v for m in markers.values() for v in m.values()]) / 1e3
    for gi, ctx in enumerate(CONTEXTS):
        dense = tput.get((ctx, "dense"))
        if not any((ctx, m) in tput for m in MODES):
            ax.text(gi, ymax * 0.04, "not run", ha="center", va="bottom", fontsize=9,
                    color="0.45", style="italic")
            continue
        for m in modes:
            v = tput.get((ctx, m))
            if v is None:
                continue
            x = gi + offsets[m]
            ax.bar(x, v / 1e3, width=width, linewidth=1.0, zorder=2, **MODE_STYLE[m])
            if m != "dense" and dense:
                ax.text(x, v / 1e3 + ymax * 0.012, f"{v / dense:.1f}x", ha="center", va="bottom",
                        fontsize=9, fontweight="bold", color="#1f4e89", zorder=4)
            for key, _, style in MARKERS:
                a = markers.get(key, {}).get((ctx, m))
                if a is not None:
                    ax.plot([x], [a / 1e3], linestyle="none", zorder=3, **style)
    ax.set_title(title, fontsize=12, fontweight="bold")
    ax.set_xticks(range(len(CONTEXTS)), [ctx_label(c) for c in CONTEXTS])
    ax.set_xlim(-0.6, len(CONTEXTS) - 0.4)
    ax.set_ylim(0, ymax * 1.12)
    ax.set_xlabel("Context length (tokens)")
    ax.grid(axis="y", color="0.88", linewidth=0.8, zorder=0)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results-dir", type=Path, default=ROOT / "bench/results/gpu")
    ap.add_argument("--out", type=Path,
                    default=ROOT / "bench/results/gpu/prefill_throughput_families",
                    help="output path prefix; .png and .svg are appended")
    args = ap.parse_args()

    llama_markers = {"anchor": load_anchor(args.results_dir / "anchor.jsonl"),
                     "anchor_cudnn": load_anchor(args.results_dir / "anchor_cudnn.jsonl")}
    ours_cudnn = args.results_dir / "llama8b_b1_cudnn.json"
    if ours_cudnn.exists():
        llama_markers["ours_cudnn"] = load_throughputs(ours_cudnn)[0]
    ours_wgmma = args.results_dir / "llama8b_b1_wgmma.json"
    if ours_wgmma.exists():
        llama_markers["ours_wgmma"] = load_throughputs(ours_wgmma)[0]
    llama_markers = {k: v for k, v in llama_markers.items() if v}
    panels, gpus, dates = [], [], []
    for fname, title, with_anchor in PANELS:
        path = args.results_dir / fname
        if not path.exists():
            print(f"plot_gpu_prefill: {path} not found; skipping that panel", file=sys.stderr)
            continue
        tput, meta = load_throughputs(path)
        if not tput:
            print(f"plot_gpu_prefill: no batch-1 rows in {path}; skipping", file=sys.stderr)
            continue
        panels.append((title, tput, llama_markers if with_anchor else {}))
        for lst, key in ((gpus, "gpu"), (dates, "date")):
            if meta.get(key) and meta[key] not in lst:
                lst.append(meta[key])
    if not panels:
        print("plot_gpu_prefill: no results to plot", file=sys.stderr)
        return 1

    plt.rcParams.update({"font.size": 10, "hatch.linewidth": 0.8, "svg.hashsalt": "uniprefill"})
    # One panel (a single call's Llama results) still needs room for the title and legend.
    fig, axes = plt.subplots(1, len(panels), figsize=(max(5.6 * len(panels), 9.5), 4.6),
                             squeeze=False)
    for ax, (title, tput, anc) in zip(axes[0], panels):
        draw_panel(ax, title, tput, anc)
    axes[0][0].set_ylabel("Prefill throughput (K prompt tokens/s)")

    present = {m for _, tput, _ in panels for (_, m) in tput}
    handles = [Patch(label=MODE_LABEL[m], linewidth=1.0, **MODE_STYLE[m])
               for m in MODES if m in present]
    drawn = {key for _, _, markers in panels for key in markers}
    for key, label, style in MARKERS:
        if key in drawn:
            handles.append(Line2D([], [], linestyle="none", label=label, **style))
    ncol = min(len(handles), 4 if len(panels) > 1 else 2)
    fig.legend(handles=handles, loc="upper center", ncol=ncol, frameon=False,
               bbox_to_anchor=(0.5, 0.935 if len(panels) > 1 else 0.9), fontsize=9.5,
               handlelength=2.2)
    sep = " \u2014 " if len(panels) > 1 else "\n"
    fig.suptitle(f"Prefill throughput, batch 1{sep}{'; '.join(gpus) or 'GPU'}"
                 f"{', ' + ', '.join(dates) if dates else ''}", fontsize=12.5, y=0.985)
    fig.tight_layout(rect=(0, 0, 1, 0.9 if len(panels) > 1 else 0.84))

    args.out.parent.mkdir(parents=True, exist_ok=True)
    for ext in ("png", "svg"):
        path = args.out.with_name(args.out.name + "." + ext)
        fig.savefig(path, dpi=160 if ext == "png" else None, metadata={"Date": None} if ext == "svg" else None)
        print(f"plot_gpu_prefill: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
