#!/usr/bin/env python3
"""Make the Gemma 3 model goldens in tests/goldens/model_gemma3/ (see docs/goldens.md).

For each of four deterministic prompts (short factual, ~500-token code, >4K-token and >16K-token
needle-in-a-haystack documents) this tokenizes the text with llama.cpp (BOS added), then runs
  * the independent fp32 numpy reference (tools/gemma3_numpy.py): first-token logits (all of them,
    written as little-endian float32 prompt{i}_logits_f32.bin), top-10, 32-token greedy continuation;
  * llama.cpp through llama-cpp-python (low-level eval + argmax, no sampler): top-10 of the first-token
    logits and its 32-token greedy continuation;
and writes prompt{i}.json with the token ids, both results and their agreement.

Usage: .venv/bin/python tools/make_model_goldens.py [--model PATH] [--prompts 1,2,3,4] [--out DIR]
Each reference's result is cached under --cache (checked against the token ids), so the slow 16K prompt
can run as two parallel processes (--only llama, --only fp32) and a plain run then writes the goldens.
"""
import argparse
import json
import os
import random
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemma3_numpy import Gemma3  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N_GEN = 32
TOPK = 10

# --------------------------------------------------------------------------------------- prompts

PROMPT1 = "Question: What is the tallest mountain on Earth, and in which mountain range is it found?\nAnswer:"

PROMPT2 = '''"""Inventory management for a small bookshop."""
from dataclasses import dataclass, field
from typing import Dict, List


@dataclass
class Book:
    isbn: str
    title: str
    author: str
    price_cents: int
    quantity: int = 0
    tags: List[str] = field(default_factory=list)

    def total_value(self) -> int:
        """Value of all copies on the shelf, in cents."""
        return self.price_cents * self.quantity


class Inventory:
    def __init__(self) -> None:
        self._books: Dict[str, Book] = {}

    def add(self, book: Book) -> None:
        if book.isbn in self._books:
            self._books[book.isbn].quantity += book.quantity
        else:
            self._books[book.isbn] = book

    def find_by_author(self, author: str) -> List[Book]:
        needle = author.lower()
        return [b for b in self._books.values() if needle in b.author.lower()]

    def total_value(self) -> int:
        return sum(b.total_value() for b in self._books.values())


if __name__ == "__main__":
    inv = Inventory()
    inv.add(Book("978-0141439518", "Pride and Prejudice", "Jane Austen", 899, 3, ["classic", "romance"]))
    inv.add(Book("978-0451524935", "Nineteen Eighty-Four", "George Orwell", 1099, 1, ["classic", "dystopia"]))
    inv.add(Book("978-0547928227", "The Hobbit", "J. R. R. Tolkien", 1250, 5, ["fantasy"]))
    print("Total value:", inv.total_value() / 100)
    # Find the most expensive classic and print its title and price.
'''

_NAMES = ["Amara", "Bastian", "Chiara", "Dmitri", "Elif", "Farouk", "Greta", "Hiroshi", "Ingrid", "Jamal",
          "Katya", "Lorenzo", "Mei", "Nikolai", "Oona", "Pedro", "Quentin", "Rosa", "Sven", "Tomoko",
          "Ulrich", "Valentina", "Wen", "Ximena", "Yusuf", "Zofia"]
_CITIES = ["Lisbon", "Nairobi", "Osaka", "Tallinn", "Cusco", "Reykjavik", "Hanoi", "Marrakesh", "Oslo",
           "Valparaiso", "Tbilisi", "Adelaide", "Montreal", "Krakow", "Cebu", "Porto", "Bergen", "Kyoto"]
_JOBS = ["baker", "surveyor", "violin maker", "archivist", "beekeeper", "ferry captain", "glassblower",
         "botanist", "clockmaker", "cartographer", "lighthouse keeper", "translator", "potter", "chemist"]
