"""Load beyond capacity and a long soak against `uniprefill serve`.

burst: a small --kv-cache-memory and 16 concurrent greedy 96-token requests (48 output tokens
each): every request succeeds, the scheduler preempts (uniprefill_preemptions_total grows), all KV
blocks are free afterwards, and every request's output equals the same request sent alone
afterwards (or parts from it only at a near tie of the alone run), so a preempted request resumed
from the right state.

soak: 2,000 requests at concurrency 64 (prompts of 10..60 token ids, max_tokens 1..8, streaming and
not, a few streams cancelled by closing the connection): no errors, and at the end nothing running
or waiting, no KV blocks used, and uniprefill_requests_total{finish_reason} summing to the requests
sent. Sizes: BURST_SIZES and SOAK_SIZES below (run_e2e.py --quick / --full).
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import os
import random
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_harness import (CONFIG, MetricsPoller, Server, compare_with_alone, log,  # noqa: E402
                            parse_sse, token_prompt, wait_until)

BOS = 2

# Burst: (requests, prompt tokens, output tokens, --kv-cache-memory). Gemma 3 270M holds 2 KiB (f32
# K + V; the server runs with --kv-cache-dtype f32) per token per attention layer, 18 layers (15 sliding with window 512): a block of 16
# tokens of one layer is 32 KiB. Prompt and output stay inside the window, so every layer grows by
# a block each 16 tokens: a 96-token prompt is admitted when 18 * 6 = 108 blocks are free, and at
# its last token (143) holds 18 * 9 = 162. The pool (768 / 1536 / 2304 blocks) admits about
# 7 / 14 / 21 requests at once, which would need 1134 / 2268 / 3402 blocks to reach their last
# token: decodes run out of blocks and the newest running requests are preempted (recomputed
# later), even when the requests arrive over several steps.
BURST_SIZES = {"quick": (8, 96, 48, "24MiB"), "default": (16, 96, 48, "48MiB"),
               "full": (24, 96, 48, "72MiB")}
# A burst request may part from its alone run only at a near tie of the alone run
# (server_harness.GAP_TOLERANCE); up to there its token logprobs stay this close to the alone
# run's (they differ by ~1e-5: a recompute sums in another order), so a request that resumed over a
# slightly wrong cache fails even if its text survives.
LOGPROB_TOLERANCE = 1e-3
# Soak: (requests, concurrency).
SOAK_SIZES = {"quick": (300, 64), "default": (1000, 64), "full": (2000, 64)}


def post(port: int, path: str, body: dict, timeout: float = 600) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, json.dumps(body).encode(),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def quiescent(srv: Server):
    """The /metrics once nothing runs, waits or holds KV (None while something does)."""
    m = srv.metrics()
    if (m.get("uniprefill_requests_running") == 0 and m.get("uniprefill_requests_waiting") == 0
            and m.get("uniprefill_kv_blocks_used") == 0):
        return m
    return None


def finished_total(m) -> dict:
    return {dict(k).get("finish_reason", "?"): v
            for k, v in m.family("uniprefill_requests_total").items()}


class Completion:
    """A /v1/completions answer with logprobs, streamed (SSE) or not: text, token texts, the top
    logprobs of each token and the usage."""

    def __init__(self, data: bytes, stream: bool):
        if stream:
            events = parse_sse(data.decode())
            if events[-1] != "[DONE]":
                raise AssertionError("stream not ended by [DONE]")
            if any(isinstance(e, dict) and "error" in e for e in events):
                raise AssertionError(f"error event in stream: {events}")
            choices = [e["choices"][0] for e in events[:-1] if e.get("choices")]
            self.usage = events[-2]["usage"]
        else:
            body = json.loads(data)
            choices = body["choices"]
            self.usage = body["usage"]
        self.text = "".join(c.get("text", "") for c in choices)
        self.tokens, self.token_logprobs, self.top = [], [], []
        for c in choices:
            if c.get("logprobs"):
                self.tokens += c["logprobs"]["tokens"]
                self.token_logprobs += c["logprobs"]["token_logprobs"]
                self.top += c["logprobs"]["top_logprobs"]


class BurstTest(unittest.TestCase):
    def test_burst_over_kv_memory(self):
        n, prompt_len, out_len, kv = BURST_SIZES[CONFIG.size]
        # --f32-decode: a recompute prefills the tokens a request had decoded, and only with f32
        # decodes do both paths share their arithmetic (int16 decode activations would make a
        # recomputed request's logits differ from its alone run's by more than rounding).
        # --kv-cache-dtype f32 for the same reason (f16 keys round a last-bit difference into
        # ~1e-3), and the pool sizes above count f32 blocks (f16 would hold twice the tokens).
        with Server(["--kv-cache-memory", kv, "--max-num-seqs", "64", "--f32-decode",
                     "--kv-cache-dtype", "f32"], name="burst") as srv:
            m0 = srv.metrics()
            blocks_total = m0.get("uniprefill_kv_blocks_total", default=-1)
            model = json.loads(srv.get_text("/v1/models")[1])["data"][0]["id"]
            prompts = [[BOS] + token_prompt(prompt_len - 1, seed=500 + i) for i in range(n)]
            results = [None] * n

            def body(i: int, stream: bool) -> dict:
                # Dense ("uniprefill": false): a UniPrefill recompute selects anew over prompt +
                # output, so a preempted request would legitimately part from its alone run (the
                # C++ BatchEngine tests check that case against its own reference).
                b = {"model": model, "prompt": prompts[i], "max_tokens": out_len,
                     "temperature": 0, "ignore_eos": True, "logprobs": 2, "uniprefill": False}
                if stream:
                    b.update(stream=True, stream_options={"include_usage": True})
                return b

            def one(i):
                results[i] = post(srv.port, "/v1/completions", body(i, stream=i % 2 == 1))

            t0 = time.monotonic()
            with MetricsPoller(srv, ["uniprefill_requests_waiting", "uniprefill_requests_running",
                                     "uniprefill_kv_blocks_used",
                                     "uniprefill_preemptions_total"]) as poller:
                with concurrent.futures.ThreadPoolExecutor(max_workers=n) as pool:
                    list(pool.map(one, range(n)))
            wall = time.monotonic() - t0
            burst = []
            for i, (status, data) in enumerate(results):
                self.assertEqual(status, 200, f"request {i}: {data[:500]!r}")
                burst.append(Completion(data, stream=i % 2 == 1))
                self.assertEqual(burst[i].usage["completion_tokens"], out_len, f"request {i}")
                self.assertEqual(len(burst[i].tokens), out_len, f"request {i}")
            m = wait_until(lambda: quiescent(srv), 30, what="KV blocks freed after the burst")
            preempt = m.get("uniprefill_preemptions_total") - m0.get(
                "uniprefill_preemptions_total")
            log(f"    burst: {n} x {prompt_len}+{out_len} tokens in {wall:.1f} s; peaks: waiting "
                f"{poller.max['uniprefill_requests_waiting']:.0f}, running "
                f"{poller.max['uniprefill_requests_running']:.0f}, KV blocks "
                f"{poller.max['uniprefill_kv_blocks_used']:.0f}/{blocks_total:.0f}; preemptions "
                f"{preempt:.0f}; {poller.polls} polls")
            self.assertGreater(poller.polls, 3)
            self.assertGreater(preempt, 0, "the burst never preempted: nothing was recomputed")
            if blocks_total > 0:
                self.assertLessEqual(poller.max["uniprefill_kv_blocks_used"], blocks_total)
                # KV memory, not only the token budget, held requests back.
                self.assertGreater(poller.max["uniprefill_kv_blocks_used"], blocks_total / 2)
                self.assertLess(poller.max["uniprefill_requests_running"], n)
            self.assertEqual(m.get("uniprefill_kv_blocks_used"), 0)
            self.assertEqual(m.get("uniprefill_kv_bytes_used"), 0)
            totals = finished_total(m)
            self.assertEqual(totals.get("length", 0), n, totals)

            # The same requests alone, one after another: nothing to preempt them.
            t0 = time.monotonic()
            alone = []
            for i in range(n):
                status, data = post(srv.port, "/v1/completions", body(i, stream=False))
                self.assertEqual(status, 200, f"request {i} alone: {data[:500]!r}")
                alone.append(Completion(data, stream=False))
            alone_wall = time.monotonic() - t0
            preempt_alone = srv.metrics().get("uniprefill_preemptions_total") - m.get(
                "uniprefill_preemptions_total")
            self.assertEqual(preempt_alone, 0, "a request alone was preempted")

        cmp = compare_with_alone(alone, burst, "burst", [f"request {i}" for i in range(n)],
                                 check_text=True)
        log(f"    alone: {n} requests in {alone_wall:.1f} s")
        cmp.log(n, "burst vs alone")
        self.assertFalse(cmp.failures, "burst outputs differ from the same requests alone")
        self.assertLess(cmp.max_logprob_diff, LOGPROB_TOLERANCE,
                        "burst logprobs differ from the same requests alone")


class ConnectionBurstTest(unittest.TestCase):
    def test_clients_connect_at_once(self):
        """Rounds of 128 clients opening their connections at the same instant (a barrier), each
        sending one tiny request: every one must be answered, none reset. More clients than HTTP
        worker threads (64) must wait in the server's queues, not be refused."""
        n, rounds = 128, 3
        with Server(["--kv-cache-memory", "256MiB", "--max-num-seqs", "64"],
                    name="connection_burst") as srv:
            model = json.loads(srv.get_text("/v1/models")[1])["data"][0]["id"]
            body = {"model": model, "prompt": "Hi", "max_tokens": 1}
            counts = {}
            for _ in range(rounds):
                barrier = threading.Barrier(n)
                results = [None] * n

                def one(i):
                    barrier.wait()
                    try:
                        status, _ = post(srv.port, "/v1/completions", body, timeout=120)
                        results[i] = status
                    except (OSError, http.client.HTTPException) as e:
                        results[i] = type(e).__name__

                threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                for r in results:
                    counts[r] = counts.get(r, 0) + 1
            log(f"    {rounds} rounds of {n} simultaneous connections: {counts}")
            self.assertEqual(counts, {200: n * rounds},
                             "connections were reset or failed: the listen backlog overflowed "
                             "(the server raises httplib's compiled-in 5 to SOMAXCONN)")


