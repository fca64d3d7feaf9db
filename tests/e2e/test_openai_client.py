"""The official `openai` Python client against `uniprefill serve` with the real Gemma 3 270M.

Covers models.list, completions and chat completions (streaming and not, usage, logprobs, seed,
stop, the ignore_eos / top_k extensions), the "uniprefill" request extension and the response
extension it returns, and API-key authentication.
"""

from __future__ import annotations

import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openai  # noqa: E402

from server_harness import Server, long_text  # noqa: E402

PROMPT = "The three primary colors are"
CHAT = [{"role": "user", "content": "Name three fruits that are red."}]


def extension(obj) -> dict | None:
    """The "uniprefill" response extension of an openai response object (pydantic extra)."""
    extra = getattr(obj, "model_extra", None) or {}
    return extra.get("uniprefill")


def fixed_ratio_kept_bounds(alive: int, ratio: float, g: int, sink: int, last_n: int):
    """The fewest and most tokens a fixed-ratio drop can keep of `alive` (docs/uniprefill.md):
    floor(ratio * blocks) blocks of g tokens (at least one) chosen by score, plus the first `sink`
    and the last `last_n` tokens. Which blocks win depends on the model; the count of each block's
    tokens outside the sink and window does not, so the bounds take the blocks adding least/most."""
    if alive <= sink + last_n:
        return alive, alive
    blocks = -(-alive // g)
    chosen = min(blocks, max(1, math.floor(ratio * blocks + 1e-9)))
    always = set(range(sink)) | set(range(alive - last_n, alive))
    extra = sorted(sum(1 for i in range(b * g, min(alive, (b + 1) * g)) if i not in always)
                   for b in range(blocks))
    return len(always) + sum(extra[:chosen]), len(always) + sum(extra[-chosen:])


class OpenAIClientTest(unittest.TestCase):
    server: Server
    client: openai.OpenAI
    model: str

    @classmethod
    def setUpClass(cls):
        cls.server = Server(["--kv-cache-memory", "512MiB", "--max-num-seqs", "16"],
                            name="openai_client").start()
        cls.client = openai.OpenAI(base_url=cls.server.openai_base_url, api_key="unused",
                                   max_retries=0, timeout=600)
        cls.model = cls.client.models.list().data[0].id

    @classmethod
    def tearDownClass(cls):
        cls.server.__exit__(None, None, None)

    # ---- models ----

    def test_models_list(self):
        models = self.client.models.list()
        self.assertEqual(len(models.data), 1, models)
        m = models.data[0]
        self.assertEqual(m.object, "model")
        self.assertTrue(m.id)
        self.assertIsInstance(m.created, int)
        self.assertTrue(m.owned_by)

    # ---- completions ----

    def test_completion_nonstream_and_stream(self):
        r = self.client.completions.create(model=self.model, prompt=PROMPT, max_tokens=16,
                                           temperature=0)
        self.assertEqual(r.object, "text_completion")
        self.assertTrue(r.id)
        self.assertEqual(len(r.choices), 1)
        c = r.choices[0]
        self.assertEqual(c.index, 0)
        self.assertIn(c.finish_reason, ("stop", "length"))
        self.assertTrue(c.text, "greedy completion of a plain prompt should not be empty")
        u = r.usage
        self.assertGreater(u.prompt_tokens, 3)
        self.assertGreaterEqual(u.completion_tokens, 1)
        self.assertLessEqual(u.completion_tokens, 16)
        if c.finish_reason == "length":
            self.assertEqual(u.completion_tokens, 16)
        self.assertEqual(u.total_tokens, u.prompt_tokens + u.completion_tokens)

        # Greedy is deterministic: the same request again gives the same text.
        r2 = self.client.completions.create(model=self.model, prompt=PROMPT, max_tokens=16,
                                            temperature=0)
        self.assertEqual(r2.choices[0].text, c.text)
        self.assertNotEqual(r2.id, r.id)

        chunks = list(self.client.completions.create(
            model=self.model, prompt=PROMPT, max_tokens=16, temperature=0, stream=True,
            stream_options={"include_usage": True}))
        self.assertGreaterEqual(len(chunks), 2)
        with_choice = [ch for ch in chunks if ch.choices]
        text = "".join(ch.choices[0].text for ch in with_choice)
        self.assertEqual(text, c.text)
        self.assertEqual(with_choice[-1].choices[0].finish_reason, c.finish_reason)
        for ch in with_choice[:-1]:
            self.assertIsNone(ch.choices[0].finish_reason)
        for ch in chunks:
            self.assertEqual(ch.id, chunks[0].id, "every chunk of a stream has the same id")
        usage_chunks = [ch for ch in chunks if ch.usage is not None]
        self.assertEqual(len(usage_chunks), 1, "include_usage: exactly one chunk carries usage")
        self.assertIs(usage_chunks[0], chunks[-1], "the usage chunk is the last one")
        self.assertEqual(chunks[-1].choices, [])
        su = usage_chunks[0].usage
        self.assertEqual(su.prompt_tokens, u.prompt_tokens)
        self.assertEqual(su.completion_tokens, u.completion_tokens)
        self.assertEqual(su.total_tokens, u.total_tokens)

        # Without include_usage no chunk carries usage.
        chunks = list(self.client.completions.create(
            model=self.model, prompt=PROMPT, max_tokens=4, temperature=0, stream=True))
        self.assertTrue(all(ch.usage is None for ch in chunks))

    def test_completion_token_id_prompt(self):
        ids = [2, 818, 5279, 529, 7001, 563]  # arbitrary ordinary ids after <bos>
        r = self.client.completions.create(model=self.model, prompt=ids, max_tokens=4,
                                           temperature=0, extra_body={"ignore_eos": True})
        self.assertEqual(r.usage.completion_tokens, 4)
        self.assertIn(r.usage.prompt_tokens, (len(ids), len(ids) + 1))

    def test_completion_logprobs(self):
        r = self.client.completions.create(model=self.model, prompt=PROMPT, max_tokens=8,
                                           temperature=0, logprobs=2,
                                           extra_body={"ignore_eos": True})
        c = r.choices[0]
        lp = c.logprobs
        self.assertIsNotNone(lp)
        n = r.usage.completion_tokens
        self.assertEqual(n, 8)
        self.assertEqual(len(lp.tokens), n)
        self.assertEqual(len(lp.token_logprobs), n)
        self.assertEqual(len(lp.top_logprobs), n)
        self.assertEqual("".join(lp.tokens), c.text)
        for tok, tlp, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
            self.assertLessEqual(tlp, 1e-6)
            self.assertTrue(math.isfinite(tlp))
            self.assertGreaterEqual(len(top), 1)
            self.assertLessEqual(len(top), 3)  # top 2, plus the sampled token if not among them
            self.assertIn(tok, top)
            # Greedy: the sampled token is the most likely one.
            self.assertAlmostEqual(tlp, max(top.values()), places=4)
            self.assertAlmostEqual(top[tok], tlp, places=5)
        if lp.text_offset is not None:
            self.assertEqual(len(lp.text_offset), n)
            self.assertEqual(lp.text_offset[0], 0)

        # logprobs=0: the sampled token's logprob only.
        r0 = self.client.completions.create(model=self.model, prompt=PROMPT, max_tokens=4,
                                            temperature=0, logprobs=0)
        lp0 = r0.choices[0].logprobs
        self.assertEqual(len(lp0.token_logprobs), r0.usage.completion_tokens)
        self.assertEqual(r0.choices[0].text, c.text[:len(r0.choices[0].text)])

        # Streaming with logprobs: the tokens across chunks are the same.
        chunks = list(self.client.completions.create(
            model=self.model, prompt=PROMPT, max_tokens=8, temperature=0, logprobs=2,
            stream=True, extra_body={"ignore_eos": True}))
        toks, lps = [], []
        for ch in chunks:
            if ch.choices and ch.choices[0].logprobs is not None:
                toks += ch.choices[0].logprobs.tokens
                lps += ch.choices[0].logprobs.token_logprobs
        self.assertEqual(toks, lp.tokens)
        for a, b in zip(lps, lp.token_logprobs):
            self.assertAlmostEqual(a, b, places=4)

    def test_completion_seed_and_sampling(self):
        kw = dict(model=self.model, prompt=PROMPT, max_tokens=12, temperature=1.0, top_p=0.95,
                  extra_body={"ignore_eos": True, "top_k": 40})
        a = self.client.completions.create(seed=1234, **kw).choices[0].text
        b = self.client.completions.create(seed=1234, **kw).choices[0].text
        self.assertEqual(a, b, "same seed, same sampled text")
        others = {self.client.completions.create(seed=s, **kw).choices[0].text
                  for s in (1, 2, 3, 4)}
        self.assertGreater(len(others | {a}), 1, "different seeds never changed the text")

    def test_completion_stop(self):
        base = self.client.completions.create(model=self.model, prompt=PROMPT, max_tokens=16,
                                              temperature=0, extra_body={"ignore_eos": True})
        text = base.choices[0].text
        # A stop string taken from the middle of the greedy output cuts the text before it.
        words = [w for w in text.split() if len(w) >= 3]
        self.assertTrue(words, f"no word to stop at in {text!r}")
        stop = words[len(words) // 2]
        cut = text[:text.index(stop)]
        r = self.client.completions.create(model=self.model, prompt=PROMPT, max_tokens=16,
                                           temperature=0, stop=[stop],
                                           extra_body={"ignore_eos": True})
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.choices[0].text, cut)
        self.assertNotIn(stop, r.choices[0].text)
        # The same through a stream: the stop string never leaks into a chunk.
        chunks = list(self.client.completions.create(
            model=self.model, prompt=PROMPT, max_tokens=16, temperature=0, stop=stop,
            stream=True, extra_body={"ignore_eos": True}))
        self.assertEqual("".join(ch.choices[0].text for ch in chunks if ch.choices), cut)
        self.assertEqual([ch for ch in chunks if ch.choices][-1].choices[0].finish_reason, "stop")

    def test_ignore_eos_extension(self):
        r = self.client.completions.create(model=self.model, prompt=PROMPT, max_tokens=24,
                                           temperature=0, extra_body={"ignore_eos": True})
        self.assertEqual(r.usage.completion_tokens, 24)
        self.assertEqual(r.choices[0].finish_reason, "length")

    # ---- chat ----

    def test_chat_nonstream_and_stream(self):
        r = self.client.chat.completions.create(model=self.model, messages=CHAT, max_tokens=16,
                                                temperature=0)
        self.assertEqual(r.object, "chat.completion")
        c = r.choices[0]
        self.assertEqual(c.message.role, "assistant")
        self.assertTrue(c.message.content)
        self.assertIn(c.finish_reason, ("stop", "length"))
        self.assertNotIn("<end_of_turn>", c.message.content)
        self.assertNotIn("<start_of_turn>", c.message.content)
        u = r.usage
        self.assertGreater(u.prompt_tokens, 5)
        self.assertLessEqual(u.completion_tokens, 16)
        self.assertEqual(u.total_tokens, u.prompt_tokens + u.completion_tokens)

        chunks = list(self.client.chat.completions.create(
            model=self.model, messages=CHAT, max_tokens=16, temperature=0, stream=True,
            stream_options={"include_usage": True}))
        self.assertEqual(chunks[0].object, "chat.completion.chunk")
        with_choice = [ch for ch in chunks if ch.choices]
        self.assertEqual(with_choice[0].choices[0].delta.role, "assistant",
                         "the first chunk's delta carries the role")
        content = "".join(ch.choices[0].delta.content or "" for ch in with_choice)
        self.assertEqual(content, c.message.content)
        self.assertEqual(with_choice[-1].choices[0].finish_reason, c.finish_reason)
        for ch in with_choice[1:]:
            self.assertIn(ch.choices[0].delta.role, (None, "assistant"))
        self.assertIsNotNone(chunks[-1].usage)
        self.assertEqual(chunks[-1].usage.prompt_tokens, u.prompt_tokens)
        self.assertEqual(chunks[-1].usage.completion_tokens, u.completion_tokens)

    def test_chat_multi_turn_and_system(self):
        messages = [
            {"role": "system", "content": "You answer in one short sentence."},
            {"role": "user", "content": "What is two plus two?"},
            {"role": "assistant", "content": "Two plus two is four."},
            {"role": "user", "content": "And three plus three?"},
        ]
        r = self.client.chat.completions.create(model=self.model, messages=messages,
                                                max_tokens=12, temperature=0)
        self.assertTrue(r.choices[0].message.content)
        r1 = self.client.chat.completions.create(model=self.model, messages=messages[-1:],
                                                 max_tokens=1, temperature=0)
        self.assertGreater(r.usage.prompt_tokens, r1.usage.prompt_tokens + 15)
        # Content as a list of text parts is the same prompt as the plain string.
        parts = [{"role": "user", "content": [{"type": "text", "text": CHAT[0]["content"]}]}]
        a = self.client.chat.completions.create(model=self.model, messages=parts, max_tokens=8,
                                                temperature=0)
        b = self.client.chat.completions.create(model=self.model, messages=CHAT, max_tokens=8,
                                                temperature=0)
        self.assertEqual(a.usage.prompt_tokens, b.usage.prompt_tokens)
        self.assertEqual(a.choices[0].message.content, b.choices[0].message.content)

    def test_chat_logprobs(self):
        r = self.client.chat.completions.create(model=self.model, messages=CHAT, max_tokens=10,
                                                temperature=0, logprobs=True, top_logprobs=3)
        lp = r.choices[0].logprobs
        self.assertIsNotNone(lp)
        content = lp.content
        self.assertEqual(len(content), r.usage.completion_tokens,
                         "one logprobs entry per completion token")
        for item in content:
            self.assertTrue(math.isfinite(item.logprob))
            self.assertLessEqual(item.logprob, 1e-6)
            self.assertEqual(len(item.top_logprobs), 3)
            # Greedy: the sampled token is the most likely one; alternatives sorted descending.
            self.assertEqual(item.top_logprobs[0].token, item.token)
            self.assertAlmostEqual(item.top_logprobs[0].logprob, item.logprob, places=4)
            lps = [t.logprob for t in item.top_logprobs]
            self.assertEqual(lps, sorted(lps, reverse=True))
        text = "".join(item.token for item in content)
        msg = r.choices[0].message.content
        # The content tokens spell the message (an end-of-turn token, if listed, is not in it).
        self.assertTrue(text.startswith(msg) or msg.startswith(text), (text, msg))

        # logprobs without top_logprobs: no alternatives.
        r = self.client.chat.completions.create(model=self.model, messages=CHAT, max_tokens=4,
                                                temperature=0, logprobs=True)
        for item in r.choices[0].logprobs.content:
            self.assertEqual(item.top_logprobs or [], [])
        # No logprobs asked: none returned.
        r = self.client.chat.completions.create(model=self.model, messages=CHAT, max_tokens=4,
                                                temperature=0)
        self.assertIsNone(r.choices[0].logprobs)

    def test_chat_stream_logprobs(self):
        kw = dict(model=self.model, messages=CHAT, max_tokens=8, temperature=0, logprobs=True,
                  top_logprobs=2)
        full = self.client.chat.completions.create(**kw)
        chunks = list(self.client.chat.completions.create(stream=True, **kw))
        toks = []
        for ch in chunks:
            if ch.choices and ch.choices[0].logprobs is not None:
                toks += [c.token for c in ch.choices[0].logprobs.content or []]
        self.assertEqual(toks, [c.token for c in full.choices[0].logprobs.content])

    def test_unknown_model(self):
        with self.assertRaises(openai.NotFoundError) as cm:
            self.client.completions.create(model="no-such-model", prompt="Hi", max_tokens=2)
        self.assertEqual(cm.exception.code, "model_not_found")
        with self.assertRaises(openai.NotFoundError):
            self.client.chat.completions.create(model="no-such-model", messages=CHAT,
                                                max_tokens=2)

    # ---- the uniprefill extension ----

    def test_uniprefill_disabled(self):
        r = self.client.completions.create(model=self.model, prompt=PROMPT, max_tokens=8,
                                           temperature=0, extra_body={"uniprefill": False})
        ext = extension(r)
        self.assertIsNotNone(ext, f"no uniprefill extension in {r.model_extra}")
        self.assertEqual(ext["keep_ratio"], 1.0)
        # Short prompts are never dropped, so dense and UniPrefill greedy text agree.
        on = self.client.completions.create(model=self.model, prompt=PROMPT, max_tokens=8,
                                            temperature=0, extra_body={"uniprefill": True})
        self.assertEqual(on.choices[0].text, r.choices[0].text)

    def test_uniprefill_long_prompt_fixed_ratio(self):
        # ~3000 tokens: past the drop layer's sink + observation window, so tokens are dropped.
        prompt = (long_text(190) + "\n\nQuestion: what was the first note about? Answer:")
        g, sink, last_n = 64, 128, 128
        r = self.client.completions.create(
            model=self.model, prompt=prompt, max_tokens=4, temperature=0,
            extra_body={"uniprefill": {"mode": "fixed-ratio", "keep_ratio": 0.5, "block_size": g,
                                       "sink": sink, "last_n": last_n}})
        n = r.usage.prompt_tokens
        self.assertGreater(n, 2000, "the long prompt should be ~3000 tokens")
        ext = extension(r)
        self.assertIsNotNone(ext, f"no uniprefill extension in {r.model_extra}")
        kept = ext["kept"]
        self.assertGreaterEqual(len(kept), 1)
        alive = n  # the first drop layer sees the whole prompt; selections nest
        for k in kept:
            self.assertIsInstance(k["layer"], int)
            self.assertEqual(k["alive"], alive, ext)
            lo, hi = fixed_ratio_kept_bounds(alive, 0.5, g, sink, last_n)
            self.assertGreaterEqual(k["kept"], lo, f"layer {k['layer']}: {ext}")
            self.assertLessEqual(k["kept"], hi, f"layer {k['layer']}: {ext}")
            self.assertLess(k["kept"], k["alive"])
            alive = k["kept"]
        # keep_ratio: the last drop layer's kept over the prompt (docs/uniprefill.md).
        self.assertAlmostEqual(ext["keep_ratio"], kept[-1]["kept"] / n, places=3)

        # Chat, streaming, top-p: the extension rides on the finish chunk.
        chunks = list(self.client.chat.completions.create(
            model=self.model, messages=[{"role": "user", "content": prompt}], max_tokens=2,
            temperature=0, stream=True,
            extra_body={"uniprefill": {"enabled": True, "mode": "top-p", "top_p": 0.5}}))
        exts = [extension(ch) for ch in chunks if extension(ch) is not None]
        self.assertTrue(exts, "no chunk carries the uniprefill extension")
        self.assertLess(exts[-1]["keep_ratio"], 1.0)
        print(f"    long prompt {n} tokens: fixed-ratio 0.5 kept {kept}; chat top-p 0.5 "
              f"keep_ratio {exts[-1]['keep_ratio']:.3f}", flush=True)

    def test_uniprefill_object_disabled(self):
        r = self.client.completions.create(model=self.model, prompt=PROMPT, max_tokens=2,
                                           temperature=0,
                                           extra_body={"uniprefill": {"enabled": False}})
        self.assertEqual(extension(r)["keep_ratio"], 1.0)
        self.assertEqual(extension(r)["kept"], [])


class ApiKeyTest(unittest.TestCase):
    def test_api_key(self):
        with Server(["--kv-cache-memory", "256MiB"], api_key="sk-e2e-secret",
                    name="openai_apikey") as srv:
            good = openai.OpenAI(base_url=srv.openai_base_url, api_key="sk-e2e-secret",
                                 max_retries=0, timeout=120)
            model = good.models.list().data[0].id
            r = good.completions.create(model=model, prompt="Hello", max_tokens=2, temperature=0)
            self.assertEqual(len(r.choices), 1)
            bad = openai.OpenAI(base_url=srv.openai_base_url, api_key="sk-wrong",
                                max_retries=0, timeout=120)
            with self.assertRaises(openai.AuthenticationError) as cm:
                bad.completions.create(model=model, prompt="Hello", max_tokens=2)
            self.assertEqual(cm.exception.status_code, 401)
            body = cm.exception.body
            self.assertIsInstance(body, dict)
            with self.assertRaises(openai.AuthenticationError):
                bad.chat.completions.create(model=model, messages=CHAT, max_tokens=2)
            with self.assertRaises(openai.AuthenticationError):
                bad.models.list()
            # Still serving the right key afterwards.
            r = good.chat.completions.create(model=model, messages=CHAT, max_tokens=2)
            self.assertEqual(len(r.choices), 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
