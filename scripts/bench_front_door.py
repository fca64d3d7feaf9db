#!/usr/bin/env python3
"""Per-request latency of `uniprefill serve`'s HTTP path: what the front door's poll hand-off costs.

    python3 scripts/bench_front_door.py --cli build/uniprefill [--cli-label front-door] \
        [--model models/gemma-3-270m-q4_k_m.gguf] [--health 2000] [--completions 200]

Starts the server (loopback, --threads 2, --http-threads 32, --kv-cache-memory 512MiB) and times,
from a Python client on the same machine:
  health-ka    N sequential GET /health on one keep-alive connection
  health-new   N sequential GET /health, a new connection each
  health-c16   16 threads, each N/16 GET /health on its own keep-alive connection
  compl-c1     M sequential POST /v1/completions (max_tokens 1, a 6-token prompt), keep-alive
  compl-c16    16 threads, each M/8 of those on its own keep-alive connection
and prints one line per case: requests, median, p90 and p99 latency in ms, requests/s. Run it on a
binary with the front door and on one without (e.g. built at bcc374b) to compare.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start(cli: str, model: str) -> tuple[subprocess.Popen, int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([cli, "serve", "--model", model, "--port", str(port), "--threads",
                             "2", "--http-threads", "32", "--kv-cache-memory", "512MiB",
                             "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return proc, port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the server did not start")


def one(conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None) -> float:
    t0 = time.perf_counter()
    conn.request(method, path, body=body,
                 headers={"Content-Type": "application/json"} if body else {})
    r = conn.getresponse()
    r.read()
    if r.status != 200:
        raise RuntimeError(f"{method} {path}: {r.status}")
    return time.perf_counter() - t0


def run_case(port: int, threads: int, per_thread: int, method: str, path: str,
             body: bytes | None, new_conn: bool = False) -> tuple[list[float], float]:
    lat: list[float] = []
    lock = threading.Lock()

    def worker():
        mine = []
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for _ in range(per_thread):
            if new_conn:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            mine.append(one(conn, method, path, body))
            if new_conn:
                conn.close()
        conn.close()
        with lock:
            lat.extend(mine)

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return lat, time.perf_counter() - t0


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(p / 100 * len(s)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cli", default=os.path.join(REPO, "build", "uniprefill"))
    ap.add_argument("--cli-label", default="")
    ap.add_argument("--model", default=os.path.join(REPO, "models", "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--health", type=int, default=2000)
    ap.add_argument("--completions", type=int, default=200)
    a = ap.parse_args()
    proc, port = start(a.cli, a.model)
    body = json.dumps({"model": os.path.splitext(os.path.basename(a.model))[0],
                       "prompt": "The capital of France is", "max_tokens": 1}).encode()
    try:
        run_case(port, 1, 50, "GET", "/health", None)  # warm-up
        run_case(port, 1, 5, "POST", "/v1/completions", body)
        cases = [
            ("health-ka", 1, a.health, "GET", "/health", None, False),
            ("health-new", 1, a.health, "GET", "/health", None, True),
            ("health-c16", 16, a.health // 16, "GET", "/health", None, False),
            ("compl-c1", 1, a.completions, "POST", "/v1/completions", body, False),
            ("compl-c16", 16, a.completions // 8, "POST", "/v1/completions", body, False),
        ]
        label = a.cli_label or a.cli
        for name, threads, per, method, path, b, new in cases:
            lat, wall = run_case(port, threads, per, method, path, b, new)
            ms = [x * 1e3 for x in lat]
            print(f"{label:14} {name:11} n={len(ms):5} median {statistics.median(ms):7.3f} ms  "
                  f"p90 {pct(ms, 90):7.3f} ms  p99 {pct(ms, 99):7.3f} ms  "
                  f"{len(ms) / wall:8.1f} req/s", flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
