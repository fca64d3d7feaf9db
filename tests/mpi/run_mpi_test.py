#!/usr/bin/env python3
"""Runs tests/mpi/mpi_collectives_test.cc under `mpirun -np 2` and checks what each mode must do.

    run_mpi_test.py --mpirun MPIRUN --binary BIN --mode collectives|timeout|fault
    run_mpi_test.py --mpirun MPIRUN --binary BIN --model DIR --mode tp-model
    run_mpi_test.py --mpirun MPIRUN --cli UNIPREFILL --model GGUF --mode run|reports

collectives, timeout: exit 0 and every rank's "OK" line. fault: rank 1 exits mid-step; the job must
end within 30 s (rank 0's timeout is 5 s), non-zero, with one "error:" line from rank 0 (its
timeout in the AllReduce, or mpirun stopping it after rank 1's exit), and no hang.
tp-model: exit 0 and every rank's "tp-model OK" line (a tiny checkpoint at TP 2 equals TP 1: kept
counts, 32 greedy tokens, logits within 1e-4 of their scale).
run: `uniprefill run` of a ~1,500-token prompt (this repository's design notes), 32 greedy tokens,
UniPrefill keep 0.5 at the model's default drop layers, once alone (TP 1) and once as
`mpirun -np 2 ... --tensor-parallel 2`: both ranks and TP 1 must give the same tokens and the same
kept counts at every drop; only rank 0 prints the text; each rank's peak RSS is printed (and must
stay below one process's: each holds half the heads, FFN columns and vocabulary rows).
reports: `bench-prefill` (600 random tokens, UniPrefill keep 0.5), `eval fidelity` (one 400-token
prompt, 8 greedy tokens) and `calibrate` (one RULER task at 512 tokens, two settings) alone and
under `mpirun -np 2 ... --tensor-parallel 2`: the same kept counts, top-1 agreement and greedy
agreement, KL within 2% relative (or 1e-6 absolute: each rank's GEMMs sum half of K, so the
logits move by rounding, and this prompt's KL of UniPrefill against dense moves 0.56% between
TP 1 and TP 2 on an AMD EPYC with OpenBLAS's sgemm, 0.21% with the int16 GEMMs, 28th session;
under 0.1% on the CPUs before), the same calibration accuracies and keep
ratios (not the recommendation: among equals it goes by measured speed); rank 0 alone writes the JSON report (no PATH.rank1) and prints the
table (once on stdout).
Flags: --allow-run-as-root (CI runs as root), --oversubscribe (2 ranks may exceed the cores mpirun
counts).
"""
import argparse
import subprocess
import sys
import time


