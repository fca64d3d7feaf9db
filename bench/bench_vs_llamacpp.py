#!/usr/bin/env python3
"""Prefill and decode speed of uniprefill vs llama.cpp (llama-cpp-python) on one machine, one model.

Both run in this one invocation, in separate processes (so peak RSS is per engine), with the same
thread count and the same prompt token ids (tokenized by llama.cpp; uniprefill's tokenizer gives the
same ids, see docs/tokenizer.md). Each figure is the median of --repeats runs. Writes JSON and a
table. Usage:
    .venv/bin/python bench/bench_vs_llamacpp.py --lengths 1024 4096 16384 --threads 2 --out out/bench.json
--ours-args passes flags to `uniprefill run`, e.g.
    --ours-args="--uniprefill off --prefill-gemm int16".
"""
import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"
FILLER = ("The committee met on a grey morning to review the harbour accounts. Several members asked "
          "about the cost of dredging, the state of the old pier and the timetable for the new ferry. ")


def make_prompt_ids(model: str, n_tokens: int) -> list:
    import llama_cpp
    vocab = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    text = FILLER * (n_tokens // 30 + 10)
    ids = vocab.tokenize(text.encode(), add_bos=True, special=True)[:n_tokens]
    return ids


def run_llamacpp(model: str, ids: list, threads: int, decode_tokens: int, flash_attn: bool) -> dict:
    """Runs in a child process: prefill timing, then greedy decode timing."""
    import llama_cpp
    import numpy as np
    # swa_full=False: llama.cpp's sliding layers keep only their window (its fastest setting).
    kwargs = dict(model_path=model, n_ctx=len(ids) + decode_tokens + 16, n_threads=threads,
                  n_threads_batch=threads, n_batch=512, n_ubatch=512, logits_all=False,
                  swa_full=False, verbose=False)
    if flash_attn:
        kwargs["flash_attn"] = True
    llm = llama_cpp.Llama(**kwargs)
    def last_logits():
        ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),))

    t0 = time.perf_counter()
    llm.eval(ids)
    tok = int(np.argmax(last_logits()))
    t1 = time.perf_counter()
    t2 = time.perf_counter()
    for _ in range(decode_tokens):
        llm.eval([tok])
        tok = int(np.argmax(last_logits()))
    t3 = time.perf_counter()
    return {"prefill_tok_s": len(ids) / (t1 - t0), "decode_tok_s": decode_tokens / (t3 - t2)}


