"""Start `uniprefill serve` as a subprocess for the end-to-end tests, and small HTTP helpers.

    with Server(extra_args=["--max-num-seqs", "8"]) as srv:
        status, body = srv.post_json("/v1/completions", {...})

Server picks a free port, starts the CLI with its stdout and stderr captured to a log file, waits
until GET /health answers 200 (or fails with the log's tail when the process exits or the timeout
passes), and on exit sends SIGTERM and asserts exit code 0 and a log free of crash signatures.

Configuration (CONFIG) comes from run_e2e.py or, when a module runs alone, from the environment:
UNIPREFILL_CLI (default build/uniprefill), UNIPREFILL_MODEL (default
models/gemma-3-270m-q4_k_m.gguf), UNIPREFILL_E2E_LOG_DIR (default a fresh temp dir),
UNIPREFILL_E2E_SIZE=quick|default|full (workload sizes), UNIPREFILL_E2E_THREADS (--threads of
the servers), UNIPREFILL_E2E_VERBOSE=1. Servers must be started from the main thread (they get
SIGKILL when the thread that started them ends, so a killed test run leaves none behind).
Only the standard library is used here (the openai package is needed by test_openai_client.py
and test_concurrency.py only).
"""

from __future__ import annotations

import atexit
import http.client
import json
import math
import os
import random
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class Config:
    cli: str = os.environ.get("UNIPREFILL_CLI", os.path.join(REPO, "build", "uniprefill"))
    model: str = os.environ.get(
        "UNIPREFILL_MODEL", os.path.join(REPO, "models", "gemma-3-270m-q4_k_m.gguf"))
    log_dir: str = os.environ.get("UNIPREFILL_E2E_LOG_DIR", "")
    # Workload size: "quick" (local iteration), "default" (CI: the whole suite in ~20 minutes on
    # 2 cores) or "full" (the numbers where the default trims them).
    size: str = os.environ.get("UNIPREFILL_E2E_SIZE", "default")
    threads: int = int(os.environ.get("UNIPREFILL_E2E_THREADS", "0"))  # 0: the server's default
    startup_timeout_s: float = 180.0
    verbose: bool = os.environ.get("UNIPREFILL_E2E_VERBOSE", "") not in ("", "0")

    @property
    def quick(self) -> bool:
        return self.size == "quick"

    @property
    def full(self) -> bool:
        return self.size == "full"

    def ensure_log_dir(self) -> str:
        if not self.log_dir:
            self.log_dir = tempfile.mkdtemp(prefix="uniprefill-e2e-")
        os.makedirs(self.log_dir, exist_ok=True)
        return self.log_dir


CONFIG = Config()

# (server name, CPU seconds) of every server stopped so far: run_e2e.py reports them per module, a
# measure of the work done that does not depend on how busy the machine was.
SERVER_CPU_S: list = []

# Lines in a server log that mean it crashed or hit undefined behaviour.
CRASH_PATTERNS = re.compile(
    r"Segmentation fault|SIGSEGV|SIGABRT|terminate called|Assertion .* failed|AddressSanitizer|"
    r"UndefinedBehaviorSanitizer|runtime error:|core dumped|stack smashing|double free|"
    r"std::bad_alloc|\bpanic\b",
    re.IGNORECASE)


