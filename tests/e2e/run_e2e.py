#!/usr/bin/env python3
"""Runs the end-to-end tests of `uniprefill serve` (tests/e2e/test_*.py) with the stdlib unittest.

    python tests/e2e/run_e2e.py --cli build/uniprefill --model models/gemma-3-270m-q4_k_m.gguf \
        [--only openai_client,curl] [--quick | --full] [--log-dir DIR] [--threads N] [-k SUBSTR] [-v]

Prints one line per test (PASS / FAIL / ERROR / SKIP with its wall time), a summary per module,
and exits 1 when any test failed (2 for bad arguments). Server logs go to --log-dir (default a
fresh temp dir, printed); they are kept so a failure can be read afterwards.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

MODULES = ["openai_client", "curl", "errors", "concurrency", "mixed", "soak", "hostile"]


class LineResult(unittest.TestResult):
    """Prints one line per finished test."""

    def __init__(self, module: str):
        super().__init__()
        self.module = module
        self.lines = []
        self._t0 = {}
        self.passed = 0

    def _name(self, test) -> str:
        tid = test.id()
        parts = tid.split(".")
        return f"{self.module}." + ".".join(parts[-2:]) if len(parts) >= 2 else tid

    def startTest(self, test):
        super().startTest(test)
        self._t0[test.id()] = time.monotonic()

    def _line(self, test, verdict: str, detail: str = ""):
        dt = time.monotonic() - self._t0.get(test.id(), time.monotonic())
        line = f"{verdict:5} {self._name(test)} ({dt:.1f} s)"
        if detail:
            line += f": {detail}"
        print(line, flush=True)

    def addSuccess(self, test):
        super().addSuccess(test)
        self.passed += 1
        self._line(test, "PASS")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._line(test, "FAIL")
        print(self._exc_info_to_string(err, test), flush=True)

    def addError(self, test, err):
        super().addError(test, err)
        # setUpClass / tearDownClass errors come with a _ErrorHolder "test".
        self._line(test, "ERROR")
        print(self._exc_info_to_string(err, test), flush=True)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._line(test, "SKIP", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._line(test, "XFAIL")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._line(test, "XPASS")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", default=os.path.join(HERE, "..", "..", "build", "uniprefill"),
                    help="the uniprefill binary")
    ap.add_argument("--model", default=os.path.join(HERE, "..", "..", "models",
                                                    "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--only", action="append", default=[],
                    help=f"module(s) to run, comma-separated or repeated: {', '.join(MODULES)}")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="small workloads for local iteration (concurrency: 8 requests of "
                           "100..2000 tokens; burst: 8 requests; soak: 300 requests)")
    size.add_argument("--full", action="store_true",
                      help="the issue's full workloads (concurrency: 32 requests log-uniform over "
                           "100..8000 tokens; burst: 24 x 1500 tokens; soak: 2000 requests)")
    ap.add_argument("--log-dir", default="", help="where server logs go (default: a temp dir)")
    ap.add_argument("--threads", type=int, default=0, help="--threads of every server started")
    ap.add_argument("-k", dest="patterns", action="append", default=[],
                    help="only tests whose id contains this substring (repeatable: any of them)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)

    only = [m.strip() for spec in args.only for m in spec.split(",") if m.strip()]
    unknown = [m for m in only if m not in MODULES]
    if unknown:
        print(f"error: unknown module(s) {unknown}; have {MODULES}", file=sys.stderr)
        return 2
    cli = os.path.abspath(args.cli)
    model = os.path.abspath(args.model)
    if not os.access(cli, os.X_OK):
        print(f"error: --cli {cli} is not an executable", file=sys.stderr)
        return 2
    if not os.path.isfile(model):
        print(f"error: --model {model} does not exist", file=sys.stderr)
        return 2

    import server_harness
    cfg = server_harness.CONFIG
    cfg.cli, cfg.model, cfg.threads = cli, model, args.threads
    cfg.size = "quick" if args.quick else "full" if args.full else "default"
    cfg.verbose = args.verbose
    cfg.log_dir = os.path.abspath(args.log_dir) if args.log_dir else ""
    log_dir = cfg.ensure_log_dir()
    print(f"e2e: cli {cli}\ne2e: model {model}\ne2e: server logs in {log_dir}"
          f"\ne2e: workload size {cfg.size}", flush=True)

    summary = []
    ok = True
    for name in only or MODULES:
        t0 = time.monotonic()
        try:
            module = importlib.import_module(f"test_{name}")
        except Exception:  # noqa: BLE001 - an import failure is a failed module
            print(f"ERROR {name}: import failed\n{traceback.format_exc()}", flush=True)
            summary.append((name, "ERROR", 0, 1, 0.0, 0.0, 0.0))
            ok = False
            continue
        suite = unittest.defaultTestLoader.loadTestsFromModule(module)
        if args.patterns:
            suite = unittest.TestSuite(t for t in _flatten(suite)
                                       if any(p in t.id() for p in args.patterns))
            if suite.countTestCases() == 0:
                continue
        result = LineResult(name)
        cpu0 = len(server_harness.SERVER_CPU_S)
        self_cpu0 = _self_cpu()
        suite.run(result)
        dt = time.monotonic() - t0
        server_cpu = sum(c for _, c in server_harness.SERVER_CPU_S[cpu0:])
        client_cpu = _self_cpu() - self_cpu0
        bad = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
        verdict = "PASS" if bad == 0 and result.testsRun > 0 else "FAIL"
        if result.testsRun == 0:
            print(f"FAIL  {name}: no tests ran", flush=True)
        ok &= verdict == "PASS"
        summary.append((name, verdict, result.passed, bad, dt, server_cpu, client_cpu))
        print(f"== {name}: {verdict}, {result.passed} passed, {bad} failed, "
              f"{len(result.skipped)} skipped, {dt:.1f} s (CPU: servers {server_cpu:.0f} s, "
              f"clients {client_cpu:.0f} s)", flush=True)

    print("\ne2e summary:")
    for name, verdict, passed, bad, dt, server_cpu, client_cpu in summary:
        print(f"  {name:14} {verdict:5} {passed:3} passed {bad:3} failed  {dt:7.1f} s wall  "
              f"CPU {server_cpu:6.0f} s server {client_cpu:5.0f} s client")
    print(f"  total {sum(s[4] for s in summary):.1f} s; server logs in {log_dir}", flush=True)
    return 0 if ok else 1


def _self_cpu() -> float:
    """CPU seconds of this process, user + system (not its children: the servers are counted
    apart, curl is negligible)."""
    t = os.times()
    return t.user + t.system


def _flatten(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from _flatten(t)
        else:
            yield t


if __name__ == "__main__":
    sys.exit(main())
