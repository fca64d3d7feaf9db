"""curl against `uniprefill serve`: the requests a user types from a shell.

`curl -sS -N` streaming and non-streaming completions and chat completions, /health, /v1/models,
/metrics parsed as Prometheus text, and `curl -w '%{http_code}'` for 404 and 401.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_harness import Metrics, Server, parse_sse  # noqa: E402

CURL = shutil.which("curl")


def curl(*args: str, data: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    cmd = [CURL, "-sS", "--max-time", str(int(timeout)), *args]
    if data is not None:
        cmd += ["-H", "Content-Type: application/json", "--data-binary", "@-"]
    return subprocess.run(cmd, input=data.encode() if data is not None else None,
                          capture_output=True, timeout=timeout + 30)


def curl_status(*args: str, data: str | None = None) -> tuple[int, str]:
    """(HTTP status from -w '%{http_code}', body)."""
    p = curl("-o", "-", "-w", "\n%{http_code}", *args, data=data)
    assert p.returncode == 0, p.stderr.decode()
    out = p.stdout.decode("utf-8", "replace")
    body, _, code = out.rpartition("\n")
    return int(code), body


@unittest.skipIf(CURL is None, "curl is not installed")
class CurlTest(unittest.TestCase):
    server: Server
    model: str

    @classmethod
    def setUpClass(cls):
        cls.server = Server(["--kv-cache-memory", "256MiB"], name="curl").start()
        p = curl(f"{cls.server.base_url}/v1/models")
        assert p.returncode == 0, p.stderr
        cls.model = json.loads(p.stdout)["data"][0]["id"]

    @classmethod
    def tearDownClass(cls):
        cls.server.__exit__(None, None, None)

    def url(self, path: str) -> str:
        return self.server.base_url + path

    def test_health_and_models(self):
        code, body = curl_status(self.url("/health"))
        self.assertEqual(code, 200, body)
        code, body = curl_status(self.url("/v1/models"))
        self.assertEqual(code, 200)
        models = json.loads(body)
        self.assertEqual(models["object"], "list")
        self.assertEqual(models["data"][0]["id"], self.model)

    def test_completion_nonstream(self):
        req = {"model": self.model, "prompt": "Once upon a time", "max_tokens": 12,
               "temperature": 0}
        p = curl(self.url("/v1/completions"), data=json.dumps(req))
        self.assertEqual(p.returncode, 0, p.stderr)
        r = json.loads(p.stdout)
        self.assertEqual(r["object"], "text_completion")
        self.assertTrue(r["choices"][0]["text"])
        self.assertIn(r["choices"][0]["finish_reason"], ("stop", "length"))
        self.assertEqual(r["usage"]["total_tokens"],
                         r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"])
        self.assertIn("uniprefill", r)

    def test_completion_stream(self):
        req = {"model": self.model, "prompt": "Once upon a time", "max_tokens": 12,
               "temperature": 0}
        full = json.loads(curl(self.url("/v1/completions"), data=json.dumps(req)).stdout)
        req.update(stream=True, stream_options={"include_usage": True})
        p = curl("-N", self.url("/v1/completions"), data=json.dumps(req))
        self.assertEqual(p.returncode, 0, p.stderr)
        raw = p.stdout.decode()
        self.assertTrue(raw.rstrip().endswith("data: [DONE]"), raw[-200:])
        self.assertEqual(raw.count("data: [DONE]"), 1)
        events = parse_sse(raw)
        self.assertEqual(events[-1], "[DONE]")
        chunks = events[:-1]
        for ch in chunks:
            self.assertEqual(ch["object"], "text_completion")
        text = "".join(ch["choices"][0]["text"] for ch in chunks if ch["choices"])
        self.assertEqual(text, full["choices"][0]["text"])
        self.assertEqual(chunks[-1]["usage"], full["usage"])

    def test_chat_stream_and_nonstream(self):
        req = {"model": self.model, "max_tokens": 10, "temperature": 0,
               "messages": [{"role": "user", "content": "Write a haiku about rain."}]}
        full = json.loads(curl(self.url("/v1/chat/completions"), data=json.dumps(req)).stdout)
        self.assertEqual(full["object"], "chat.completion")
        self.assertEqual(full["choices"][0]["message"]["role"], "assistant")
        req["stream"] = True
        p = curl("-N", self.url("/v1/chat/completions"), data=json.dumps(req))
        self.assertEqual(p.returncode, 0, p.stderr)
        events = parse_sse(p.stdout.decode())
        self.assertEqual(events[-1], "[DONE]")
        chunks = [e for e in events[:-1] if e["choices"]]
        self.assertEqual(chunks[0]["choices"][0]["delta"].get("role"), "assistant")
        content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
        self.assertEqual(content, full["choices"][0]["message"]["content"])
        self.assertEqual(chunks[-1]["choices"][0]["finish_reason"],
                         full["choices"][0]["finish_reason"])

    def test_metrics_prometheus_text(self):
        # Make sure some request finished first.
        curl(self.url("/v1/completions"),
             data=json.dumps({"model": self.model, "prompt": "Hi", "max_tokens": 2}))
        p = curl("-i", self.url("/metrics"))
        self.assertEqual(p.returncode, 0, p.stderr)
        head, _, body = p.stdout.decode().replace("\r\n", "\n").partition("\n\n")
        self.assertIn(" 200", head.splitlines()[0])
        self.assertIn("text/plain", head.lower())
        m = Metrics.parse(body)  # asserts every non-comment line is `name{labels} value`
        for name in ("uniprefill_requests_running", "uniprefill_requests_waiting",
                     "uniprefill_kv_blocks_used", "uniprefill_kv_bytes_used",
                     "uniprefill_kv_bytes_saved", "uniprefill_mixed_steps_total",
                     "uniprefill_preemptions_total"):
            self.assertIn(name, m.names(), f"{name} missing from /metrics")
            self.assertGreaterEqual(m.get(name), 0)
        totals = m.family("uniprefill_requests_total")
        self.assertTrue(totals, "uniprefill_requests_total{finish_reason=...} missing")
        self.assertTrue(all(dict(k).get("finish_reason") for k in totals))
        self.assertGreaterEqual(sum(totals.values()), 1)
        # Histograms: _bucket{le=...} cumulative and ending at +Inf == _count.
        h = "uniprefill_time_to_first_token_seconds"
        buckets = m.family(h + "_bucket")
        self.assertTrue(buckets, f"{h}_bucket missing")
        by_le = sorted(((float(dict(k)["le"]), v) for k, v in buckets.items()))
        counts = [v for _, v in by_le]
        self.assertEqual(counts, sorted(counts), "histogram buckets must be cumulative")
        self.assertEqual(by_le[-1][0], float("inf"))
        self.assertEqual(by_le[-1][1], m.get(h + "_count"))
        self.assertGreaterEqual(m.get(h + "_count"), 1)
        self.assertGreaterEqual(m.get(h + "_sum"), 0)
        self.assertEqual(m.types.get(h), "histogram")
        self.assertEqual(m.types.get("uniprefill_requests_running"), "gauge")

    def test_status_codes(self):
        code, body = curl_status(self.url("/v1/does-not-exist"))
        self.assertEqual(code, 404, body)
        code, body = curl_status(self.url("/v1/completions"), data=json.dumps(
            {"model": "nope", "prompt": "x", "max_tokens": 1}))
        self.assertEqual(code, 404, body)
        self.assertEqual(json.loads(body)["error"]["code"], "model_not_found")
        code, body = curl_status(self.url("/v1/completions"), data="{not json")
        self.assertEqual(code, 400, body)
        self.assertIn("error", json.loads(body))

    def test_api_key_401(self):
        with Server(["--kv-cache-memory", "128MiB"], api_key="k-123", name="curl_apikey") as srv:
            req = json.dumps({"model": self.model, "prompt": "x", "max_tokens": 1})
            url = srv.base_url + "/v1/completions"
            code, body = curl_status(url, data=req)
            self.assertEqual(code, 401, body)
            self.assertEqual(json.loads(body)["error"]["type"], "authentication_error")
            code, body = curl_status("-H", "Authorization: Bearer wrong", url, data=req)
            self.assertEqual(code, 401, body)
            code, body = curl_status("-H", "Authorization: Bearer k-123", url, data=req)
            self.assertEqual(code, 200, body)
            # The health probe stays open (load balancers carry no key).
            code, _ = curl_status(srv.base_url + "/health")
            self.assertEqual(code, 200)


if __name__ == "__main__":
    unittest.main(verbosity=2)
