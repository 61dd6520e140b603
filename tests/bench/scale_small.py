#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""tests/bench/scale_small.py RRPC_BENCH

rrpc-bench --tests scale at small N, on tcp (server in its own process) and
inproc: every field of the JSON present and sane, the table and the issue
#27 target lines printed; the checker itself refuses a result with a field
taken out; and a client whose ulimit -n is too small for the count asked
stops at a smaller one and says where and why instead of crashing.
"""
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time

FAILS = 0


def check(ok, what, detail=""):
    global FAILS
    print(("ok   - " if ok else "FAIL - ") + what + ("" if ok else f": {detail}"))
    FAILS += not ok


def num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


SIDE = ("rss_kib_per_conn", "vmpin_kib_per_conn", "fds_per_conn", "rss_kib", "vmpin_kib", "fds")


def side_problems(tr, n, who, sd, fds_min):
    if not isinstance(sd, dict):
        return [f"{tr} {n}: {who} figures missing"]
    p = [f"{tr} {n}: {who}.{k} missing or not a number" for k in SIDE if not num(sd.get(k))]
    if p:
        return p
    if not -1024 < sd["rss_kib_per_conn"] < 65536:
        p.append(f"{tr} {n}: {who} RSS per connection {sd['rss_kib_per_conn']} KiB is not sane")
    if sd["vmpin_kib_per_conn"] < 0:
        p.append(f"{tr} {n}: {who} VmPin per connection is negative")
    if not fds_min <= sd["fds_per_conn"] <= 16:
        p.append(f"{tr} {n}: {who} {sd['fds_per_conn']} fds per connection, not in "
                 f"[{fds_min}, 16]")
    return p


def problems(doc, steps, transports):
    """What is wrong with the scale rows of @doc (empty: nothing)."""
    out = []
    rows = [r for r in doc.get("results", []) if r.get("test") == "scale"]
    for tr in transports:
        prev = 0
        for n in steps:
            r = next((x for x in rows if x.get("transport") == tr and x.get("depth") == n), None)
            if r is None:
                out.append(f"{tr}: no scale row for {n} connections")
                continue
            if "error" in r or "skipped" in r:
                out.append(f"{tr} {n}: {r.get('error') or r.get('skipped')}")
                continue
            s = r.get("scale")
            if not isinstance(s, dict):
                out.append(f"{tr} {n}: no scale object")
                continue
            for k in ("connections", "asked", "connects", "connect_s", "connects_per_s",
                      "calls_per_s", "idle_ms"):
                if not num(s.get(k)):
                    out.append(f"{tr} {n}: scale.{k} missing or not a number")
            if out:
                continue
            if s["connections"] != n or s["asked"] != n or s["connects"] != n - prev:
                out.append(f"{tr} {n}: connections {s['connections']}, asked {s['asked']}, "
                           f"connects {s['connects']} (want {n}, {n}, {n - prev})")
            if not (s["connect_s"] > 0 and s["connects_per_s"] > 0 and s["calls_per_s"] > 0):
                out.append(f"{tr} {n}: a time or rate is not positive: {s}")
            if not num(r.get("ops_per_s")) or abs(r["ops_per_s"] - s["calls_per_s"]) > 0.01:
                out.append(f"{tr} {n}: ops_per_s {r.get('ops_per_s')} != calls_per_s")
            if "ulimit -n" not in str(s.get("limits", "")):
                out.append(f"{tr} {n}: the limits in force are not stated")
            if "stopped" in s:
                out.append(f"{tr} {n}: stopped: {s['stopped']}")
            one = tr == "inproc"
            if s.get("one_process") is not one:
                out.append(f"{tr} {n}: one_process is {s.get('one_process')}")
            out += side_problems(tr, n, "client", s.get("client"), 0 if one else 1)
            if one:
                if s.get("server", 0) is not None:
                    out.append(f"{tr} {n}: inproc has a separate server figure")
            else:
                out += side_problems(tr, n, "server", s.get("server"), 1)
                if s.get("server_conns_seen") != n:
                    out.append(f"{tr} {n}: the server saw {s.get('server_conns_seen')} new "
                               "connections")
            prev = n
    names = {t.get("name"): t for t in doc.get("targets", []) if t.get("issue") == 27}
    idle = names.get("tcp idle connection <= 4 KiB and <= 1.2 fds per side")
    if not idle or idle.get("evaluated") is not True or not isinstance(idle.get("met"), bool):
        out.append(f"the tcp idle target is not evaluated: {idle}")
    many = names.get("tcp 10,000 connections in one process between two addresses")
    if not many or many.get("evaluated") is not False:
        out.append(f"the 10,000 connections target is evaluated from {steps[-1]}: {many}")
    if not any("verbs" in k for k in names):
        out.append("no verbs target line")
    return out


def free_port_block(bench):
    """A running `rrpc-bench server` on a free block of ports (below the
    ephemeral range): (process, port)."""
    for attempt in range(20):
        port = 20000 + (os.getpid() * 7 + attempt * 1013) % 12000
        p = subprocess.Popen([bench, "server", "--port", str(port)], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        t0 = time.monotonic()
        out = ""
        while time.monotonic() - t0 < 10:
            line = p.stdout.readline()
            out += line
            if "running" in line:
                return p, port
            if not line and p.poll() is not None:
                break
        p.kill()
        p.wait()
    raise RuntimeError("rrpc-bench server did not start: " + out)


def main():
    bench = sys.argv[1]
    steps = [1, 10]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "scale.json")
        p = subprocess.run([bench, "local", "--tests", "scale", "--transport", "tcp,inproc",
                            "--scale-n", ",".join(map(str, steps)), "--duration", "0.2",
                            "--scale-idle-ms", "300", "--no-progress", "--json", out],
                           capture_output=True, text=True, timeout=300)
        check(p.returncode == 0, "rrpc-bench local --tests scale exits 0",
              f"rc {p.returncode}: {p.stderr[-1500:]}")
        try:
            with open(out) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            check(False, "it writes its JSON", str(e))
            return 1
        bad = problems(doc, steps, ("tcp", "inproc"))
        check(not bad, "every scale field is present and sane (tcp, inproc; 1 and 10)",
              "; ".join(bad))
        text = p.stdout
        check("Scale (" in text and "inproc " in text, "the table has the scale rows", text[-1500:])
        check(any(l.startswith("target tcp idle connection <= 4 KiB") and
                  (" met " in l or "NOT MET" in l) for l in text.splitlines()),
              "the table prints the tcp idle target as met or NOT MET", text[-1500:])

        # the checker fails when a field is missing
        for path in (("scale", "calls_per_s"), ("scale", "server"), ("scale", "client",
                                                                      "fds_per_conn")):
            broken = json.loads(json.dumps(doc))
            row = next(r for r in broken["results"]
                       if r["test"] == "scale" and r["transport"] == "tcp")
            d = row
            for k in path[:-1]:
                d = d[k]
            del d[path[-1]]
            check(problems(broken, steps, ("tcp", "inproc")) != [],
                  f"the checker refuses a result without {'.'.join(path)}")

        # a limit stops it: the client may hold 48 fds, 200 connections are asked
        srv, port = free_port_block(bench)
        try:
            out2 = os.path.join(tmp, "limited.json")

            def limit():
                resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48))

            p = subprocess.run([bench, "client", "--host", "127.0.0.1", "--port", str(port),
                                "--tests", "scale", "--transport", "tcp", "--scale-n", "1,200",
                                "--duration", "0.1", "--scale-idle-ms", "100", "--no-progress",
                                "--json", out2], capture_output=True, text=True, timeout=300,
                               preexec_fn=limit)
        finally:
            srv.send_signal(signal.SIGTERM)
            srv.wait(timeout=30)
        check(p.returncode in (0, 1), "a client out of fds exits normally",
              f"rc {p.returncode}: {p.stderr[-1500:]}")
        try:
            with open(out2) as f:
                doc2 = json.load(f)
        except (OSError, ValueError) as e:
            check(False, "and writes its JSON", f"{e}; {p.stderr[-1500:]}")
            return 1
        r = next((x for x in doc2["results"] if x["test"] == "scale" and x["depth"] == 200), {})
        s = r.get("scale", {})
        stop = s.get("stopped", "")
        check(0 < s.get("connections", 0) < 200 and "stopped at" in stop and
              "Too many open files" in stop and "ulimit -n 48" in stop,
              "it stops where the limit is and says why, with the limit", f"{r}")
        t = next((x for x in doc2["targets"] if x["name"].startswith("tcp idle")), {})
        check(t.get("evaluated") is True, "and still evaluates the idle target there", f"{t}")
    print("all checks passed" if not FAILS else f"{FAILS} check(s) failed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
