"""Raw-socket clients that misbehave on purpose, for test_hostile.py (standard library only).

Every helper talks HTTP/1.1 by hand, so the bytes on the wire are exactly what a hostile client
would send (http.client refuses to send most of them), and returns what came back.
"""

from __future__ import annotations

import socket
import threading
import time


def connect(port: int, timeout: float = 10.0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_response(s: socket.socket, timeout: float = 10.0) -> tuple[int | None, bytes, bytes]:
    """(status, head, body) of one response; status None when nothing complete came back. Reads
    exactly that response (the head through MSG_PEEK, the body by its Content-Length; none
    without one), so a pipelined response right behind it stays in the socket for the next call."""
    s.settimeout(timeout)
    head = b""
    deadline = time.monotonic() + timeout
    while b"\r\n\r\n" not in head and time.monotonic() < deadline:
        try:
            peek = s.recv(65536, socket.MSG_PEEK)
            if not peek:
                break
            end = (head + peek).find(b"\r\n\r\n")
            head += s.recv(len(peek) if end < 0 else end + 4 - len(head))
        except (socket.timeout, OSError):
            break
    if b"\r\n\r\n" not in head:
        return None, head, b""
    head = head[:-4]
    try:
        status = int(head.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None, head, b""
    length = None
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v.strip())
    body = b""
    while length is not None and len(body) < length and time.monotonic() < deadline:
        try:
            chunk = s.recv(length - len(body))
        except (socket.timeout, OSError):
            break
        if not chunk:
            break
        body += chunk
    return status, head, body


def exchange(port: int, data: bytes, timeout: float = 10.0,
             half_close: bool = False) -> tuple[int | None, bytes]:
    """Sends `data` on a fresh connection and reads one response: (status, body)."""
    with connect(port, timeout) as s:
        try:
            s.sendall(data)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may answer and close before taking everything
        status, _, body = read_response(s, timeout)
        return status, body


def send_while_reading(port: int, head: bytes, body_parts, timeout: float = 30.0):
    """Sends `head` then every part of `body_parts` (an iterable of bytes) from a thread while
    this one reads the response, so a server that answers early (413) is seen at once.
    Returns (status, body, bytes_sent)."""
    s = connect(port, timeout)
    sent = [0]

    def writer():
        try:
            s.sendall(head)
            for part in body_parts:
                s.sendall(part)
                sent[0] += len(part)
        except OSError:
            pass

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    status, _, body = read_response(s, timeout)
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()
    t.join(timeout=5)
    return status, body, sent[0]


class Trickler:
    """`n` sockets that each send a request head one byte every `interval` s and never finish:
    a slowloris. start() opens them; stop() closes them; `closed_by_server` counts the sockets
    the server closed (or answered) meanwhile."""

    HEAD = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 10_000

    def __init__(self, port: int, n: int, interval: float = 1.0):
        self.port, self.n, self.interval = port, n, interval
        self.socks: list[socket.socket] = []
        self.closed_by_server = 0
        self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "Trickler":
        for _ in range(self.n):
            try:
                self.socks.append(connect(self.port, timeout=5))
            except OSError:
                self.refused += 1
        self._thread.start()
        return self

    def _run(self):
        i = 0
        while not self._stop.is_set() and self.socks:
            alive = []
            for s in self.socks:
                try:
                    s.send(self.HEAD[i % len(self.HEAD):i % len(self.HEAD) + 1])
                    alive.append(s)
                except OSError:
                    self.closed_by_server += 1
                    s.close()
            self.socks = alive
            i += 1
            self._stop.wait(self.interval)

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)
        for s in self.socks:
            s.close()
        self.socks = []


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class RssWatch:
    """Samples a process's RSS every 10 ms while active: `peak - before` is the growth."""

    def __init__(self, pid: int):
        self.pid = pid
        self.before = rss_bytes(pid)
        self.peak = self.before
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, rss_bytes(self.pid))
            except OSError:
                return
            self._stop.wait(0.01)

    def __enter__(self) -> "RssWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes(self.pid))

    @property
    def growth_mib(self) -> float:
        return (self.peak - self.before) / (1 << 20)


def timed_health(port: int, timeout: float = 5.0) -> tuple[int | None, float]:
    """(status, seconds) of GET /health on a fresh connection."""
    t0 = time.monotonic()
    try:
        status, _ = exchange(port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", timeout=timeout)
    except OSError:
        status = None
    return status, time.monotonic() - t0
