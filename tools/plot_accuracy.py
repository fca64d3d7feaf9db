#!/usr/bin/env python3
"""Accuracy vs context length, dense and UniPrefill, from `uniprefill eval ruler` JSON files.

    python3 tools/plot_accuracy.py OUT_PREFIX FILE_OR_DIR... [--default=MODEL=SETTING]
                                                   # writes OUT_PREFIX.png and .svg
    python3 tools/plot_accuracy.py docs/results/accuracy_vs_length results/gpu_accuracy/

Inputs: `eval ruler -o` files (one per length or several lengths each; --keep-ratios adds the
fixed-ratio settings), optionally `bench-prefill --json` files (prefill speedups, used when the
RULER run was batched and so did not time prefills) and `eval fidelity -o` files (top-1 agreement,
printed); directories are searched and .tgz archives read. One panel per model: mean accuracy over
the tasks at each length, dense solid, each UniPrefill setting dashed, every UniPrefill point
labelled with its measured keep ratio and prefill speedup. Also prints the table it plots.
Needs matplotlib (the project's .venv has it).
"""
import io
import json
import os
import re
import sys
import tarfile
from collections import defaultdict


def read_inputs(paths):
    """Yields (name, parsed JSON) for every .json file under paths, .tgz members included."""
    for path in paths:
        if os.path.isdir(path):
            for root, _, files in os.walk(path):
                yield from read_inputs(sorted(os.path.join(root, f) for f in files))
        elif path.endswith(".json"):
            with open(path) as f:
                yield path, json.load(f)
        elif path.endswith((".tgz", ".tar.gz")):
            with tarfile.open(path) as t:
                for m in t.getmembers():
                    if m.isfile() and m.name.endswith(".json"):
                        yield f"{path}:{m.name}", json.load(io.TextIOWrapper(t.extractfile(m)))


def model_name(description):
    # "Gemma 3 270m (gemma3, 18 layers, ...) on cuda:0 (bf16)" -> "Gemma 3 270m"
    return description.split(" (")[0].strip()


def setting_of(uniprefill_description):
    """'keep 0.5' for a fixed ratio given on the command line, else the top-p setting as
    'L15 p0.99' (drop layers, p) from an engine's one-line UniPrefill description, so runs of
    different drop layers (a calibration's candidates, an older default) stay apart."""
    m = re.search(r"fixed-ratio ([0-9.]+)", uniprefill_description)
    if m and "(command line)" in uniprefill_description:
        return f"keep {float(m.group(1)):g}"
    layers = re.search(r"drop layers ([0-9,]+)", uniprefill_description)
    p = re.search(r"top-p ([0-9.]+)", uniprefill_description)
    if layers and p:
        return f"L{layers.group(1).rstrip(',')} p{float(p.group(1)):g}"
    return "default"


def is_fixed(setting):
    return setting.startswith("keep ")


def collect(paths):
    # acc[model][setting][length] = dict(accuracy, dense, keep, speedup)
    acc = defaultdict(lambda: defaultdict(dict))
    speed = defaultdict(dict)  # speed[(model, setting)][length] = speedup (bench-prefill)
    fidelity = defaultdict(dict)  # fidelity[model][setting] = (top-1, KL, greedy, lengths)
    for name, j in read_inputs(paths):
        if not isinstance(j, dict) or "model" not in j:
            continue
        model = model_name(j["model"])
        if j.get("command") == "eval ruler":
            timed = j.get("prefill_timed", True)
            for row in j["per_length"]:
                rows = [(setting_of(j["uniprefill"]), row)] + [
                    (f"keep {r['target_keep_ratio']:g}", r) for r in row.get("fixed_ratio", [])]
                for setting, r in rows:
                    acc[model][setting][row["length"]] = {
                        "dense": r["dense_accuracy"], "accuracy": r["uniprefill_accuracy"],
                        "keep": r["keep_ratio"],
                        "speedup": r["prefill_speedup"] if timed else None,
                        "samples": j["samples_per_cell"], "within_bar": r["within_bar"]}
        elif "runs" in j and "uniprefill" in j:  # bench-prefill
            for r in j["runs"]:
                speed[(model, setting_of(j["uniprefill"]))][r["tokens"]] = r["speedup"]
        elif "prompts" in j and "mean_top1_agreement" in j:  # eval fidelity
            lengths = sorted({p["tokens"] for p in j["prompts"]})
            fidelity[model][setting_of(j["uniprefill"])] = (
                j["mean_top1_agreement"], j["mean_kl"], j["mean_greedy_prefix_agreement"], lengths)
    # Batched RULER runs: speedups from bench-prefill at the nearest length.
    for model, settings in acc.items():
        for setting, points in settings.items():
            for length, p in points.items():
                bench = speed.get((model, setting))
                if p["speedup"] is None and bench:
                    nearest = min(bench, key=lambda t: abs(t - length))
                    if abs(nearest - length) <= 0.1 * length:
                        p["speedup"] = bench[nearest]
    return acc, fidelity