_THINGS = ["lantern", "compass", "notebook", "teapot", "bicycle", "telescope", "umbrella", "kite",
           "typewriter", "accordion", "chessboard", "hourglass", "quilt", "barometer"]
_COLORS = ["red", "green", "amber", "violet", "silver", "ochre", "teal", "crimson", "ivory", "indigo"]
_ANIMALS = ["heron", "otter", "fox", "badger", "owl", "lynx", "tortoise", "magpie", "hare", "seal"]
_PLACES = ["the old harbour", "the market square", "the river bend", "the hill station", "the north gate",
           "the library steps", "the orchard", "the railway bridge", "the salt flats", "the pine forest"]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December"]


def _sentence(r):
    n, c, j, t = r.choice(_NAMES), r.choice(_CITIES), r.choice(_JOBS), r.choice(_THINGS)
    col, a, p = r.choice(_COLORS), r.choice(_ANIMALS), r.choice(_PLACES)
    k = r.randrange(12)
    if k == 0:
        return f"{n} moved to {c} in {r.randint(1890, 2020)} and worked there as a {j} for {r.randint(2, 40)} years."
    if k == 1:
        return f"Every {r.choice(_DAYS)}, a {col} {a} could be seen near {p}, watching the people go by."
    if k == 2:
        return f"The {j} from {c} kept a {col} {t} on the windowsill, which nobody was allowed to touch."
    if k == 3:
        return f"In {r.choice(_MONTHS)} the town council of {c} voted {r.randint(3, 9)} to {r.randint(0, 5)} to repair {p}."
    if k == 4:
        return f"{n} once walked from {c} to {r.choice(_CITIES)} carrying only a {t} and a loaf of bread."
    if k == 5:
        return f"According to the museum records, the {t} in room {r.randint(1, 60)} was donated by a {j} named {n}."
    if k == 6:
        return f"A survey counted {r.randint(10, 900)} {a}s living around {p} during the dry season."
    if k == 7:
        return f"{n} and {r.choice(_NAMES)} argued for hours about whether {c} or {r.choice(_CITIES)} had the better {col} houses."
    if k == 8:
        return f"The weather near {p} was {r.choice(['foggy', 'mild', 'windy', 'bitterly cold', 'humid', 'clear'])} on the day the {t} went missing."
    if k == 9:
        return f"The {r.randint(2, 99)}th annual festival in {c} featured a parade of {col} {t}s and a {a} costume contest."
    if k == 10:
        return f"Local legend says a {j} buried a {t} beneath {p}, but no one has ever found it."
    return f"{n} wrote {r.randint(2, 30)} letters to a friend in {c}, each one describing a different {a}."


def haystack(seed, n_sentences, needle, needle_at, question):
    """A document of templated sentences with `needle` inserted at fraction `needle_at`, then a question."""
    r = random.Random(seed)
    sents = [_sentence(r) for _ in range(n_sentences)]
    sents.insert(int(needle_at * n_sentences), needle)
    paras = [" ".join(sents[i:i + 8]) for i in range(0, len(sents), 8)]
    return ("Read the following notes carefully; a question about them follows.\n\n" + "\n\n".join(paras)
            + "\n\n" + question)


NEEDLE3 = "The secret code for the blue vault in Tallinn is 7391."
QUESTION3 = "Question: What is the secret code for the blue vault in Tallinn?\nAnswer: The secret code for the blue vault in Tallinn is"
NEEDLE4 = "Important: the password to open the green lighthouse door is 'saffron-42'."
QUESTION4 = "Question: What is the password to open the green lighthouse door?\nAnswer: The password to open the green lighthouse door is '"

# (name, text builder, minimum token count). Sentence counts were chosen so the token counts clear
# the minimum; the script checks this.
PROMPTS = {
    1: ("short factual question", lambda: PROMPT1, 15),
    2: ("medium: Python source (~500 tokens)", lambda: PROMPT2, 450),
    3: ("long: >4K-token needle-in-a-haystack document",
        lambda: haystack(1234, 205, NEEDLE3, 0.4, QUESTION3), 4000),
    4: ("very long: >16K-token needle-in-a-haystack document",
        lambda: haystack(98765, 810, NEEDLE4, 0.65, QUESTION4), 16000),
}

