"""Continuous batching keeps greedy outputs: 32 concurrent requests equal the same requests alone.

Each request is a /v1/completions call with a token-id prompt (deterministic pseudo-random ids of
ordinary Gemma 3 tokens, so its length is exact), lengths spread log-uniformly over 100..8000
tokens, max_tokens 16, temperature 0, ignore_eos, logprobs 2. First every request runs alone (one
after another), then all at once against the same server (--max-batched-tokens 16384, a KV pool big
enough for all of them). A concurrent request must produce the alone tokens, or diverge only where
the alone run's top-2 logprob gap is below 1e-3 (a near tie that batched arithmetic may flip).
Finally /metrics must show that prefills and decodes shared steps (uniprefill_mixed_steps_total).

Sizes (run_e2e.py --quick / --full): quick 8 requests log-uniform over 100..2000 tokens; default
32 requests over 100..8000 skewed to short prompts (~29K prompt tokens); full 32 requests
log-uniform over 100..8000 (~60K prompt tokens, ~30 minutes on 2 busy cores).
"""

from __future__ import annotations

import concurrent.futures
import os
import random
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openai  # noqa: E402

from server_harness import (CONFIG, Server, compare_with_alone, log,  # noqa: E402
                            token_prompt)

BOS = 2


def prompt_lengths(n: int, lo: int, hi: int, skew: float = 1.0, seed: int = 11) -> list[int]:
    """n lengths spaced over [lo, hi] (both ends included) in a shuffled order: log-uniformly when
    skew is 1, denser at the short end when skew > 1 (lo * (hi / lo) ** ((i / (n - 1)) ** skew))."""
    if n == 1:
        return [lo]
    lengths = [round(lo * (hi / lo) ** ((i / (n - 1)) ** skew)) for i in range(n)]
    random.Random(seed).shuffle(lengths)
    return lengths


# (requests, shortest, longest, skew) per workload size. The default keeps the 32 requests
# and 100..8000 range but skews the lengths to the short end (28,881 prompt tokens instead of
# 60,032), since every token is prefilled twice (alone, then concurrently) on a 2-core CI machine.
SIZES = {"quick": (8, 100, 2000, 1.0), "default": (32, 100, 8000, 3.0),
         "full": (32, 100, 8000, 1.0)}


class Result:
    def __init__(self, response, wall_s: float):
        c = response.choices[0]
        lp = c.logprobs
        self.text = c.text
        self.tokens = list(lp.tokens)
        self.token_logprobs = list(lp.token_logprobs)
        self.top = [dict(t) for t in lp.top_logprobs]
        self.prompt_tokens = response.usage.prompt_tokens
        self.completion_tokens = response.usage.completion_tokens
        self.wall_s = wall_s


class ConcurrencyTest(unittest.TestCase):
    def test_concurrent_equals_alone(self):
        n, lo, hi, skew = SIZES[CONFIG.size]
        lengths = prompt_lengths(n, lo, hi, skew)
        prompts = [[BOS] + token_prompt(length - 1, seed=1000 + i)
                   for i, length in enumerate(lengths)]
        total_prompt = sum(len(p) for p in prompts)
        log(f"    {n} requests, prompt lengths {min(lengths)}..{max(lengths)} (median "
            f"{sorted(lengths)[n // 2]}), {total_prompt} prompt tokens in all")

        args = ["--max-batched-tokens", "16384", "--kv-cache-memory", "6GiB",
                "--max-num-seqs", "64"]
        with Server(args, name="concurrency") as srv:
            client = openai.OpenAI(base_url=srv.openai_base_url, api_key="x", max_retries=0,
                                   timeout=1800)
            model = client.models.list().data[0].id

            def run(i: int) -> Result:
                t0 = time.monotonic()
                r = client.completions.create(
                    model=model, prompt=prompts[i], max_tokens=16, temperature=0, logprobs=2,
                    extra_body={"ignore_eos": True})
                return Result(r, time.monotonic() - t0)

            t0 = time.monotonic()
            alone = []
            for i in range(n):
                alone.append(run(i))
                if CONFIG.verbose:
                    log(f"      alone {i}: {lengths[i]} tokens {alone[-1].wall_s:.2f} s")
            alone_s = time.monotonic() - t0
            for i, a in enumerate(alone):
                self.assertEqual(a.completion_tokens, 16)
                self.assertEqual(len(a.tokens), 16)
                self.assertIn(a.prompt_tokens, (len(prompts[i]), len(prompts[i]) + 1))
            log(f"    alone: {alone_s:.1f} s ({total_prompt / alone_s:.0f} prompt tok/s)")

            before = srv.metrics()
            mixed_before = before.get("uniprefill_mixed_steps_total")
            t0 = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(max_workers=n) as pool:
                futures = [pool.submit(run, i) for i in range(n)]
                together = [f.result() for f in futures]
            together_s = time.monotonic() - t0
            after = srv.metrics()
            mixed_after = after.get("uniprefill_mixed_steps_total")
            log(f"    concurrent: {together_s:.1f} s ({total_prompt / together_s:.0f} prompt "
                f"tok/s, {together_s / alone_s:.2f}x the alone time); latency "
                f"min {min(r.wall_s for r in together):.1f} s max "
                f"{max(r.wall_s for r in together):.1f} s")
            log(f"    mixed steps: {mixed_before:.0f} -> {mixed_after:.0f}; preemptions "
                f"{after.get('uniprefill_preemptions_total', default=0):.0f}")

        for a, c in zip(alone, together):
            self.assertEqual(c.completion_tokens, 16)
            self.assertEqual(c.prompt_tokens, a.prompt_tokens)
        cmp = compare_with_alone(alone, together, "concurrent",
                                 [f"request {i} ({lengths[i]} tokens)" for i in range(n)])
        cmp.log(n, "divergence")
        self.assertFalse(cmp.failures, "concurrent outputs differ from the alone outputs")
        self.assertGreater(mixed_after, mixed_before,
                           "no step mixed prefills and decodes during the concurrent run")


if __name__ == "__main__":
    unittest.main(verbosity=2)
