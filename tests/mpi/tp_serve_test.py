#!/usr/bin/env python3
"""`uniprefill serve --tensor-parallel 2` under `mpirun -np 2` (issue 21: serving under TP).

    tp_serve_test.py --mpirun MPIRUN --cli UNIPREFILL --model GGUF --mode equal|fault [--log-dir D]

Run it with the project venv's python (the openai package). Both modes run rank 0 and rank 1 with
one thread each (2 cores), mpirun with --tag-output so each line names its rank.

equal: a TP 1 server and a TP 2 job with the same flags (UniPrefill fixed-ratio 0.5, a 256-token
step budget: the long prompts run in chunks, segment by segment, beside other requests' decodes)
get the same 8 completions, 4 at a time, through the openai client: short and ~1,200-token
prompts, UniPrefill on and off per request, temperature 0, 24 tokens. Every TP 2 answer must equal
TP 1's: text, finish reason, token counts and kept counts at every drop layer; some must have
dropped tokens. Then SIGTERM to rank 0 (a clean stop): the job exits 0 within 60 s and no line
of either rank starts with `error:`. Then preemption: a TP 2 job with a 16 MiB KV pool gets 8
dense requests at once (~96-token prompts, 48 tokens each: they outgrow the pool, so rank 0
preempts and recomputes some, and the followers must free and rebuild the same caches): every
request succeeds with 48 tokens, /metrics counts preemptions, and at least 6 of the 8 texts equal
TP 1's without preemption (a recompute sums in another order, so a near tie may part; a follower
whose cache went stale would part everywhere).

fault: a TP 2 job with --tensor-parallel-timeout 5, twice. kill: rank 1 gets SIGKILL while a
request is in flight (mpirun then stops rank 0). hang: rank 1 gets SIGSTOP while a request is in
flight (rank 0's collective times out). Each: the request ends with an error within 60 s, never a
hang (hang: HTTP 500 whose message names the timeout; kill: an error status or the connection
closed), the job exits non-zero within 60 s, and rank 0 prints exactly one line starting `error:`.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import server_harness  # noqa: E402
from server_harness import Server  # noqa: E402

def flags(kv_cache_memory: str = "512MiB") -> list:
    """What every server here runs with (TP 1 and TP 2 alike)."""
    return ["-t", "1", "-q", "--keep-ratio", "0.5", "--max-batched-tokens", "256",
            "--served-model-name", "m", "--kv-cache-memory", kv_cache_memory]


def rank_pids(mpirun_pid: int) -> dict:
    """{rank: pid} of mpirun's children (Open MPI 4 forks local ranks itself)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != mpirun_pid:
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            rank = env.get(b"OMPI_COMM_WORLD_RANK")
            if rank is not None:
                found[int(rank)] = int(entry)
        except (OSError, ValueError, IndexError):
            continue
    return found


class MpiServer(Server):
    """`mpirun -np N uniprefill serve ... --tensor-parallel N`; stopped through rank 0."""

    def __init__(self, mpirun: str, ranks: int, **kw):
        super().__init__(**kw)
        self.mpirun = mpirun
        self.ranks = ranks
        self.pids = {}

    def command(self) -> list:
        return ([self.mpirun, "--allow-run-as-root", "--oversubscribe", "--tag-output", "-np",
                 str(self.ranks)] + super().command() + ["--tensor-parallel", str(self.ranks)])

    def start(self) -> "MpiServer":
        super().start()
        deadline = time.monotonic() + 10
        while len(self.pids) < self.ranks and time.monotonic() < deadline:
            self.pids = rank_pids(self.proc.pid)
            time.sleep(0.1)
        assert len(self.pids) == self.ranks, f"ranks found: {self.pids}"
        return self

    def wait_exit(self, timeout_s: float):
        """The job's exit code, or None when it is still running after timeout_s."""
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def kill_all(self):
        for pid in self.pids.values():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self._kill()

    def rank_lines(self, rank: int, prefix: str) -> list:
        """Lines of `rank` (--tag-output: "[job,rank]<stream>:text") whose text starts so."""
        pattern = re.compile(r"^\[\d+,%d\]<std(?:out|err)>:(.*)$" % rank)
        out = []
        for line in self.log_text().splitlines():
            m = pattern.match(line)
            if m and m.group(1).startswith(prefix):
                out.append(m.group(1))
        return out


