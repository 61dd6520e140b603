#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""tests/bench/peer_wait.py RRPC_BENCH

rrpc-bench starts a peer's client only once the peer's server listens, and
says why a peer gave no figure.  sockperf is replaced by
tests/bench/fake-sockperf (the only tool on PATH), whose server
  exit    exits 1 with a bind error, never listening:
          the row names the exit status and the server's own message;
  silent  never listens: the row says so and names --peer-wait;
  late    listens after 4 s (its client fails when refused):
          the row holds the fake's figures (p50 2 x 12.5 us, a round trip).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def run(bench, tmp, mode, wait):
    out = os.path.join(tmp, f"{mode}.json")
    env = {"PATH": tmp, "FAKE_PEER_MODE": mode, "HOME": tmp}
    t0 = time.monotonic()
    p = subprocess.run([bench, "local", "--transport", "raw-tcp", "--tests", "rtt", "--quick",
                        "--no-progress", "--peer-wait", str(wait), "--json", out],
                       env=env, capture_output=True, text=True, timeout=120)
    secs = time.monotonic() - t0
    with open(out) as f:
        rows = json.load(f)["results"]
    row = next((r for r in rows if r["transport"] == "sockperf"), None)
    return p, row, secs


def main():
    bench = sys.argv[1]
    fails = 0

    def check(ok, what, detail=""):
        nonlocal fails
        print(("ok   - " if ok else "FAIL - ") + what + ("" if ok else f": {detail}"))
        fails += not ok

    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(os.path.join(HERE, "fake-sockperf"), os.path.join(tmp, "sockperf"))
        os.chmod(os.path.join(tmp, "sockperf"), 0o755)

        p, row, _ = run(bench, tmp, "exit", 5)
        err = (row or {}).get("error", "")
        check(row is not None and "exit 1" in err and "Address already in use" in err
              and "without listening on port" in err,
              "a peer server that exits is reported with its status and its message",
              f"row {row}; stderr {p.stderr[-800:]}")
        check("failed (exit 0)" not in p.stderr, "no 'failed (exit 0)' for a failed peer",
              p.stderr[-800:])

        p, row, secs = run(bench, tmp, "silent", 1.5)
        err = (row or {}).get("error", "")
        check(row is not None and "did not listen on port" in err and "--peer-wait" in err,
              "a peer server that never listens is reported as such", f"row {row}")
        check(secs < 30, "and the bench gives up on it after --peer-wait", f"{secs:.1f} s")

        p, row, _ = run(bench, tmp, "late", 15)
        rtt = (row or {}).get("rtt_us", {})
        check(row is not None and "error" not in row and rtt.get("p50") == 25.0,
              "the client of a server that listens late starts once it listens",
              f"row {row}; stderr {p.stderr[-800:]}")
    print("all checks passed" if not fails else f"{fails} check(s) failed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