def log(msg: str) -> None:
    """Progress output of the tests (stdout, flushed; run_e2e.py shows it)."""
    print(msg, flush=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerError(AssertionError):
    pass


_LIVE: set = set()  # servers started and not stopped yet: killed at exit


@atexit.register
def _kill_leftover_servers():
    for srv in list(_LIVE):
        srv._kill()


def _die_with_parent():
    """In the child before exec: SIGKILL it when the test process dies (Linux prctl), so a killed
    test run leaves no server behind."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Server:
    """A `uniprefill serve` subprocess (context manager)."""

    _counter = 0

    def __init__(self, extra_args: list[str] | None = None, api_key: str | None = None,
                 name: str = "server", startup_timeout_s: float | None = None,
                 cli: str | None = None, model: str | None = None):
        self.extra_args = list(extra_args or [])
        self.api_key = api_key
        self.name = name
        self.startup_timeout_s = startup_timeout_s or CONFIG.startup_timeout_s
        self.cli = cli or CONFIG.cli
        self.model = model or CONFIG.model
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.log_path = ""
        self._log_file = None
        self.exit_code: int | None = None

    # ---- lifecycle ----

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    def command(self) -> list[str]:
        cmd = [self.cli, "serve", "--model", self.model, "--host", "127.0.0.1",
               "--port", str(self.port)]
        if self.api_key is not None:
            cmd += ["--api-key", self.api_key]
        if CONFIG.threads > 0 and "--threads" not in self.extra_args:
            cmd += ["--threads", str(CONFIG.threads)]
        return cmd + self.extra_args

    def start(self) -> "Server":
        log_dir = CONFIG.ensure_log_dir()
        for attempt in range(3):  # a port taken between free_port() and bind: try another
            Server._counter += 1
            self.port = free_port()
            self.log_path = os.path.join(log_dir, f"{self.name}-{os.getpid()}-{Server._counter}.log")
            self._log_file = open(self.log_path, "wb")
            cmd = self.command()
            self._log_file.write(("$ " + " ".join(cmd) + "\n").encode())
            self._log_file.flush()
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._log_file,
                                         stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
            _LIVE.add(self)
            if self._wait_healthy():
                if CONFIG.verbose:
                    log(f"  [{self.name}] serving on port {self.port}, log {self.log_path}")
                return self
            tail = self.log_tail()
            if self.proc.poll() is not None and "address" in tail.lower() and "use" in tail.lower():
                self._log_file.close()
                continue
            self._kill()
            raise ServerError(f"server did not become healthy (exit code {self.proc.returncode}) "
                              f"in {self.startup_timeout_s:.0f} s; log {self.log_path}:\n{tail}")
        raise ServerError(f"could not bind a port; log {self.log_path}:\n{self.log_tail()}")

    def _wait_healthy(self) -> bool:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                status, _, _ = self.request("GET", "/health", timeout=5)
                if status == 200:
                    return True
            except OSError:
                pass
            time.sleep(0.2)
        return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cpu_seconds(self) -> float:
        """User + system CPU time the server process used so far (0 when unknown)."""
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError, AttributeError):
            return 0.0

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM, wait; returns the exit code (kills after timeout_s and raises)."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            cpu = self.cpu_seconds()
            SERVER_CPU_S.append((self.name, cpu))
            if CONFIG.verbose:
                log(f"  [{self.name}] server CPU time {cpu:.1f} s")
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self._kill()
                raise ServerError(f"server did not exit {timeout_s:.0f} s after SIGTERM; "
                                  f"log {self.log_path}:\n{self.log_tail()}")
        self.exit_code = self.proc.returncode
        _LIVE.discard(self)
        if self._log_file:
            self._log_file.close()
            self._log_file = None
        return self.exit_code

    def _kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        _LIVE.discard(self)
        if self._log_file:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        was_alive = self.alive()
        code = self.stop()
        if exc_type is not None:
            return  # the body's failure is the one to report
        if not was_alive:
            raise ServerError(f"server died during the test (exit code {code}); "
                              f"log {self.log_path}:\n{self.log_tail()}")
        if code != 0:
            raise ServerError(f"server exited with code {code} after SIGTERM; "
                              f"log {self.log_path}:\n{self.log_tail()}")
        self.assert_no_crash_in_log()

    # ---- log ----

    def log_text(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    def assert_no_crash_in_log(self) -> None:
        text = self.log_text()
        m = CRASH_PATTERNS.search(text)
        if m:
            start = max(0, m.start() - 500)
            raise ServerError(f"crash signature {m.group(0)!r} in {self.log_path}:\n"
                              f"{text[start:m.end() + 1500]}")

    # ---- HTTP ----

    def headers(self, api_key: str | None = None, content_type: bool = True) -> dict:
        h = {}
        if content_type:
            h["Content-Type"] = "application/json"
        key = api_key if api_key is not None else self.api_key
        if key:
            h["Authorization"] = f"Bearer {key}"
        return h

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict | None = None, timeout: float = 600) -> tuple[int, dict, bytes]:
        """One raw request on a fresh connection: (status, headers (lower-case keys), body)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
        finally:
            conn.close()

    def post_json(self, path: str, obj, api_key: str | None = None,
                  timeout: float = 600) -> tuple[int, object]:
        """POST a JSON body; (status, parsed JSON body or the raw text when it is not JSON)."""
        body = json.dumps(obj).encode() if not isinstance(obj, (bytes, bytearray)) else bytes(obj)
        status, _, data = self.request("POST", path, body, self.headers(api_key), timeout)
        try:
            return status, json.loads(data)
        except ValueError:
            return status, data.decode("utf-8", "replace")

    def stream_json(self, path: str, obj, api_key: str | None = None,
                    timeout: float = 600) -> tuple[int, list]:
        """POST a streaming request; (status, list of parsed SSE data payloads, "[DONE]" kept as
        the string)."""
        body = json.dumps(obj).encode()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("POST", path, body=body, headers=self.headers(api_key))
            resp = conn.getresponse()
            if resp.status != 200:
                return resp.status, [json.loads(resp.read() or b"null")]
            return resp.status, parse_sse(resp.read().decode("utf-8"))
        finally:
            conn.close()

    def get_text(self, path: str) -> tuple[int, str]:
        status, _, data = self.request("GET", path, headers=self.headers(content_type=False))
        return status, data.decode("utf-8", "replace")

    def metrics(self) -> "Metrics":
        status, text = self.get_text("/metrics")
        assert status == 200, f"/metrics: HTTP {status}: {text[:500]}"
        return Metrics.parse(text)


def parse_sse(text: str) -> list:
    """The data payloads of an SSE stream: JSON objects, and "[DONE]" as the string."""
    out = []
    for event in text.replace("\r\n", "\n").split("\n\n"):
        data_lines = [line[5:].lstrip(" ") for line in event.split("\n") if line.startswith("data:")]
        if not data_lines:
            continue
        payload = "\n".join(data_lines)
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


# ---- Prometheus text ----

_SAMPLE_RE = re.compile(
    r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)(?:\s+-?\d+)?$')
_LABEL_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(?:,|$)')


@dataclass
class Metrics:
    """Parsed Prometheus exposition text: samples[(name, frozenset(labels.items()))] = value."""
    samples: dict = field(default_factory=dict)
    types: dict = field(default_factory=dict)

    @staticmethod
    def parse(text: str) -> "Metrics":
        m = Metrics()
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            if line.startswith("#"):
                parts = line.split()
                if len(parts) >= 4 and parts[1] == "TYPE":
                    m.types[parts[2]] = parts[3]
                continue
            match = _SAMPLE_RE.match(line)
            if not match:
                raise AssertionError(f"/metrics line {lineno} is not 'name{{labels}} value': {line!r}")
            labels = {}
            raw = match.group("labels")
            if raw:
                pos = 0
                raw = raw.strip()
                while pos < len(raw):
                    lm = _LABEL_RE.match(raw, pos)
                    if not lm:
                        raise AssertionError(f"/metrics line {lineno}: bad labels {raw!r}")
                    labels[lm.group(1)] = lm.group(2)
                    pos = lm.end()
            value = match.group("value")
            try:
                v = float(value)  # accepts +Inf, -Inf, NaN
            except ValueError:
                raise AssertionError(f"/metrics line {lineno}: bad value {value!r}: {line!r}")
            m.samples[(match.group("name"), frozenset(labels.items()))] = v
        return m

    def get(self, name: str, default: float | None = None, **labels) -> float:
        """The sum of the samples named `name` whose labels include `labels` (the server adds
        its own, e.g. model_name); `default` (or an AssertionError) when there is none."""
        want = set(labels.items())
        values = [v for (n, ls), v in self.samples.items() if n == name and want <= ls]
        if values:
            return sum(values)
        if default is not None:
            return default
        raise AssertionError(f"metric {name}{labels or ''} missing; have: "
                             f"{sorted({n for n, _ in self.samples})}")

    def family(self, name: str) -> dict:
        """{frozenset(labels): value} of every sample named `name`."""
        return {labels: v for (n, labels), v in self.samples.items() if n == name}

    def names(self) -> set:
        return {n for n, _ in self.samples}


# ---- workloads ----

def token_prompt(length: int, seed: int, lo: int = 1000, hi: int = 30000) -> list[int]:
    """A deterministic prompt of `length` ordinary Gemma 3 token ids (all of [1000, 30000) are
    normal tokens, no specials)."""
    rng = random.Random(seed)
    return [rng.randrange(lo, hi) for _ in range(length)]


_WORDS = ("river mountain quiet lantern copper harbor signal winter orchard marble violet engine "
          "garden thunder paper silver meadow falcon candle bridge shadow crystal forest ember "
          "canyon pepper rocket velvet island cobalt prairie needle").split()


def long_text(n_sentences: int, seed: int = 7) -> str:
    """Varied English-like text, about 12 tokens a sentence with the Gemma tokenizer."""
    rng = random.Random(seed)
    out = []
    for i in range(n_sentences):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(6, 10))]
        out.append(f"Note {i}: the " + " ".join(words) + ".")
    return " ".join(out)