def child_main(args) -> None:
    ids = json.loads(Path(args.ids_file).read_text())
    r = run_llamacpp(args.model, ids, args.threads, args.decode_tokens, args.flash_attn)
    r["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(r))


def run_child_llamacpp(args, ids_file: str) -> dict:
    cmd = [sys.executable, __file__, "--child", "--ids-file", ids_file, "--model", args.model,
           "--threads", str(args.threads), "--decode-tokens", str(args.decode_tokens)]
    if args.flash_attn:
        cmd.append("--flash-attn")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def run_uniprefill(args, ids_file: str, binary: str = "") -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as jf:
        cmd = [binary or str(ROOT / "build" / "uniprefill"), "run", "--model", args.model, "--prompt-tokens-file",
               ids_file, "--max-tokens", str(args.decode_tokens + 1), "--ignore-eos", "--quiet",
               "--threads", str(args.threads), "--json", jf.name] + shlex.split(args.ours_args)
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        r = json.loads(Path(jf.name).read_text())
    return {"prefill_tok_s": r["prefill_tok_s"], "decode_tok_s": r["decode_tok_s"],
            "peak_rss_mib": r["peak_rss_mib"], "prompt_tokens": r["prompt_tokens"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--flash-attn", action="store_true", help="llama.cpp with flash attention on")
    ap.add_argument("--out", default=str(ROOT / "out" / "bench_vs_llamacpp.json"))
    ap.add_argument("--ours-args", default="", help="extra flags for `uniprefill run` (one string)")
    ap.add_argument("--baseline-bin", default="",
                    help="an earlier uniprefill binary run in every repeat beside ours and llama.cpp "
                         "(same flags): old, new and the peer in one invocation")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ids-file", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child_main(args)
        return

    rows = []
    for n in args.lengths:
        ids = make_prompt_ids(args.model, n)
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(ids, f)
            ids_file = f.name
        ours, peer, base = [], [], []
        for rep in range(args.repeats):
            if args.baseline_bin:
                print(f"[{n} tokens] repeat {rep + 1}/{args.repeats}: baseline...", file=sys.stderr, flush=True)
                base.append(run_uniprefill(args, ids_file, args.baseline_bin))
            print(f"[{n} tokens] repeat {rep + 1}/{args.repeats}: uniprefill...", file=sys.stderr, flush=True)
            ours.append(run_uniprefill(args, ids_file))
            print(f"[{n} tokens] repeat {rep + 1}/{args.repeats}: llama.cpp...", file=sys.stderr, flush=True)
            peer.append(run_child_llamacpp(args, ids_file))
        os.unlink(ids_file)
        med = lambda xs, k: statistics.median(x[k] for x in xs)
        row = {"prompt_tokens": len(ids),
               "uniprefill": {k: med(ours, k) for k in ("prefill_tok_s", "decode_tok_s", "peak_rss_mib")},
               "llama_cpp": {k: med(peer, k) for k in ("prefill_tok_s", "decode_tok_s", "peak_rss_mib")},
               "runs": {"uniprefill": ours, "llama_cpp": peer}}
        row["prefill_ratio"] = row["uniprefill"]["prefill_tok_s"] / row["llama_cpp"]["prefill_tok_s"]
        row["decode_ratio"] = row["uniprefill"]["decode_tok_s"] / row["llama_cpp"]["decode_tok_s"]
        # Each repeat runs ours then llama.cpp back to back; on a shared machine whose memory
        # bandwidth drifts over seconds, the median of those paired ratios is the steadier figure.
        for k in ("prefill", "decode"):
            row[f"{k}_ratio_paired_median"] = statistics.median(
                o[f"{k}_tok_s"] / p[f"{k}_tok_s"] for o, p in zip(ours, peer))
        if base:
            row["baseline"] = {k: med(base, k) for k in ("prefill_tok_s", "decode_tok_s", "peak_rss_mib")}
            row["runs"]["baseline"] = base
            for k in ("prefill", "decode"):
                row[f"baseline_{k}_ratio"] = row["baseline"][f"{k}_tok_s"] / row["llama_cpp"][f"{k}_tok_s"]
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "runs"}), file=sys.stderr, flush=True)

    import platform
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    result = {"machine": {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform()},
              "threads": args.threads, "repeats": args.repeats, "decode_tokens": args.decode_tokens,
              "llama_cpp_flash_attn": args.flash_attn, "ours_args": args.ours_args,
              "baseline_bin": args.baseline_bin,
              "model": args.model, "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"\nmachine: {cpu}, {os.cpu_count()} cores, {args.threads} threads; medians of {args.repeats}")
    print(f"{'tokens':>7} | {'prefill tok/s ours':>18} {'llama.cpp':>10} {'ratio':>6} {'paired':>6} | "
          f"{'decode tok/s ours':>17} {'llama.cpp':>10} {'ratio':>6} {'paired':>6} | "
          f"{'RSS MiB ours':>12} {'llama.cpp':>10}")
    for r in rows:
        u, l = r["uniprefill"], r["llama_cpp"]
        print(f"{r['prompt_tokens']:>7} | {u['prefill_tok_s']:>18.1f} {l['prefill_tok_s']:>10.1f} "
              f"{r['prefill_ratio']:>6.2f} {r['prefill_ratio_paired_median']:>6.2f} | "
              f"{u['decode_tok_s']:>17.1f} {l['decode_tok_s']:>10.1f} "
              f"{r['decode_ratio']:>6.2f} {r['decode_ratio_paired_median']:>6.2f} | "
              f"{u['peak_rss_mib']:>12.0f} {l['peak_rss_mib']:>10.0f}")
    for r in rows:
        if "baseline" in r:
            b = r["baseline"]
            print(f"{r['prompt_tokens']:>7} baseline ({args.baseline_bin}): prefill {b['prefill_tok_s']:.1f} tok/s "
                  f"({r['baseline_prefill_ratio']:.2f}x llama.cpp), decode {b['decode_tok_s']:.1f} "
                  f"({r['baseline_decode_ratio']:.2f}x), RSS {b['peak_rss_mib']:.0f} MiB")
    print("ratio: median ours / median llama.cpp; paired: median over repeats of ours / llama.cpp")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
