#!/usr/bin/env python3
"""Make the tiny Hugging Face checkpoints and their transformers reference outputs in
tests/goldens/hf_tiny/<family>/ (see docs/hf_goldens.md).

For each family (llama, qwen3_next, gemma3) this
  1. writes a tiny random checkpoint with tools/make_synthetic_checkpoint.py (fixed seed, bf16 on disk;
     config.json + model.safetensors), and for gemma3 also the same weights as an f32 GGUF file
     (model.gguf: llama.cpp names, +1 baked into the norms, placeholder vocabulary);
  2. loads it with transformers in float32 (eager attention, CPU, one thread) and runs four fixed
     prompts of token ids (lengths 7, 33, 130, 300): the final-token logits (every vocabulary entry,
     6 significant digits) and 16 greedy tokens decoded with the KV / recurrent cache
     (use_cache=True), each step's top-1/top-2 logit margin, and a cross-check that greedy decoding
     without the cache (the whole sequence recomputed each step) picks the same tokens;
  3. writes golden.json with those, the transformers/torch versions and, for qwen3_next, which Gated
     DeltaNet / causal-conv1d implementation transformers ran (it must be the pure-torch fallback);
  4. for gemma3, if llama-cpp-python is installed, runs model.gguf through llama.cpp on the same
     prompts and records its agreement with transformers (an independent check of the GGUF file).

Needs torch and transformers (>= 4.57, with Qwen3-Next and Gemma 3) in .venv: `bash scripts/setup.sh
--hf-reference`. Installs nothing itself.

Usage: .venv/bin/python tools/make_hf_goldens.py [--families llama,qwen3_next,gemma3] [--out DIR]
"""
import argparse
import importlib.util
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_synthetic_checkpoint as synth  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(ROOT, "tests", "goldens", "hf_tiny")
FAMILIES = ("llama", "qwen3_next", "gemma3")
SEEDS = {"llama": 1, "qwen3_next": 2, "gemma3": 3}
DTYPE_ON_DISK = "bf16"
PROMPT_LENGTHS = (7, 33, 130, 300)
N_GEN = 16
CACHE_KWARG = "past_key_values"


def prompt_ids(k, length, vocab, bos):
    """Prompt k: BOS, then seeded ids in [4, vocab) (ids 0..3 are pad/eos/bos/unk in Gemma)."""
    rng = np.random.default_rng(1000 + k)
    return [int(bos)] + [int(x) for x in rng.integers(4, vocab, size=length - 1)]


def sig6(x):
    return float(f"{float(x):.6g}")


def deltanet_implementation():
    """Which functions transformers' Qwen3-Next runs for the conv and the gated delta rule: each is
    wrapped by use_kernel_func_from_hub_with_fallback, whose closure says whether a package
    (causal-conv1d, flash-linear-attention) replaced the pure-torch function."""
    from transformers.models.qwen3_next import modeling_qwen3_next as m

    def which(fn):
        cells = dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__ or ())))
        impl = cells.get("implementation")
        if impl is None:
            return "unknown"
        torch_path = not cells.get("is_new_implementation", True)
        return ("pure-torch fallback " if torch_path else "package kernel ") + \
            f"{impl.__module__}.{impl.__qualname__}"

    return {
        "causal_conv1d_fn": which(m.causal_conv1d_fn),
        "causal_conv1d_update": which(m.causal_conv1d_update),
        "chunk_gated_delta_rule": which(m.torch_chunk_gated_delta_rule),
        "recurrent_gated_delta_rule": which(m.torch_recurrent_gated_delta_rule),
        "packages_installed": {p: importlib.util.find_spec(p) is not None
                               for p in ("fla", "causal_conv1d", "kernels")},
        "prefill": "chunked gated delta rule (chunk 64) over the prompt; conv1d with left padding",
        "decode": "recurrent gated delta rule, one token per step from the cached state; "
                  "causal_conv1d_update with the cached last kernel-1 inputs",
    }


def returned_cache(out):
    # transformers 5 renamed past_key_values to cache (the old name still works, with a warning).
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def cache_kwarg(model):
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def run_transformers(ckpt_dir, prompts):
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    torch.set_num_threads(1)  # reproducible float32 sums
    model, info = AutoModelForCausalLM.from_pretrained(
        ckpt_dir, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        raise SystemExit(f"{ckpt_dir}: transformers reported weight problems: {problems}")
    model.eval()
    global CACHE_KWARG
    CACHE_KWARG = cache_kwarg(model)
    results = []
    with torch.no_grad():
        for ids in prompts:
            x = torch.tensor([ids])
            out = model(input_ids=x, use_cache=True)
            last = out.logits[0, -1].float()
            cache = returned_cache(out)
            greedy, margins, step_top5, step_logits = [], [], [], last
            for _ in range(N_GEN):
                top5 = torch.topk(step_logits, 5)
                tok = int(top5.indices[0])
                greedy.append(tok)
                margins.append(sig6(top5.values[0] - top5.values[1]))
                step_top5.append([[int(i), sig6(v)] for i, v in zip(top5.indices, top5.values)])
                out = model(input_ids=torch.tensor([[tok]]), use_cache=True, **{CACHE_KWARG: cache})
                cache = returned_cache(out)
                step_logits = out.logits[0, -1].float()
            # Cross-check: greedy without any cache (the whole sequence each step).
            seq = list(ids)
            for _ in range(N_GEN):
                logits = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1]
                seq.append(int(torch.argmax(logits)))
            no_cache = seq[len(ids):]
            top5 = torch.topk(last, 5)
            results.append({
                "n_tokens": len(ids),
                "ids": ids,
                "last_logits_max_abs": sig6(last.abs().max()),
                "top5_ids": [int(i) for i in top5.indices],
                "top5_logits": [sig6(v) for v in top5.values],
                "greedy": greedy,
                "greedy_top1_top2_margins": margins,
                "greedy_step_top5": step_top5,
                "greedy_without_cache": no_cache,
                "greedy_cache_agrees": no_cache == greedy,
                "last_logits": [sig6(v) for v in last],
            })
    return results


