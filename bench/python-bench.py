#!/usr/bin/python3
"""bench/python-bench.py [BUILD_DIR] [--duration S] [--tensor-mib N] [--count K] [--rounds R]

The Python bindings beside the C library, in one run on one machine (only
ratios mean anything; see docs/performance.md):

  rtt      a 64 B "echo" round trip against one rrpc-bench server process:
           the C client (rrpc-bench client, driven and thread mode), the
           Python client in thread mode (Conn.call) and through asyncio
           (roce_rpc.aio, the loop drives the context), each with the
           client's CPU time per call.
  tensor   a float32 tensor of N MiB sent K times between two contexts of
           one process: the C reference (rrpc-tensor-bw, registered source
           and destination), then Python from a fresh numpy array each time
           (first send included: registration of the source) into the
           default receiver (fresh memory the first time, then the memory it
           kept: TensorServer keep_bytes) and into a receive pool.  The
           three take turns, --rounds times (each round new contexts, so
           each has its first send), so that the load of a shared machine
           falls on all of them alike; the figures cover every round.
           Where the kernel gives freed memory back to a hypervisor after
           a few seconds (virtio-balloon free page reporting), memory freed
           a moment ago is cheaper to fault in than memory long free: the
           default receiver's first send of the first round is the one
           that stands for a first receive in a long-running process.

Prints a table and the targets of issue #15 (Python RTT <= 2x C, asyncio
<= 2.5x, tensor >= 0.9x C, first send included) as met / NOT MET.  Uses the
package in BUILD_DIR/bindings/python (default build); run it with Debian's
/usr/bin/python3.
"""
import argparse
import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import time


def cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def free_port():
    for _ in range(50):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        p = s.getsockname()[1]
        s.close()
        if p < 32768 - 3:
            return p
    return 20000 + os.getpid() % 5000


