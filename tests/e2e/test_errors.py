"""Bad requests against `uniprefill serve`, sent raw (http.client and sockets) so malformed bodies
reach the server as they are.

Every bad request must get its status code and an OpenAI-style error body
{"error": {"message", "type", "param", "code"}} whose message or param names the problem; after
each one a good request still succeeds, and at the end the process is alive and its log shows no
crash. The server runs with --ctx-size 512 (so a ~2000-token prompt is over the context) and an
API key (so 401 is covered by the same process).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_harness import Server, long_text, token_prompt  # noqa: E402

KEY = "sk-errors-test"


class ErrorsTest(unittest.TestCase):
    server: Server
    model: str

    @classmethod
    def setUpClass(cls):
        cls.server = Server(["--ctx-size", "512", "--kv-cache-memory", "128MiB"], api_key=KEY,
                            name="errors").start()
        status, _, data = cls.server.request("GET", "/v1/models",
                                             headers=cls.server.headers(content_type=False))
        assert status == 200, data
        cls.model = json.loads(data)["data"][0]["id"]

    @classmethod
    def tearDownClass(cls):
        alive = cls.server.alive()
        cls.server.__exit__(None, None, None)
        assert alive, "server died during the errors test"

    # ---- helpers ----

    def good_request_succeeds(self, path: str = "/v1/completions"):
        """A good request to `path` (chat when it is the chat route) succeeds."""
        if path == "/v1/chat/completions":
            body = {"model": self.model, "max_tokens": 1,
                    "messages": [{"role": "user", "content": "Hi"}]}
        else:
            path = "/v1/completions"
            body = {"model": self.model, "prompt": "Hello", "max_tokens": 1, "temperature": 0}
        status, body = self.server.post_json(path, body)
        self.assertEqual(status, 200, f"a good request to {path} after a bad one failed: {body}")
        self.assertEqual(len(body["choices"]), 1)

    def assert_error(self, status: int, body, want_status, names=(), param=None, code=None):
        """Checks one error response; `names`: words of which at least one must appear in the
        message or the param (case-insensitive)."""
        want = want_status if isinstance(want_status, tuple) else (want_status,)
        self.assertIn(status, want, f"body: {body}")
        self.assertIsInstance(body, dict, f"error body is not JSON: {body!r}")
        self.assertIn("error", body, body)
        err = body["error"]
        for k in ("message", "type", "param", "code"):
            self.assertIn(k, err, f"error object lacks {k!r}: {err}")
        self.assertIsInstance(err["message"], str)
        self.assertTrue(err["message"])
        self.assertIsInstance(err["type"], str)
        if status == 401:
            self.assertEqual(err["type"], "authentication_error")
        elif 400 <= status < 500:
            self.assertEqual(err["type"], "invalid_request_error")
        if names:
            hay = (err["message"] + " " + str(err["param"] or "")).lower()
            self.assertTrue(any(n.lower() in hay for n in names),
                            f"error message does not name {names}: {err}")
        if param is not None:
            self.assertEqual(err["param"], param, err)
        if code is not None:
            self.assertEqual(err["code"], code, err)
        return err

    def post_raw(self, path, body: bytes, api_key=None, content_type=True):
        status, _, data = self.server.request("POST", path, body,
                                              self.server.headers(api_key, content_type))
        try:
            return status, json.loads(data)
        except ValueError:
            return status, data.decode("utf-8", "replace")

    def bad(self, path, obj, want_status, names=(), param=None, code=None, api_key=None):
        raw = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        status, body = self.post_raw(path, raw, api_key=api_key)
        err = self.assert_error(status, body, want_status, names, param, code)
        self.good_request_succeeds(path)
        return err

    def comp(self, **fields):
        body = {"model": self.model, "prompt": "Hello", "max_tokens": 2}
        body.update(fields)
        return {k: v for k, v in body.items() if v is not _DROP}

    def chat(self, **fields):
        body = {"model": self.model, "messages": [{"role": "user", "content": "Hi"}],
                "max_tokens": 2}
        body.update(fields)
        return {k: v for k, v in body.items() if v is not _DROP}

    # ---- malformed bodies ----

    def test_malformed_json(self):
        for path in ("/v1/completions", "/v1/chat/completions"):
            self.bad(path, b'{"model": "m", "prompt": ', 400, ("json", "parse"))
            self.bad(path, b"not json at all", 400, ("json", "parse"))
            self.bad(path, b"", 400, ("json", "body", "empty"))
            self.bad(path, b"[1, 2, 3]", 400, ("object",))
            self.bad(path, b'{"model": "m"} trailing', 400, ("json", "parse"))
            self.bad(path, b'{"model": "\xff\xfe"}', 400, ())

    def test_missing_fields(self):
        self.bad("/v1/completions", self.comp(model=_DROP), 400, ("model",))
        self.bad("/v1/chat/completions", self.chat(model=_DROP), 400, ("model",))
        self.bad("/v1/completions", self.comp(prompt=_DROP), 400, ("prompt",), param="prompt")
        self.bad("/v1/chat/completions", self.chat(messages=_DROP), 400, ("messages",),
                 param="messages")
        self.bad("/v1/chat/completions", self.chat(messages=[]), 400, ("messages",))

    def test_wrong_types(self):
        self.bad("/v1/completions", self.comp(max_tokens="ten"), 400, ("max_tokens",),
                 param="max_tokens")
        self.bad("/v1/chat/completions", self.chat(max_tokens="ten"), 400, ("max_tokens",),
                 param="max_tokens")
        self.bad("/v1/completions", self.comp(max_tokens=2.5), 400, ("max_tokens",))
        self.bad("/v1/completions", self.comp(temperature="hot"), 400, ("temperature",),
                 param="temperature")
        self.bad("/v1/completions", self.comp(top_p="x"), 400, ("top_p",))
        self.bad("/v1/completions", self.comp(stream="yes"), 400, ("stream",))
        self.bad("/v1/completions", self.comp(prompt=12), 400, ("prompt",))
        self.bad("/v1/completions", self.comp(model=7), 400, ("model",))
        self.bad("/v1/completions", self.comp(seed="s"), 400, ("seed",))
        self.bad("/v1/completions", self.comp(stop=5), 400, ("stop",))
        self.bad("/v1/chat/completions", self.chat(messages="Hi"), 400, ("messages",))
        self.bad("/v1/chat/completions", self.chat(messages=[{"role": "user"}]), 400,
                 ("content", "messages"))
        self.bad("/v1/chat/completions",
                 self.chat(messages=[{"role": "wizard", "content": "Hi"}]), 400,
                 ("role", "messages"))

    def test_out_of_range_values(self):
        self.bad("/v1/completions", self.comp(max_tokens=-5), 400, ("max_tokens",),
                 param="max_tokens")
        self.bad("/v1/completions", self.comp(max_tokens=0), 400, ("max_tokens",))
        self.bad("/v1/completions", self.comp(max_tokens=10**9), 400,
                 ("max_tokens", "context"))
        self.bad("/v1/chat/completions", self.chat(max_tokens=10**9), 400,
                 ("max_tokens", "context"))
        self.bad("/v1/completions", self.comp(max_tokens=10**30), 400, ("max_tokens",))
        self.bad("/v1/completions", self.comp(temperature=-1), 400, ("temperature",))
        self.bad("/v1/completions", self.comp(top_p=1.5), 400, ("top_p",))
        self.bad("/v1/completions", self.comp(logprobs=21), 400, ("logprobs",))
        self.bad("/v1/completions", self.comp(logprobs=-1), 400, ("logprobs",))
        self.bad("/v1/chat/completions", self.chat(logprobs=True, top_logprobs=50), 400,
                 ("top_logprobs",))
        self.bad("/v1/completions", self.comp(prompt=[1, 2, 10**7]), 400,
                 ("prompt", "token", "vocab"))
        self.bad("/v1/completions", self.comp(prompt=[]), 400, ("prompt", "empty"))
        # An empty text prompt is the BOS token alone (as in vLLM): either accepted or a 400.
        status, body = self.post_raw("/v1/completions", json.dumps(self.comp(prompt="")).encode())
        if status != 200:
            self.assert_error(status, body, 400, ("prompt", "empty"))

    def test_unsupported_features(self):
        self.bad("/v1/completions", self.comp(n=2), 400, ("n",), param="n")
        self.bad("/v1/completions", self.comp(echo=True), 400, ("echo",))
        self.bad("/v1/completions", self.comp(best_of=3), 400, ("best_of",))

    def test_uniprefill_field(self):
        self.bad("/v1/completions", self.comp(uniprefill="yes"), 400, ("uniprefill",))
        self.bad("/v1/completions", self.comp(uniprefill={"keep_ratio": 2.0}), 400,
                 ("keep_ratio", "keep ratio", "uniprefill"))
        self.bad("/v1/completions", self.comp(uniprefill={"mode": "bogus"}), 400,
                 ("mode", "bogus", "uniprefill"))
        self.bad("/v1/completions", self.comp(uniprefill={"top_p": -0.5}), 400,
                 ("top_p", "top-p", "uniprefill"))

    def test_prompt_longer_than_context(self):
        # --ctx-size 512: ~2000 tokens of ids and ~2000 tokens of text are both over it.
        err = self.bad("/v1/completions", self.comp(prompt=token_prompt(2000, seed=1)), 400,
                       ("context", "long", "token"))
        print(f"    overlong prompt: {err['message']}", flush=True)
        self.bad("/v1/completions", self.comp(prompt=long_text(170)), 400,
                 ("context", "long", "token"))
        self.bad("/v1/chat/completions",
                 self.chat(messages=[{"role": "user", "content": long_text(170)}]), 400,
                 ("context", "long", "token"))
        # Prompt fits but prompt + max_tokens does not.
        self.bad("/v1/completions", self.comp(prompt=token_prompt(400, seed=2), max_tokens=200),
                 400, ("context", "max_tokens", "long"))
        # Streaming requests fail the same way, before any event.
        self.bad("/v1/completions", self.comp(prompt=token_prompt(2000, seed=3), stream=True),
                 400, ("context", "long", "token"))
        # A prompt just under the limit still works.
        status, body = self.server.post_json(
            "/v1/completions", self.comp(prompt=token_prompt(500, seed=4), max_tokens=4))
        self.assertEqual(status, 200, body)

    def test_unknown_model(self):
        self.bad("/v1/completions", self.comp(model="gpt-4"), 404, ("gpt-4", "model"),
                 code="model_not_found")
        self.bad("/v1/chat/completions", self.chat(model="gpt-4"), 404, ("gpt-4", "model"),
                 code="model_not_found")

    def test_body_too_large(self):
        # 9 MiB of valid JSON: the limit is 8 MiB. The server may answer before reading it all.
        big = json.dumps(self.comp(prompt="a " * (9 * 1024 * 1024 // 2))).encode()
        self.assertGreater(len(big), 8 * 1024 * 1024)
        status, body = raw_exchange(self.server.port, "POST", "/v1/completions", big,
                                    {"Authorization": f"Bearer {KEY}",
                                     "Content-Type": "application/json"})
        self.assert_error(status, body, 413, ("large", "limit", "size", "bytes"))
        self.good_request_succeeds()
        # Only the declared length over the limit, with no body sent at all.
        status, body = raw_exchange(self.server.port, "POST", "/v1/completions", b"",
                                    {"Authorization": f"Bearer {KEY}",
                                     "Content-Type": "application/json",
                                     "Content-Length": str(64 * 1024 * 1024)}, send_body=False)
        self.assertEqual(status, 413, body)
        self.good_request_succeeds()

    def test_api_key(self):
        err = self.bad("/v1/completions", self.comp(), 401, ("key", "auth"), api_key="sk-wrong")
        self.assertNotIn(KEY, err["message"], "the error must not echo the real key")
        self.bad("/v1/completions", self.comp(), 401, ("key", "auth"), api_key="")
        self.bad("/v1/chat/completions", self.chat(), 401, ("key", "auth"), api_key="")
        status, _, data = self.server.request("GET", "/v1/models", headers={})
        self.assertEqual(status, 401, data)
        # A malformed Authorization header.
        status, _, data = self.server.request(
            "POST", "/v1/completions", json.dumps(self.comp()).encode(),
            {"Authorization": "Basic " + KEY, "Content-Type": "application/json"})
        self.assertEqual(status, 401, data)
        self.good_request_succeeds()

    def test_unknown_path_and_method(self):
        for method, path in (("GET", "/v1/nope"), ("POST", "/v1/nope"), ("GET", "/"),
                             ("POST", "/v1/embeddings"), ("GET", "/v1/completions/../../etc")):
            status, _, data = self.server.request(method, path, b"{}" if method == "POST" else None,
                                                  self.server.headers())
            self.assertEqual(status, 404, f"{method} {path}: {data!r}")
            self.assert_error(status, json.loads(data), 404, ())
        for path in ("/v1/completions", "/v1/chat/completions"):
            status, _, data = self.server.request("GET", path, headers=self.server.headers())
            self.assertIn(status, (404, 405), f"GET {path}: {data!r}")
            self.assert_error(status, json.loads(data), (404, 405), ())
        self.good_request_succeeds()

    def test_keep_alive_after_errors(self):
        """Clients (the openai package, curl with several URLs) reuse connections: an error
        response must leave the connection usable for the next request, or close it."""
        good = json.dumps(self.comp(max_tokens=1)).encode()
        sequence = [
            ("bad key", "/v1/completions", good, "sk-wrong", 401),
            ("missing key", "/v1/completions", good, "", 401),
            ("no route", "/v1/nope", good, None, 404),
            ("unknown model", "/v1/completions", json.dumps(self.comp(model="x")).encode(), None,
             404),
            ("malformed JSON", "/v1/completions", b"{oops", None, 400),
            ("bad field", "/v1/completions", json.dumps(self.comp(max_tokens="x")).encode(),
             None, 400),
        ]
        problems = []
        for (what, path, body, key, want), split in [(s, sp) for s in sequence
                                                     for sp in (False, True)]:
            conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=60)
            try:
                if split:  # headers and body in separate writes, as httpx (openai) sends them
                    what += " (body sent apart)"
                    conn.putrequest("POST", path)
                    for k, v in self.server.headers(key).items():
                        conn.putheader(k, v)
                    conn.putheader("Content-Length", str(len(body)))
                    conn.endheaders()
                    time.sleep(0.05)
                    conn.send(body)
                else:
                    conn.request("POST", path, body, self.server.headers(key))
                resp = conn.getresponse()
                resp.read()
                self.assertEqual(resp.status, want, what)
                closed = (resp.getheader("Connection") or "").lower() == "close"
                try:
                    conn.request("POST", "/v1/completions", good, self.server.headers())
                    resp2 = conn.getresponse()
                    data = resp2.read()
                    if resp2.status != 200:
                        problems.append(f"after {what} ({want}) on the same connection: HTTP "
                                        f"{resp2.status} {data[:200]!r}")
                except (http.client.HTTPException, OSError) as e:
                    if not closed:
                        problems.append(f"after {what} ({want}): {type(e).__name__} {e}, and the "
                                        f"response did not say Connection: close")
            finally:
                conn.close()
        self.assertFalse(problems, "\n".join(problems))

    def test_broken_connections(self):
        """Garbage, half requests and early disconnects must not hurt the server."""
        for payload in (b"GARBAGE\r\n\r\n", b"\x00\x01\x02" * 100,
                        b"POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"mo",
                        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"):
            with socket.create_connection(("127.0.0.1", self.server.port), timeout=10) as s:
                s.sendall(payload)
                s.shutdown(socket.SHUT_WR)
                try:
                    s.recv(65536)
                except OSError:
                    pass
            self.good_request_succeeds()
        # A client that disconnects while its (long) request runs.
        body = json.dumps(self.comp(prompt="Count to one hundred:", max_tokens=200,
                                    ignore_eos=True)).encode()
        for stream in (False, True):
            req = json.loads(body)
            req["stream"] = stream
            data = json.dumps(req).encode()
            with socket.create_connection(("127.0.0.1", self.server.port), timeout=10) as s:
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Type: application/json\r\n"
                          + f"Authorization: Bearer {KEY}\r\nContent-Length: {len(data)}\r\n\r\n"
                          .encode() + data)
                if stream:
                    s.recv(100)
            self.good_request_succeeds()
        self.assertTrue(self.server.alive())


class ShutdownTest(unittest.TestCase):
    def test_sigterm_with_requests_in_flight(self):
        """SIGTERM while a stream and a plain request run: both end (abort or closed), the
        process exits 0 promptly, and the log shows no crash."""
        srv = Server(["--kv-cache-memory", "256MiB"], name="shutdown").start()
        try:
            model = json.loads(srv.get_text("/v1/models")[1])["data"][0]["id"]
            body = {"model": model, "prompt": "Tell me a long story.", "max_tokens": 2000,
                    "ignore_eos": True}
            outcome = {}

            def stream():
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
                    conn.request("POST", "/v1/completions",
                                 json.dumps(dict(body, stream=True)).encode(),
                                 {"Content-Type": "application/json"})
                    resp = conn.getresponse()
                    outcome["stream_status"] = resp.status
                    data = b""
                    while True:
                        chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(1)
                        if not chunk:
                            break
                        data += chunk
                        if b"data:" in data and "stream_started" not in outcome:
                            outcome["stream_started"] = time.monotonic()
                    outcome["stream_events"] = parse_sse_lenient(data.decode("utf-8", "replace"))
                except (OSError, http.client.HTTPException) as e:
                    outcome["stream_error"] = repr(e)

            def plain():
                try:
                    status, b = srv.post_json("/v1/completions", body, timeout=120)
                    outcome["plain"] = (status, b)
                except (OSError, http.client.HTTPException) as e:
                    outcome["plain_error"] = repr(e)

            threads = [threading.Thread(target=stream), threading.Thread(target=plain)]
            for t in threads:
                t.start()
            deadline = time.monotonic() + 120
            while ("stream_started" not in outcome and time.monotonic() < deadline
                   and any(t.is_alive() for t in threads[:1])):
                time.sleep(0.05)
            self.assertIn("stream_started", outcome, f"the stream never started: {outcome}")
            time.sleep(0.5)
            t0 = time.monotonic()
            code = srv.stop(timeout_s=60)
            stop_s = time.monotonic() - t0
            for t in threads:
                t.join(timeout=60)
                self.assertFalse(t.is_alive(), "a client hung after the server stopped")
            self.assertEqual(code, 0, f"exit code {code} after SIGTERM:\n{srv.log_tail()}")
            self.assertLess(stop_s, 30, "the server took too long to stop")
            srv.assert_no_crash_in_log()
            events = outcome.get("stream_events", [])
            finishes = [e["choices"][0].get("finish_reason") for e in events
                        if isinstance(e, dict) and e.get("choices")]
            print(f"    SIGTERM: stopped in {stop_s:.1f} s; stream: "
                  f"{outcome.get('stream_error') or f'{len(events)} events, last finish {finishes[-1:]}'}; "
                  f"plain request: {outcome.get('plain_error') or outcome.get('plain', ('?',))[0]}",
                  flush=True)
            if "plain" in outcome:
                status, b = outcome["plain"]
                if status == 200:
                    self.assertEqual(b["choices"][0]["finish_reason"], "abort", b)
                else:
                    self.assertIn(status, (500, 503), b)
                    self.assertIn("error", b)
            if finishes and finishes[-1] is not None:
                self.assertEqual(finishes[-1], "abort")
        finally:
            srv._kill()


def parse_sse_lenient(text: str) -> list:
    """parse_sse, tolerating a stream cut in the middle of an event."""
    out = []
    for event in text.replace("\r\n", "\n").split("\n\n"):
        payload = "\n".join(line[5:].lstrip(" ") for line in event.split("\n")
                            if line.startswith("data:"))
        if not payload:
            continue
        try:
            out.append(payload if payload == "[DONE]" else json.loads(payload))
        except ValueError:
            pass
    return out


_DROP = object()


def raw_exchange(port: int, method: str, path: str, body: bytes, headers: dict,
                 send_body: bool = True, timeout: float = 60) -> tuple[int, object]:
    """One request over a plain socket, tolerant of the server answering and closing before it
    has read the whole body; returns (status, parsed JSON body or text)."""
    hdrs = dict(headers)
    hdrs.setdefault("Content-Length", str(len(body)))
    hdrs.setdefault("Host", "127.0.0.1")
    hdrs.setdefault("Connection", "close")
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items())
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(head.encode() + b"\r\n")
        if send_body:
            view = memoryview(body)
            try:
                for i in range(0, len(view), 1 << 16):
                    s.sendall(view[i:i + (1 << 16)])
            except (BrokenPipeError, ConnectionResetError):
                pass
        chunks = []
        try:
            while True:
                data = s.recv(1 << 16)
                if not data:
                    break
                chunks.append(data)
                raw = b"".join(chunks)
                if b"\r\n\r\n" in raw:
                    head_b, _, rest = raw.partition(b"\r\n\r\n")
                    for line in head_b.split(b"\r\n")[1:]:
                        k, _, v = line.partition(b":")
                        if k.strip().lower() == b"content-length" and len(rest) >= int(v):
                            raise StopIteration
        except StopIteration:
            pass
        except ConnectionResetError:
            pass
    finally:
        s.close()
    raw = b"".join(chunks)
    if not raw:
        raise AssertionError("the server closed the connection without a response")
    head_b, _, rest = raw.partition(b"\r\n\r\n")
    status = int(head_b.split(b" ", 2)[1])
    try:
        return status, json.loads(rest)
    except ValueError:
        return status, rest.decode("utf-8", "replace")


if __name__ == "__main__":
    unittest.main(verbosity=2)