def wait_until(predicate, timeout_s: float, interval_s: float = 0.1, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


class MetricsPoller:
    """Polls /metrics from a thread while a workload runs; keeps the maxima of some gauges."""

    def __init__(self, server: Server, names: list[str], interval_s: float = 0.05):
        self.server = server
        self.names = names
        self.interval_s = interval_s
        self.max = {n: 0.0 for n in names}
        self.polls = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                m = self.server.metrics()
                for n in self.names:
                    self.max[n] = max(self.max[n], m.get(n, default=0.0))
                self.polls += 1
            except (OSError, AssertionError, http.client.HTTPException):
                self.errors += 1
            self._stop.wait(self.interval_s)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=30)


# A request run beside others may part from its alone run only where the alone run's top-2
# logprobs are closer than this (a near tie that other arithmetic may flip).
GAP_TOLERANCE = 1e-3


def top2_gap(top: dict) -> float:
    """Top-1 minus top-2 logprob of one output position (inf when one alternative is listed)."""
    vals = sorted(top.values(), reverse=True)
    return vals[0] - vals[1] if len(vals) >= 2 else float("inf")


@dataclass
class AloneComparison:
    """How outputs run beside others compare with the same requests run alone."""
    exact: int = 0                                    # identical tokens (and text, if checked)
    tolerated: list = field(default_factory=list)     # parted at a near tie of the alone run
    failures: list = field(default_factory=list)      # parted without one, or other mismatches
    max_logprob_diff: float = 0.0                     # over the tokens before any parting

    def log(self, n: int, what: str) -> None:
        log(f"    {what}: {self.exact}/{n} identical, {len(self.tolerated)} near-tie "
            f"divergences, {len(self.failures)} real; max |logprob diff| over matching tokens "
            f"{self.max_logprob_diff:.2e}")
        for line in self.tolerated:
            log("      tolerated: " + line)
        for line in self.failures:
            log("      FAILED: " + line)