def p50(v):
    v = sorted(v)
    return v[len(v) // 2] if v else float("nan")


def c_rtt(bench, port, mode, duration):
    out = subprocess.run([bench, "client", "--host", "127.0.0.1", "--port", str(port),
                          "--transport", "tcp", "--tests", "rtt", "--duration", str(duration),
                          "--client-mode", mode, "--no-progress", "--json", "-"],
                         check=True, capture_output=True, text=True).stdout
    r = [x for x in json.loads(out)["results"] if x["test"] == "rpc_rtt"][0]
    cdf = dict((int(p), v) for p, v in r["rtt_cdf_us"])
    return cdf[50], r["cpu_us_per_op"]["client"]


class Sampler:
    """Round trips for @duration s: add(t0, t1) says whether to go on;
    result() is (p50 µs, this process's CPU µs per call)."""

    def __init__(self, duration):
        self.lat = []
        self.c0, self.end = cpu_s(), time.perf_counter() + duration

    def add(self, t0, t1):
        self.lat.append(t1 - t0)
        return t1 < self.end

    def result(self):
        return p50(self.lat) * 1e6, (cpu_s() - self.c0) / len(self.lat) * 1e6


def py_rtt(roce_rpc, uri, duration, size=64):
    with roce_rpc.Context() as ctx:
        conn = ctx.connect(uri)
        data = b"x" * size
        for _ in range(200):
            conn.call("echo", data)
        s, more = Sampler(duration), True
        while more:
            t = time.perf_counter()
            conn.call("echo", data)
            more = s.add(t, time.perf_counter())
        return s.result()


def aio_rtt(uri, duration, size=64):
    import roce_rpc.aio as aio

    async def main():
        async with aio.Context() as ctx:
            conn = await ctx.connect(uri)
            data = b"x" * size
            for _ in range(200):
                await conn.call("echo", data)
            s, more = Sampler(duration), True
            while more:
                t = time.perf_counter()
                await conn.call("echo", data)
                more = s.add(t, time.perf_counter())
            return s.result()
    return asyncio.run(main())


def c_tensor(tool, nbytes, count):
    out = subprocess.run([tool, "tcp://127.0.0.1:0", str(nbytes), str(count)], check=True,
                         capture_output=True, text=True).stdout
    rates = [float(line.split("=")[1].split()[0]) for line in out.splitlines()
             if line.startswith("send ")]
    cpu = [float(x) for x in out.splitlines()[-1].split()[1:]]
    return rates, sum(cpu)


def py_tensor(roce_rpc, np, nbytes, count, pool):
    rates = []
    c0 = cpu_s()
    with roce_rpc.Context() as s, roce_rpc.Context() as c:
        lis = s.listen("tcp://127.0.0.1:0")
        rp = s.receive_pool(nbytes, count=2) if pool else None
        srv = s.serve_tensors(pool=rp, max_bytes=max(nbytes, 1 << 30))
        conn = c.connect(lis.uri)
        for k in range(count):
            a = np.ones(nbytes // 4, np.float32)  # a fresh array: registered by the send
            t = time.perf_counter()
            conn.send_tensor("t", a)
            name, got = srv.receive(timeout=120)
            dt = time.perf_counter() - t
            assert got.nbytes == nbytes
            del got
            rates.append(nbytes / dt / (1 << 20))
        reused = rp.hits if rp is not None else srv.reused
        srv.close()
        if rp is not None:
            rp.close()
    return rates, cpu_s() - c0, reused


def verdict(ok):
    return "met" if ok else "NOT MET"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--tensor-mib", type=int, default=256)
    ap.add_argument("--count", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3,
                    help="tensor rounds: C, default receiver and pool in turn (default 3)")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    sys.path.insert(0, os.path.join(build, "bindings", "python"))
    import numpy as np
    import roce_rpc
    bench = os.path.join(build, "bench", "rrpc-bench")
    tool = os.path.join(build, "bench", "rrpc-tensor-bw")

    port = free_port()
    server = subprocess.Popen([bench, "server", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    uri = "tcp://127.0.0.1:%d" % port
    try:
        for _ in range(500):
            try:
                socket.create_connection(("127.0.0.1", port), 0.1).close()
                break
            except OSError:
                time.sleep(0.01)
        rows = []
        c_drv = c_rtt(bench, port, "driven", a.duration)
        c_thr = c_rtt(bench, port, "thread", a.duration)
        p_thr = py_rtt(roce_rpc, uri, a.duration)
        p_aio = aio_rtt(uri, a.duration)
        rows += [("C client, driven", *c_drv), ("C client, thread", *c_thr),
                 ("Python Conn.call (thread)", *p_thr), ("Python roce_rpc.aio", *p_aio)]
    finally:
        server.terminate()
        server.wait(10)
    nbytes = a.tensor_mib << 20
    # [rates of every round], CPU s, sends into registered memory
    tc, tp, tpp = [[], 0.0, 0], [[], 0.0, 0], [[], 0.0, 0]
    for _ in range(max(a.rounds, 1)):
        r, cpu = c_tensor(tool, nbytes, a.count)
        tc[0].append(r)
        tc[1] += cpu
        tc[2] += a.count
        for acc, pool in ((tp, False), (tpp, True)):
            r, cpu, n = py_tensor(roce_rpc, np, nbytes, a.count, pool=pool)
            acc[0].append(r)
            acc[1] += cpu
            acc[2] += n

    print("rtt, 64 B echo against one rrpc-bench server process (tcp loopback)")
    print("| client | p50 µs | client CPU µs/call |")
    print("| --- | ---: | ---: |")
    for name, lat, cpu in rows:
        print("| %s | %.1f | %.1f |" % (name, lat, cpu))
    print()
    rounds = len(tc[0])
    print("tensor, %d MiB float32, %d sends a round, %d rounds (MiB/s; first: the first send of "
          "each round, later: the mean of the others)" % (a.tensor_mib, a.count, rounds))
    print("| sender -> receiver | first | later (mean) | process CPU s | into registered memory |")
    print("| --- | ---: | ---: | ---: | ---: |")
    kinds = (("C, registered -> registered", tc),
             ("Python, fresh array -> default receiver", tp),
             ("Python, fresh array -> receive pool", tpp))
    for name, (rs, cpu, n) in kinds:
        later = [x for r in rs for x in r[1:]]
        print("| %s | %s | %.0f | %.2f | %d of %d |" % (
            name, " ".join("%.0f" % r[0] for r in rs), sum(later) / max(len(later), 1), cpu, n,
            a.count * rounds))
    print()
    print("per round, mean of its sends, ratio to C's in that round (first sends included):")
    for k in range(rounds):
        cm = sum(tc[0][k]) / len(tc[0][k])
        print("- round %d: C %.0f, default receiver %.2fx, receive pool %.2fx" % (
            k + 1, cm, sum(tp[0][k]) / len(tp[0][k]) / cm, sum(tpp[0][k]) / len(tpp[0][k]) / cm))
    print()
    ct, pt, pp = ([x for r in acc[0] for x in r] for acc in (tc, tp, tpp))
    best_c = min(c_drv[0], c_thr[0])
    r_sync, r_aio = p_thr[0] / best_c, p_aio[0] / best_c
    c_all = sum(ct) / len(ct)
    r_t, r_tp = (sum(pt) / len(pt)) / c_all, (sum(pp) / len(pp)) / c_all
    print("targets (issue #15; ratios to the best C client / the C tensor mean over every "
          "send of every round, first sends included)")
    print("- Python call p50 <= 2x C: %.2fx, %s" % (r_sync, verdict(r_sync <= 2)))
    print("- asyncio call p50 <= 2.5x C: %.2fx, %s" % (r_aio, verdict(r_aio <= 2.5)))
    print("- tensor >= 0.9x C, default receiver: %.2fx, %s" % (r_t, verdict(r_t >= 0.9)))
    print("- tensor >= 0.9x C, receive pool: %.2fx, %s" % (r_tp, verdict(r_tp >= 0.9)))


if __name__ == "__main__":
    main()