# ------------------------------------------------------------------------------------ llama.cpp


class LlamaRef:
    def __init__(self, path, n_ctx):
        import llama_cpp
        self.lc = llama_cpp
        self.vocab_llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
        self.path, self.n_ctx = path, n_ctx
        self.llm = None

    def tokenize(self, text):
        return self.vocab_llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)

    def detok(self, ids):
        return self.vocab_llm.detokenize(ids).decode("utf-8", errors="replace")

    def _last_logits(self):
        ptr = self.lc.llama_get_logits_ith(self.llm._ctx.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self.llm.n_vocab(),)).astype(np.float32).copy()

    def greedy(self, ids, n_new):
        if self.llm is None:
            # swa_full=False: sliding layers keep only their window (same math, far less work at 16K)
            self.llm = self.lc.Llama(model_path=self.path, n_ctx=self.n_ctx, n_threads=2, n_threads_batch=2,
                                     logits_all=False, swa_full=False, verbose=False)
        self.llm.reset()
        self.llm.eval(ids)
        first = self._last_logits()
        logits, out = first, []
        for j in range(n_new):
            tok = int(np.argmax(logits))
            out.append(tok)
            if j + 1 < n_new:
                self.llm.eval([tok])
                logits = self._last_logits()
        return first, out


# ---------------------------------------------------------------------------------------- main


def topk(logits, k=TOPK):
    idx = np.argsort(-logits, kind="stable")[:k]
    return [int(i) for i in idx], [float(logits[i]) for i in idx]


