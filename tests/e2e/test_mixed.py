"""Chunked prefill under a mixed load, through the real `openai` client and `uniprefill bench serve`.

A server with --max-batched-tokens 256. Four short streaming completions (64-token prompts, 200
tokens each, greedy, ignore_eos) start decoding; once each has streamed a few tokens, one long
prompt (2000 tokens, 1000 with --quick) asks for 4 tokens, dense ("uniprefill": false) in one test
and UniPrefill in the other. Chunked prefill cuts it into chunks of what the decodes leave of the
budget (a UniPrefill prompt segment by segment), so its prefill spans several steps that each also
decode the short requests: /metrics' uniprefill_mixed_steps_total grows by at least (long prompt /
budget) - 1 during it (a whole prefill would be one such step). Its greedy tokens equal the same
prompt prefilled whole by a --no-chunked-prefill server, or part from them only where that run's
top-2 gap is a near tie; a UniPrefill prompt keeps exactly the tokens its whole prefill keeps (the
response's `uniprefill.kept`). Then `uniprefill bench serve` runs the mixed workload (Poisson short
requests with a long one among them) at a small size against the same server and must report both
classes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openai  # noqa: E402

from server_harness import CONFIG, Server, compare_with_alone, log, token_prompt  # noqa: E402

BOS = 2
BUDGET = 256


class Result:
    def __init__(self, response):
        c = response.choices[0]
        lp = c.logprobs
        self.text = c.text
        self.tokens = list(lp.tokens)
        self.token_logprobs = list(lp.token_logprobs)
        self.top = [dict(t) for t in lp.top_logprobs]


class MixedLoadTest(unittest.TestCase):
    def _long_prompt_beside_running_decodes(self, uniprefill: bool) -> None:
        long_tokens = 1000 if CONFIG.quick else 2000
        long_prompt = [BOS] + token_prompt(long_tokens - 1, seed=4242)
        shorts = [[BOS] + token_prompt(63, seed=100 + i) for i in range(4)]
        memory = ["--kv-cache-memory", "1GiB"]

        def long_request(client, model):
            r = client.completions.create(
                model=model, prompt=long_prompt, max_tokens=4, temperature=0, logprobs=2,
                extra_body={"ignore_eos": True, "uniprefill": uniprefill})
            return Result(r), (r.model_extra or {}).get("uniprefill")

        with Server(["--no-chunked-prefill"] + memory, name="mixed_whole") as srv:
            client = openai.OpenAI(base_url=srv.openai_base_url, api_key="x", max_retries=0,
                                   timeout=1800)
            whole, whole_kept = long_request(client, client.models.list().data[0].id)

        with Server(["--max-batched-tokens", str(BUDGET)] + memory, name="mixed") as srv:
            client = openai.OpenAI(base_url=srv.openai_base_url, api_key="x", max_retries=0,
                                   timeout=1800)
            model = client.models.list().data[0].id
            started = [threading.Event() for _ in shorts]
            short_tokens = [0] * len(shorts)

            def short(i: int) -> None:
                stream = client.completions.create(
                    model=model, prompt=shorts[i], max_tokens=200, temperature=0, stream=True,
                    extra_body={"ignore_eos": True})
                for chunk in stream:
                    if chunk.choices and chunk.choices[0].text:
                        short_tokens[i] += 1
                        if short_tokens[i] >= 3:
                            started[i].set()

            threads = [threading.Thread(target=short, args=(i,)) for i in range(len(shorts))]
            for t in threads:
                t.start()
            for e in started:
                self.assertTrue(e.wait(timeout=600), "a short request never started streaming")
            before = srv.metrics().get("uniprefill_mixed_steps_total")
            t0 = time.monotonic()
            together, together_kept = long_request(client, model)
            long_s = time.monotonic() - t0
            after = srv.metrics().get("uniprefill_mixed_steps_total")
            for t in threads:
                t.join(timeout=1800)
            kind = "UniPrefill" if uniprefill else "dense"
            log(f"    long {long_tokens}-token {kind} prompt beside 4 decodes: {long_s:.1f} s, "
                f"mixed steps {before:.0f} -> {after:.0f}; short tokens {short_tokens}; "
                f"kept {together_kept} (whole: {whole_kept})")

        self.assertEqual(short_tokens, [200] * len(shorts))
        self.assertGreaterEqual(after - before, long_tokens // BUDGET - 1,
                                "the long prefill did not share several steps with the decodes")
        cmp = compare_with_alone([whole], [together], "chunked", ["long prompt"])
        cmp.log(1, "divergence")
        self.assertFalse(cmp.failures, "the chunked prefill's tokens differ from the whole one's")
        if uniprefill:
            self.assertTrue(whole_kept and whole_kept["kept"], "the whole prefill dropped nothing")
            self.assertLess(whole_kept["kept"][-1]["kept"], whole_kept["kept"][0]["alive"])
            self.assertEqual(together_kept["kept"], whole_kept["kept"],
                             "segment-wise chunks kept other tokens than the whole prefill")

    def test_long_dense_prompt_is_chunked_beside_running_decodes(self):
        self._long_prompt_beside_running_decodes(uniprefill=False)

    def test_long_uniprefill_prompt_is_chunked_segment_wise_beside_running_decodes(self):
        self._long_prompt_beside_running_decodes(uniprefill=True)

    def test_bench_serve_mixed_workload_reports_both_classes(self):
        with Server(["--max-batched-tokens", str(BUDGET), "--kv-cache-memory", "1GiB"],
                    name="mixed_bench") as srv, tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "mixed.json")
            cmd = [CONFIG.cli, "bench", "serve", "--url", srv.base_url, "--rate", "4", "-n", "4",
                   "--prompt-tokens", "32", "--output-tokens", "8", "--long-prompt-tokens", "600",
                   "--long-requests", "1", "--long-output-tokens", "2", "--modes", "dense",
                   "--warmup", "0", "-o", out]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
            self.assertEqual(p.returncode, 0, p.stderr[-2000:])
            for row in ("short: TTFT p99 (ms)", "long: ITL p99 (ms)", "goodput (req/s, SLO)"):
                self.assertIn(row, p.stdout)
            with open(out) as f:
                j = json.load(f)
        classes = j["modes"][0]["classes"]
        self.assertEqual(classes["short"]["ok"], 4)
        self.assertEqual(classes["long"]["ok"], 1)
        self.assertEqual(j["modes"][0]["summary"]["failed"], 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