def long_prompt(words: int, offset: int) -> str:
    src = os.path.join(HERE, "..", "..", "docs", "design.md")
    text = open(src, encoding="utf-8").read().split()
    return " ".join(text[offset:offset + words]) + "\n\nSummarise the text above in one sentence:"


def requests():
    """(prompt, uniprefill) of the comparison: short ones and long ones, UniPrefill on and off."""
    short = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a land",
             "The three primary colours are"]
    out = [(p, True) for p in short]
    out += [(long_prompt(1100, 0), True), (long_prompt(900, 400), True),
            (long_prompt(1000, 200), False), (long_prompt(700, 900), True)]
    return out


def complete_all(base_url: str, reqs: list, parallel: int, max_tokens: int = 24) -> list:
    from openai import OpenAI
    client = OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=600)
    results = [None] * len(reqs)
    errors = []

    def one(i):
        prompt, up = reqs[i]
        try:
            r = client.completions.create(model="m", prompt=prompt, max_tokens=max_tokens,
                                          temperature=0,
                                          extra_body={"uniprefill": up, "ignore_eos": True})
            d = r.model_dump()
            usage = d.get("usage") or {}
            results[i] = {"text": d["choices"][0]["text"],
                          "finish": d["choices"][0]["finish_reason"],
                          "tokens": (usage.get("prompt_tokens"), usage.get("completion_tokens")),
                          "kept": json.dumps(usage.get("uniprefill") or d.get("uniprefill"),
                                             sort_keys=True)}
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(f"request {i}: {e!r}")

    for start in range(0, len(reqs), parallel):
        threads = [threading.Thread(target=one, args=(i,))
                   for i in range(start, min(len(reqs), start + parallel))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    return results


def burst_requests():
    """8 dense requests of ~96 tokens (distinct slices of the design notes)."""
    return [(long_prompt(60, 1500 + 80 * i), False) for i in range(8)]


def run_preemption(a, reference: list) -> bool:
    """A TP 2 job whose KV pool is too small for the burst: every answer still comes back."""
    srv = MpiServer(a.mpirun, 2, extra_args=flags("16MiB"), name="tp2-preempt", cli=a.cli,
                    model=a.model)
    srv.start()
    try:
        t0 = time.time()
        got = complete_all(srv.openai_base_url, burst_requests(), 8, max_tokens=48)
        print(f"TP 2 burst: {len(got)} completions in {time.time() - t0:.1f} s", flush=True)
        preemptions = srv.metrics().get("uniprefill_preemptions_total", default=0)
        os.kill(srv.pids[0], signal.SIGTERM)
        code = srv.wait_exit(60)
    finally:
        srv.kill_all()
    same = sum(x["text"] == y["text"] for x, y in zip(reference, got))
    full = all(g["tokens"][1] == 48 for g in got)
    print(f"TP 2 burst: preemptions {preemptions:.0f}, {same}/8 texts equal TP 1's, all 48 "
          f"tokens: {full}, exit {code}")
    return preemptions > 0 and same >= 6 and full and code == 0


def run_equal(a) -> bool:
    reqs = requests()
    with Server(extra_args=flags(), name="tp1", cli=a.cli, model=a.model) as one:
        t0 = time.time()
        r1 = complete_all(one.openai_base_url, reqs, 4)
        print(f"TP 1: {len(r1)} completions in {time.time() - t0:.1f} s", flush=True)
        burst = complete_all(one.openai_base_url, burst_requests(), 4, max_tokens=48)
    srv = MpiServer(a.mpirun, 2, extra_args=flags(), name="tp2", cli=a.cli, model=a.model)
    srv.start()
    try:
        t0 = time.time()
        r2 = complete_all(srv.openai_base_url, reqs, 4)
        print(f"TP 2: {len(r2)} completions in {time.time() - t0:.1f} s", flush=True)
        os.kill(srv.pids[0], signal.SIGTERM)
        code = srv.wait_exit(60)
    finally:
        srv.kill_all()
    ok = True
    for i, (x, y) in enumerate(zip(r1, r2)):
        same = x == y
        ok &= same
        print(f"request {i} (uniprefill {reqs[i][1]}): {'same' if same else 'DIFFERENT'} "
              f"{x['tokens']} kept {x['kept'][:160]}")
        if not same:
            print(f"  TP 1: {x}\n  TP 2: {y}")
    dropped = any('"kept"' in x["kept"] and x["kept"] != json.dumps(None) and
                  any(k["kept"] < k["alive"] for k in json.loads(x["kept"]).get("kept", []))
                  for x in r1)
    errors = srv.rank_lines(0, "error:") + srv.rank_lines(1, "error:")
    print(f"TP 2 job exit code after SIGTERM to rank 0: {code}; error lines: {errors}")
    if not dropped:
        print("FAIL: no request dropped tokens (UniPrefill did not run)")
    if code != 0 or errors:
        print(srv.log_tail(30))
    ok = ok and dropped and code == 0 and not errors
    return run_preemption(a, burst) and ok


def request_in_flight(srv: MpiServer, result: dict):
    """A 1,000-token prompt asking for 400 tokens: running while the test breaks a rank."""
    t0 = time.time()
    try:
        status, body = srv.post_json("/v1/completions", {
            "model": "m", "prompt": long_prompt(1000, 0), "max_tokens": 400, "temperature": 0,
            "ignore_eos": True}, timeout=120)
        result.update(status=status, body=body)
    except Exception as e:  # noqa: BLE001 (a closed connection is an acceptable error)
        result.update(status=None, body=repr(e))
    result["seconds"] = time.time() - t0


def run_fault(a, how: str) -> bool:
    srv = MpiServer(a.mpirun, 2, extra_args=flags() + ["--tensor-parallel-timeout", "5"],
                    name=f"tp2-{how}", cli=a.cli, model=a.model)
    srv.start()
    result = {}
    client = threading.Thread(target=request_in_flight, args=(srv, result))
    try:
        client.start()
        time.sleep(3)  # the prefill runs, then decodes
        assert client.is_alive(), f"the request ended before the fault: {result}"
        t0 = time.time()
        os.kill(srv.pids[1], signal.SIGKILL if how == "kill" else signal.SIGSTOP)
        code = srv.wait_exit(60)
        took = time.time() - t0
        client.join(60)
        hung = client.is_alive()
    finally:
        srv.kill_all()
    errors = srv.rank_lines(0, "error:")
    print(f"{how}: job exit {code} {took:.1f} s after the fault; request: status "
          f"{result.get('status')} after {result.get('seconds', -1):.1f} s: "
          f"{str(result.get('body'))[:300]}")
    print(f"{how}: rank 0 error lines: {errors}")
    ok = code not in (None, 0) and not hung and len(errors) == 1 and result.get("status") != 200
    if how == "hang":
        ok &= result.get("status") == 500 and "did not join within 5.0 s" in str(result["body"])
    if not ok:
        print(srv.log_tail(40))
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--mode", required=True, choices=["equal", "fault"])
    ap.add_argument("--log-dir", default="")
    a = ap.parse_args()
    if a.log_dir:
        server_harness.CONFIG.log_dir = a.log_dir
    if a.mode == "equal":
        ok = run_equal(a)
    else:
        ok = run_fault(a, "kill")
        ok = run_fault(a, "hang") and ok
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
