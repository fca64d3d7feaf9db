#!/usr/bin/env python3
"""Runs tests/mpi/mpi_collectives_test.cc under `mpirun -np 2` and checks what each mode must do.

    run_mpi_test.py --mpirun MPIRUN --binary BIN --mode collectives|timeout|fault

collectives, timeout: exit 0 and every rank's "OK" line. fault: rank 1 exits mid-step; the job must
end within 30 s (rank 0's timeout is 5 s), non-zero, with one "error:" line from rank 0 (its
timeout in the AllReduce, or mpirun stopping it after rank 1's exit), and no hang. Flags: --allow-run-as-root (CI runs as root), --oversubscribe
(2 ranks may exceed the cores mpirun counts).
"""
import argparse
import subprocess
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--mode", required=True, choices=["collectives", "timeout", "fault"])
    a = ap.parse_args()
    cmd = [a.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", a.binary]
    if a.mode != "collectives":
        cmd.append("--" + a.mode)
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        print(f"FAIL: {' '.join(cmd)} still running after 90 s (a hang)")
        return 1
    took = time.time() - t0
    out = p.stdout + p.stderr
    print(out)
    print(f"exit {p.returncode} after {took:.1f} s")
    if a.mode == "collectives":
        ok = p.returncode == 0 and out.count("collectives OK") == 2
    elif a.mode == "timeout":
        ok = p.returncode == 0 and out.count("timeout OK") == 2 and "did not join within 1.0 s" in out
    else:
        # Rank 0 either times out in the AllReduce (its own error line) or is stopped by mpirun
        # once rank 1's exit is seen (the communicator's SIGTERM line); either is one clean line.
        ok = (p.returncode != 0 and took < 30 and "FAIL" not in out and
              ("error: rank 0: AllReduce on rank 0 of 2" in out or
               "error: rank 0 of 2: stopped by mpirun because another rank ended" in out))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