def compare_with_alone(alone: list, others: list, other_name: str, labels: list[str],
                       check_text: bool = False) -> AloneComparison:
    """Compares outputs (objects with .tokens, .token_logprobs, .top and, with check_text,
    .text) position by position with their alone runs: each must equal its alone run or part
    from it where the alone run's top-2 gap is under GAP_TOLERANCE."""
    out = AloneComparison()
    for label, a, b in zip(labels, alone, others):
        div = next((j for j in range(len(a.tokens)) if j >= len(b.tokens)
                    or a.tokens[j] != b.tokens[j]), None)
        for j in range(len(a.tokens) if div is None else div):
            d = abs(a.token_logprobs[j] - b.token_logprobs[j])
            # max() keeps the old value against NaN: a NaN logprob counts as an infinite difference.
            out.max_logprob_diff = max(out.max_logprob_diff, math.inf if math.isnan(d) else d)
        if div is None:
            if check_text and a.text != b.text:
                out.failures.append(f"{label}: same tokens, different text: alone {a.text!r} "
                                    f"{other_name} {b.text!r}")
            else:
                out.exact += 1
            continue
        if div >= len(b.tokens):
            out.failures.append(f"{label}: {other_name} output ends at {div} tokens")
            continue
        gap = top2_gap(a.top[div])
        line = (f"{label} diverges at output {div}: alone {a.tokens[div]!r} {other_name} "
                f"{b.tokens[div]!r}, alone top-2 gap {gap:.2e}, alone top {a.top[div]} "
                f"{other_name} top {b.top[div]}")
        (out.tolerated if gap < GAP_TOLERANCE else out.failures).append(line)
    return out