def prefix_agree(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_model = os.path.join(ROOT, "models", "gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--model", default=default_model)
    ap.add_argument("--prompts", default="1,2,3,4")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "goldens", "model_gemma3"))
    ap.add_argument("--n-ctx", type=int, default=20480)
    ap.add_argument("--cache", default="/tmp/model_goldens_cache",
                    help="per-reference results; reused when the token ids match")
    ap.add_argument("--only", choices=["both", "llama", "fp32"], default="both",
                    help="compute only one reference (the other must be cached to write goldens)")
    ap.add_argument("--allow-missing-llama", action="store_true",
                    help="write goldens even where the llama.cpp result is missing (its fields become null)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    which = [int(s) for s in args.prompts.split(",")]

    t_all = time.time()
    ref = LlamaRef(args.model, args.n_ctx)
    model = None
    os.makedirs(args.cache, exist_ok=True)
    sane, complete = True, True
    for i in which:
        name, build, min_tokens = PROMPTS[i]
        text = build()
        ids = ref.tokenize(text)
        print(f"prompt {i} ({name}): {len(ids)} tokens", flush=True)
        assert len(ids) >= min_tokens, f"prompt {i} has {len(ids)} tokens, wanted >= {min_tokens}"

        def cached(kind, run):
            """Results of one reference, kept in the cache dir so the two references can run in parallel."""
            path = os.path.join(args.cache, f"prompt{i}_{kind}.npz")
            if os.path.exists(path):
                z = np.load(path)
                if list(z["ids"]) == list(ids):
                    print(f"  {kind}: cached ({path})", flush=True)
                    return z["first"], [int(t) for t in z["gen"]], [float(m) for m in z["margins"]], float(z["seconds"])
            if args.only not in ("both", kind):
                return None
            t0 = time.time()
            first, gen, margins = run()
            sec = time.time() - t0
            np.savez(path, ids=np.array(ids), first=first, gen=np.array(gen), margins=np.array(margins), seconds=sec)
            print(f"  {kind}: {sec:.1f}s  greedy: {ref.detok(gen)!r}", flush=True)
            return first, gen, margins, sec

        def run_fp32():
            nonlocal model
            if model is None:
                t0 = time.time()
                model = Gemma3(args.model)
                print(f"  numpy reference loaded (weights dequantized to fp32) in {time.time() - t0:.1f}s", flush=True)
            return model.greedy(ids, N_GEN)

        def run_llama():
            first, gen = ref.greedy(ids, N_GEN)
            return first, gen, []

        lr = cached("llama", run_llama)
        fr = cached("fp32", run_fp32)
        if fr is None or (lr is None and not args.allow_missing_llama):
            complete = False
            continue
        if lr is None:  # fallback only: goldens with fp32 results but no llama.cpp comparison
            print(f"  WARNING: prompt {i}: no llama.cpp result, writing fp32-only golden", flush=True)
            complete = False
        f_first, f_gen, f_margins, t_np = fr
        l_first, l_gen, _, t_llama = lr if lr is not None else (np.full_like(f_first, np.nan), [-1] * N_GEN, [], 0.0)

        f_top_ids, f_top_vals = topk(f_first)
        l_top_ids, l_top_vals = topk(l_first)
        srt = np.sort(f_first)
        stats = {
            "first_token_equal": f_gen[0] == l_gen[0],
            "greedy_prefix_agreement": prefix_agree(f_gen, l_gen),
            "greedy_positions_equal": int(sum(x == y for x, y in zip(f_gen, l_gen))),
            "first_logits_max_abs_diff": float(np.max(np.abs(f_first - l_first))),
            "first_logits_rms_diff": float(np.sqrt(np.mean((f_first - l_first) ** 2))),
            "first_logits_fp32_rms": float(np.sqrt(np.mean(f_first ** 2))),
            "top5_overlap": len(set(f_top_ids[:5]) & set(l_top_ids[:5])),
            "top10_overlap": len(set(f_top_ids) & set(l_top_ids)),
            "fp32_top1_margin": float(srt[-1] - srt[-2]),
        }
        d = stats["greedy_prefix_agreement"]
        if d < N_GEN:  # how close the fp32 top-2 race was where the continuations part
            stats["fp32_margin_at_divergence"] = f_margins[d]
        print("  agreement:", json.dumps(stats), flush=True)
        if i == 1 and (not stats["first_token_equal"] or stats["top5_overlap"] < 3):
            print("  WARNING: numpy reference disagrees with llama.cpp on the short prompt: reference bug?")
            sane = False

        f_first.astype("<f4").tofile(os.path.join(args.out, f"prompt{i}_logits_f32.bin"))
        golden = {
            "prompt": i,
            "description": name,
            "model": "gemma-3-270m Q4_K_M GGUF",
            "text": text,
            "n_tokens": len(ids),
            "ids": [int(t) for t in ids],
            "n_generated": N_GEN,
            "fp32": {
                "logits_file": f"prompt{i}_logits_f32.bin",
                "top10_ids": f_top_ids, "top10_logits": f_top_vals,
                "greedy": f_gen, "greedy_text": ref.detok(f_gen),
                "greedy_top1_top2_margins": [round(x, 4) for x in f_margins],
                "seconds": round(t_np, 1),
            },
            "llama_cpp": None if lr is None else {
                "version": getattr(ref.lc, "__version__", "?"),
                "top10_ids": l_top_ids, "top10_logits": l_top_vals,
                "greedy": l_gen, "greedy_text": ref.detok(l_gen),
                "seconds": round(t_llama, 1),
            },
            "agreement": None if lr is None else stats,
        }
        with open(os.path.join(args.out, f"prompt{i}.json"), "w") as fh:
            # one top-level key per line, values compact (the id lists are long)
            fh.write("{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in golden.items()) + "\n}\n")
    print(f"total {time.time() - t_all:.1f}s", flush=True)
    if not complete:
        print("some goldens not written: a reference result is missing (see --only)", flush=True)
    return 0 if sane else 1


if __name__ == "__main__":
    sys.exit(main())
