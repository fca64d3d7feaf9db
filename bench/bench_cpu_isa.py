#!/usr/bin/env python3
"""Prefill and decode speed of `uniprefill run` per CPU ISA level and per binary.

The table in docs/performance.md. Each configuration is LABEL=BINARY[:ISA] (ISA passed as
--cpu-isa; none for a binary that predates the option); configurations alternate run by run so
machine noise spreads evenly; medians of --repeats. Dense prefill (--uniprefill off) of a prompt
of filler text (~30 tokens per --filler-repeats), then greedy decode.

    python3 bench/bench_cpu_isa.py --config native=/tmp/old/uniprefill \\
        --config avx2=build/uniprefill:avx2 --config auto=build/uniprefill:auto
"""
import argparse
import json
import statistics
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The filler of bench/bench_vs_llamacpp.py.
FILLER = ("The committee met on a grey morning to review the harbour accounts. Several members "
          "asked about the cost of dredging, the state of the old pier and the timetable for the "
          "new ferry. ")


def run_once(binary, isa, model, prompt_file, threads, decode_tokens):
    with tempfile.NamedTemporaryFile(suffix=".json") as jf:
        cmd = [binary, "run", "--model", model, "--prompt-file", prompt_file, "--max-tokens",
               str(decode_tokens + 1), "--ignore-eos", "--quiet", "--uniprefill", "off",
               "--threads", str(threads), "--json", jf.name]
        if isa:
            cmd += ["--cpu-isa", isa]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        return json.loads(Path(jf.name).read_text())


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", action="append", required=True, help="LABEL=BINARY[:ISA]")
    ap.add_argument("--model", default=str(ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--filler-repeats", type=int, default=34, help="~30 tokens each")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", help="write every run as JSON here")
    args = ap.parse_args()
    configs = []
    for c in args.config:
        label, rest = c.split("=", 1)
        binary, _, isa = rest.partition(":")
        configs.append((label, binary, isa))
    runs = {label: [] for label, _, _ in configs}
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as pf:
        pf.write(FILLER * args.filler_repeats)
        pf.flush()
        for _ in range(args.repeats):
            for label, binary, isa in configs:
                r = run_once(binary, isa, args.model, pf.name, args.threads, args.decode_tokens)
                runs[label].append({k: r[k] for k in ("prompt_tokens", "prefill_tok_s",
                                                      "decode_tok_s")})
    print("| config | prompt tokens | prefill tok/s | decode tok/s |")
    print("|---|---|---|---|")
    for label, _, _ in configs:
        rs = runs[label]
        print(f"| {label} | {rs[0]['prompt_tokens']} | "
              f"{statistics.median(r['prefill_tok_s'] for r in rs):.1f} | "
              f"{statistics.median(r['decode_tok_s'] for r in rs):.1f} |")
    if args.out:
        Path(args.out).write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