def run_tp(a):
    import json
    import os
    import tempfile
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "design.md")
    words = open(src, encoding="utf-8").read().split()[:1100]
    with tempfile.TemporaryDirectory() as tmp:
        prompt = os.path.join(tmp, "prompt.txt")
        with open(prompt, "w", encoding="utf-8") as f:
            f.write(" ".join(words))
        common = ["run", "--model", a.model, "-t", "1", "-f", prompt, "-n", "32", "-q",
                  "--keep-ratio", "0.5"]
        one = subprocess.run([a.cli] + common + ["--json", os.path.join(tmp, "tp1.json")],
                             capture_output=True, text=True, timeout=300)
        print(one.stderr[-2000:])
        if one.returncode != 0:
            print("FAIL: the TP 1 run failed")
            return 1
        cmd = [a.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", a.cli] + common + [
            "--tensor-parallel", "2", "--json", os.path.join(tmp, "tp2.json")]
        t0 = time.time()
        two = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        print(two.stderr[-3000:])
        print(f"TP 2: exit {two.returncode} after {time.time() - t0:.1f} s")
        if two.returncode != 0:
            print("FAIL: the TP 2 run failed")
            return 1
        r1 = json.load(open(os.path.join(tmp, "tp1.json")))
        r2 = [json.load(open(os.path.join(tmp, "tp2.json"))),
              json.load(open(os.path.join(tmp, "tp2.json.rank1")))]
    kept = lambda r: [(k["layer"], k["kept"], k["alive"]) for k in r["uniprefill"]]
    print("TP 1 kept", kept(r1), "peak RSS", round(r1["peak_rss_mib"]), "MiB")
    for i, r in enumerate(r2):
        print(f"TP 2 rank {i} kept", kept(r), "peak RSS", round(r["peak_rss_mib"]), "MiB")
    ok = (all(r["tokens"] == r1["tokens"] for r in r2) and
          all(kept(r) == kept(r1) for r in r2) and kept(r1) and
          any(k[1] < k[2] for k in kept(r1)) and
          two.stdout.count(r1["text"]) == 1 and
          all(r["peak_rss_mib"] < r1["peak_rss_mib"] for r in r2))
    print("tokens", r1["tokens"])
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def run_reports(a):
    """bench-prefill, eval fidelity and calibrate at TP 2 report what TP 1 reports, from rank 0
    alone."""
    import json
    import math
    import os
    import tempfile
    commands = {
        "bench-prefill": ["bench-prefill", "--model", a.model, "-t", "1", "--random-tokens",
                          "--lengths", "600", "--repeats", "1", "--keep-ratio", "0.5", "--json"],
        "eval fidelity": ["eval", "fidelity", "--model", a.model, "-t", "1", "--lengths", "400",
                          "--samples", "1", "--greedy-tokens", "8", "--keep-ratio", "0.5", "-o"],
        "calibrate": ["calibrate", "--model", a.model, "-t", "1", "--tasks", "niah_single_1",
                      "--lengths", "512", "--samples", "1", "--p-values", "0.9", "--keep-ratios",
                      "0.5", "--drop-layer-sets", "11", "--window-modes", "alive", "-o"],
    }
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in commands.items():
            reports = []
            for tp in (1, 2):
                path = os.path.join(tmp, f"{name.replace(' ', '_')}.tp{tp}.json")
                cmd = [a.cli] + args + [path]
                if tp == 2:
                    cmd = [a.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2"] + cmd + [
                        "--tensor-parallel", "2"]
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
                print(f"{name} TP {tp}: exit {p.returncode}\n{p.stdout[-1500:]}{p.stderr[-1500:]}")
                if p.returncode != 0 or not os.path.exists(path):
                    print(f"FAIL: {name} at TP {tp} failed")
                    return 1
                if tp == 2 and os.path.exists(path + ".rank1"):
                    ok = False
                    print(f"FAIL: rank 1 wrote {path}.rank1")
                header = p.stdout.splitlines()[0] if p.stdout else ""
                if tp == 2 and (not header or p.stdout.count(header) != 1):
                    ok = False
                    print(f"FAIL: the table is not printed exactly once: {p.stdout!r}")
                reports.append(json.load(open(path)))
            one, two = reports
            if name == "bench-prefill":
                kept = [[r["kept"] for r in rep["runs"]] for rep in reports]
                same = kept[0] == kept[1] and any(
                    k["kept"] < k["alive"] for run in kept[0] for k in run)
                print(f"{name}: kept TP 1 {kept[0]} TP 2 {kept[1]}")
            elif name == "calibrate":
                # Everything but what depends on measured speed (the speedups, and so the
                # frontier and the recommendation among settings of equal accuracy).
                pick = lambda rep: (rep["dense_mean_accuracy"], sorted(
                    (s["label"], s["mean_accuracy"], s["keep_ratio"], s["meets_bar"])
                    for s in rep["settings"]))
                same = pick(one) == pick(two)
                print(f"{name}: TP 1 {pick(one)}\nTP 2 {pick(two)}")
            else:
                same = (one["mean_top1_agreement"] == two["mean_top1_agreement"] and
                        one["mean_greedy_prefix_agreement"] ==
                        two["mean_greedy_prefix_agreement"] and
                        math.isclose(one["mean_kl"], two["mean_kl"], rel_tol=2e-2, abs_tol=1e-6))
                print(f"{name}: TP 1 {[one[k] for k in sorted(one) if k.startswith('mean')]} "
                      f"TP 2 {[two[k] for k in sorted(two) if k.startswith('mean')]}")
            if not same:
                ok = False
                print(f"FAIL: {name} at TP 2 differs from TP 1")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--binary")
    ap.add_argument("--cli")
    ap.add_argument("--model")
    ap.add_argument("--mode", required=True,
                    choices=["collectives", "timeout", "fault", "run", "reports", "tp-model"])
    a = ap.parse_args()
    if a.mode == "run":
        return run_tp(a)
    if a.mode == "reports":
        return run_reports(a)
    cmd = [a.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", a.binary]
    if a.mode != "collectives":
        cmd.append("--" + a.mode)
    if a.mode == "tp-model":
        cmd.append(a.model)
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        print(f"FAIL: {' '.join(cmd)} still running after 90 s (a hang)")
        return 1
    took = time.time() - t0
    out = p.stdout + p.stderr
    print(out)
    print(f"exit {p.returncode} after {took:.1f} s")
    if a.mode == "collectives":
        ok = p.returncode == 0 and out.count("collectives OK") == 2
    elif a.mode == "tp-model":
        ok = p.returncode == 0 and out.count("tp-model OK") == 2
    elif a.mode == "timeout":
        ok = p.returncode == 0 and out.count("timeout OK") == 2 and "did not join within 1.0 s" in out
    else:
        # Rank 0 either times out in the AllReduce (its own error line) or is stopped by mpirun
        # once rank 1's exit is seen (the communicator's SIGTERM line); either is one clean line.
        ok = (p.returncode != 0 and took < 30 and "FAIL" not in out and
              ("error: rank 0: AllReduce on rank 0 of 2" in out or
               "error: rank 0 of 2: stopped by mpirun because another rank ended" in out))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