class SoakTest(unittest.TestCase):
    def test_soak(self):
        n_requests, concurrency = SOAK_SIZES[CONFIG.size]
        cancel_every = 97  # ~1% of the requests: streams closed after their first event
        rng = random.Random(2024)
        plan = []
        for i in range(n_requests):
            cancel = i % cancel_every == 50
            plan.append({
                "prompt": [BOS] + token_prompt(rng.randint(10, 60) - 1, seed=10_000 + i),
                "max_tokens": 64 if cancel else rng.randint(1, 8),
                "stream": True if cancel else rng.random() < 0.5,
                "cancel": cancel,
                "ignore_eos": rng.random() < 0.8,
            })
        n_cancel = sum(p["cancel"] for p in plan)

        with Server(["--kv-cache-memory", "512MiB", "--max-num-seqs", "64"], name="soak") as srv:
            model = json.loads(srv.get_text("/v1/models")[1])["data"][0]["id"]
            m0 = srv.metrics()
            totals0 = finished_total(m0)
            errors, resets = [], []
            lock = threading.Lock()
            completion_tokens = [0]

            def one(i):
                p = plan[i]
                body = {"model": model, "prompt": p["prompt"], "max_tokens": p["max_tokens"],
                        "temperature": 0 if i % 3 else 0.8, "seed": i,
                        "ignore_eos": p["ignore_eos"]}
                if p["stream"]:
                    body["stream"] = True
                    body["stream_options"] = {"include_usage": True}
                try:
                    if p["cancel"]:
                        cancel_stream(srv.port, body)
                        return
                    status, data = post(srv.port, "/v1/completions", body, timeout=300)
                    if status != 200:
                        raise AssertionError(f"HTTP {status}: {data[:300]!r}")
                    if p["stream"]:
                        events = parse_sse(data.decode())
                        if events[-1] != "[DONE]":
                            raise AssertionError("stream not ended by [DONE]")
                        if any("error" in e for e in events[:-1]):
                            raise AssertionError(f"error event: {events}")
                        usage = events[-2]["usage"]
                    else:
                        usage = json.loads(data)["usage"]
                    ct = usage["completion_tokens"]
                    if ct > p["max_tokens"] or (p["ignore_eos"] and ct != p["max_tokens"]):
                        raise AssertionError(f"completion_tokens {ct}, max_tokens "
                                             f"{p['max_tokens']}, ignore_eos {p['ignore_eos']}")
                    with lock:
                        completion_tokens[0] += ct
                except ConnectionResetError as e:
                    # Reset before any response byte: the request may never have reached a
                    # handler (a full listen queue), so it is kept apart in the accounting.
                    with lock:
                        resets.append(f"request {i}: {type(e).__name__}: {e}")
                except Exception as e:  # noqa: BLE001 - collected and reported below
                    with lock:
                        errors.append(f"request {i}: {type(e).__name__}: {e}")

            t0 = time.monotonic()
            with MetricsPoller(srv, ["uniprefill_requests_running",
                                     "uniprefill_requests_waiting"], interval_s=0.5) as poller:
                with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
                    list(pool.map(one, range(n_requests)))
            wall = time.monotonic() - t0
            self.assertFalse(errors, f"{len(errors)} failed requests, e.g.:\n" +
                             "\n".join(errors[:10]))
            m = wait_until(lambda: quiescent(srv), 30, what="an idle server after the soak")
            totals = finished_total(m)
            delta = {k: totals.get(k, 0) - totals0.get(k, 0) for k in set(totals) | set(totals0)}
            log(f"    soak: {n_requests} requests ({n_cancel} cancelled, {len(resets)} reset) at "
                f"concurrency {concurrency} in {wall:.1f} s: {n_requests / wall:.1f} req/s, "
                f"{completion_tokens[0] / wall:.0f} output tok/s; peak running "
                f"{poller.max['uniprefill_requests_running']:.0f}; finish reasons {delta}")
            # Every request the server saw finished exactly once; reset connections may or may
            # not have reached it.
            self.assertGreaterEqual(sum(delta.values()), n_requests - len(resets),
                                    f"uniprefill_requests_total sums to {sum(delta.values())}: "
                                    f"{delta}")
            self.assertLessEqual(sum(delta.values()), n_requests, delta)
            self.assertLessEqual(delta.get("abort", 0), n_cancel, delta)
            self.assertEqual(delta.get("error", 0), 0, delta)
            self.assertGreaterEqual(delta.get("stop", 0) + delta.get("length", 0),
                                    n_requests - n_cancel - len(resets), delta)
            self.assertEqual(m.get("uniprefill_requests_running"), 0)
            self.assertEqual(m.get("uniprefill_requests_waiting"), 0)
            self.assertEqual(m.get("uniprefill_kv_blocks_used"), 0)
            # Still healthy and serving.
            status, _ = post(srv.port, "/v1/completions",
                             {"model": model, "prompt": "Hello", "max_tokens": 2})
            self.assertEqual(status, 200)
            self.assertFalse(resets, f"{len(resets)} connections reset by the server (a listen "
                             f"backlog too short for {concurrency} clients connecting at once?), "
                             f"e.g.:\n" + "\n".join(resets[:5]))


def cancel_stream(port: int, body: dict) -> None:
    """Starts a streaming request, reads until the first data event, then drops the connection."""
    data = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=300) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Content-Type: application/json\r\n"
                  + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        got = b""
        while b"data:" not in got:
            chunk = s.recv(4096)
            if not chunk:
                raise AssertionError(f"connection closed before the first event: {got[:300]!r}")
            got += chunk
        if not got.startswith(b"HTTP/1.1 200"):
            raise AssertionError(f"cancelled stream got {got[:200]!r}")


if __name__ == "__main__":
    unittest.main(verbosity=2)