def print_table(acc, fidelity):
    for model, settings in acc.items():
        print(f"{model}")
        print(f"  {'setting':22} {'length':>7} {'samples':>7} {'dense %':>8} {'UniP %':>8} "
              f"{'delta':>6} {'keep':>6} {'speedup':>8}  bar")
        for setting in sorted(settings, key=lambda s: (is_fixed(s), s)):
            for length in sorted(settings[setting]):
                p = settings[setting][length]
                sp = f"{p['speedup']:.2f}x" if p["speedup"] else "-"
                print(f"  {setting:22} {length:>7} {p['samples']:>7} {p['dense']:>8.1f} "
                      f"{p['accuracy']:>8.1f} {p['accuracy'] - p['dense']:>+6.1f} "
                      f"{p['keep']:>6.3f} {sp:>8}  {'within' if p['within_bar'] else 'OUTSIDE'}")
        for setting, (top1, kl, greedy, lengths) in sorted(fidelity.get(model, {}).items()):
            print(f"  fidelity {setting}: top-1 {top1:.3f}, KL {kl:.2e}, greedy {greedy:.3f} "
                  f"(lengths {','.join(map(str, lengths))})")


def plot(acc, out_prefix, defaults):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = sorted(acc)
    fig, axes = plt.subplots(1, len(models), figsize=(6.5 * len(models), 4.8), squeeze=False)
    styles = {"keep 0.5": ("tab:green", "--"), "keep 0.3": ("tab:red", "-.")}
    top_p_colors = ["tab:orange", "tab:purple", "tab:brown", "tab:blue", "tab:olive"]
    for ax, model in zip(axes[0], models):
        settings = acc[model]
        lengths = sorted({l for pts in settings.values() for l in pts})
        # Dense: the same prompts in every run at a length (runs batched on a GPU differ by a
        # few tenths); drawn from the setting that covers the most lengths.
        ref = max(settings.values(), key=len)
        ax.plot(lengths, [ref[l]["dense"] for l in lengths if l in ref], "-o", color="black",
                label="dense", linewidth=2)
        order = sorted(settings, key=lambda s: (is_fixed(s), s))
        for k, setting in enumerate(order):
            pts = settings[setting]
            xs = sorted(pts)
            color, ls = styles.get(setting, (top_p_colors[k % len(top_p_colors)], "--"))
            label = "UniPrefill " + (setting if is_fixed(setting) else "top-p " + setting)
            if any(model.startswith(m) and setting == d for m, d in defaults.items()):
                label += " (default)"
            ax.plot(xs, [pts[x]["accuracy"] for x in xs], ls, marker="s", color=color,
                    label=label)
            for x in xs:
                p = pts[x]
                text = f"keep {p['keep']:.2f}" + (f", {p['speedup']:.2f}x" if p["speedup"] else "")
                ax.annotate(text, (x, p["accuracy"]), textcoords="offset points",
                            xytext=(4, -12 - 9 * k), fontsize=7, color=color)
        samples = sorted({p["samples"] for pts in settings.values() for p in pts.values()})
        ax.set_xscale("log", base=2)
        ax.margins(x=0.18)
        ax.set_xticks(lengths)
        ax.set_xticklabels([f"{l // 1024}K" if l % 1024 == 0 else str(l) for l in lengths])
        ax.set_ylim(0, 100)
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel("RULER accuracy, mean of tasks (%)")
        ax.set_title(f"{model} ({'/'.join(map(str, samples))} samples per task and length)",
                     fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="upper right")
    fig.suptitle("Accuracy vs length: dense (solid) vs UniPrefill (dashed)\n"
                 "labels: measured keep ratio, prefill speedup", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(out_prefix) or ".", exist_ok=True)
    for ext in ("png", "svg"):
        fig.savefig(f"{out_prefix}.{ext}", dpi=130)
        print(f"wrote {out_prefix}.{ext}")


def main(argv):
    # --default MODEL_PREFIX=SETTING (repeatable) marks a model's shipped default in the legend.
    defaults = {}
    args = []
    for a in argv[1:]:
        if a.startswith("--default="):
            model, _, setting = a[len("--default="):].partition("=")
            defaults[model] = setting
        else:
            args.append(a)
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    acc, fidelity = collect(args[1:])
    if not acc:
        print("error: no `eval ruler` JSON among the inputs", file=sys.stderr)
        return 1
    print_table(acc, fidelity)
    plot(acc, args[0], defaults)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