def run_llama_cpp(gguf_path, prompts):
    """Final-token logits and 16 greedy tokens from llama.cpp (llama-cpp-python), or None."""
    if importlib.util.find_spec("llama_cpp") is None:
        return None
    import llama_cpp

    llm = llama_cpp.Llama(model_path=gguf_path, n_ctx=1024, n_batch=512, logits_all=False,
                          verbose=False, n_threads=1, n_threads_batch=1,
                          type_k=0, type_v=0)  # f32 KV cache (GGML_TYPE_F32)

    def last_logits():
        ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).astype(np.float32).copy()

    out = []
    for ids in prompts:
        llm.reset()
        llm.eval(ids)
        last = last_logits()
        greedy, logits = [], last
        for _ in range(N_GEN):
            tok = int(np.argmax(logits))
            greedy.append(tok)
            llm.eval([tok])
            logits = last_logits()
        out.append((last, greedy))
    return out


def dump_golden(path, header, prompts):
    """One top-level key per line; each prompt one compact line (diffs stay readable)."""
    lines = ["{"]
    for k, v in header.items():
        lines.append(f"  {json.dumps(k)}: {json.dumps(v, separators=(',', ':'))},")
    lines.append('  "prompts": [')
    for i, p in enumerate(prompts):
        lines.append("    " + json.dumps(p, separators=(",", ":")) + ("," if i + 1 < len(prompts) else ""))
    lines.append("  ]")
    lines.append("}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def make_family(family, out_root):
    import torch
    import transformers

    d = os.path.join(out_root, family)
    cfg = synth.make_config(family, "tiny")
    synth.write_checkpoint(d, family, cfg, DTYPE_ON_DISK, SEEDS[family], quiet=True)
    cfg = json.load(open(os.path.join(d, "config.json")))
    vocab, bos = cfg["vocab_size"], cfg["bos_token_id"]
    prompts = [prompt_ids(k, n, vocab, bos) for k, n in enumerate(PROMPT_LENGTHS)]
    print(f"{family}: running transformers on prompts of {list(PROMPT_LENGTHS)} tokens", flush=True)
    results = run_transformers(d, prompts)

    header = {
        "family": family,
        "architecture": cfg["architectures"][0],
        "model_type": cfg["model_type"],
        "checkpoint": "config.json + model.safetensors in this folder",
        "generator": f"tools/make_synthetic_checkpoint.py --family {family} --preset tiny "
                     f"--dtype {DTYPE_ON_DISK} --seed {SEEDS[family]}",
        "seed": SEEDS[family],
        "dtype_on_disk": DTYPE_ON_DISK,
        "compute_dtype": "float32",
        "attn_implementation": "eager",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "n_generated": N_GEN,
        "logits_rounding": "6 significant digits",
        "max_abs_last_logit": max(r["last_logits_max_abs"] for r in results),
    }
    if family == "qwen3_next":
        impl = deltanet_implementation()
        if "package kernel" in json.dumps(impl):
            raise SystemExit("transformers is using an optimised Gated DeltaNet / conv kernel; "
                             "uninstall flash-linear-attention / causal-conv1d / kernels first")
        header["deltanet_implementation"] = impl
    if family == "gemma3":
        gguf_path = os.path.join(d, "model.gguf")
        synth.write_gemma3_gguf(d, gguf_path, name="hf-tiny-gemma3")
        header["gguf"] = ("model.gguf: the same weights as f32 GGUF (llama.cpp tensor names, +1 "
                          "baked into every norm weight, placeholder vocabulary <pad> <eos> <bos> "
                          "<unk> <tok_4> ...)")
        ref = run_llama_cpp(gguf_path, prompts)
        if ref is not None:
            import llama_cpp
            diffs = [float(np.max(np.abs(np.array(r["last_logits"]) - last)))
                     for r, (last, _) in zip(results, ref)]
            header["llama_cpp_check"] = {
                "llama_cpp_python_version": llama_cpp.__version__,
                "last_logits_max_abs_diff": [sig6(x) for x in diffs],
                "greedy_equal": [r["greedy"] == g for r, (_, g) in zip(results, ref)],
            }
    dump_golden(os.path.join(d, "golden.json"), header, results)
    for f in sorted(os.listdir(d)):
        print(f"  {f}: {os.path.getsize(os.path.join(d, f)) / 1e6:.3f} MB")
    print(f"  max |logit| {header['max_abs_last_logit']}; greedy cache/no-cache agree: "
          f"{[r['greedy_cache_agrees'] for r in results]}")
    if "llama_cpp_check" in header:
        print(f"  llama.cpp vs transformers: {header['llama_cpp_check']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--out", default=DEFAULT_OUT)
    a = ap.parse_args()
    for mod in ("torch", "transformers"):
        if importlib.util.find_spec(mod) is None:
            raise SystemExit(f"{mod} is not installed in this Python ({sys.executable}); run "
                             "`bash scripts/setup.sh --hf-reference` first")
    for family in a.families.split(","):
        if family not in FAMILIES:
            raise SystemExit(f"unknown family {family!r} (known: {', '.join(FAMILIES)})")
        make_family(family, a.out)


if __name__ == "__main__":
    main()
