#!/usr/bin/python3
"""tests/metrics/dashboard_live.py DASHBOARD_JSON

Every query of the Grafana dashboard, asked of a real Prometheus (Debian's
prometheus package) that scraped, once a second, a server and a client
doing RPC traffic and a real rrpcd over TLS, each serving GET /metrics
(issue #32 point 2: the dashboard showed no traffic for a server).

  - Every panel query, with $job and $rrpcd_job replaced by .*, must return
    data through /api/v1/query, except the few listed in EXCUSED (a series
    this setup cannot make, with the reason); those must return nothing, so
    the list stays true.
  - The server's own series (requests, connections, keepalive losses, per
    peer connections and requests) must each be read by a panel, and the
    requests panel must show the server's traffic (> 0) when $job selects
    the server's job only.

The test causes what it can: calls in two classes, one call to a missing
method (an error series), one-sided READs, a connection opened and closed,
broker registrations and lookups (one not found), a TLS handshake failure.
Environment: PYTHONPATH (the build's bindings/python), RRPCD, MAKE_CERTS.
Exit 77 only when prometheus is not installed."""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

PROMETHEUS = "/usr/bin/prometheus"
TRAFFIC_S = 16
JOBS = ("roce-rpc-server", "roce-rpc-client", "rrpcd")

# Queries this setup cannot give data to, by a substring of the query: why.
EXCUSED = {
    "rrpcd_etcd_degraded": "rrpcd runs without etcd here (its registry in memory); "
                           "the etcd series exist only with `etcd =` set "
                           "(tested in test_metrics_http.py with a real etcd-server)",
    "rrpcd_etcd_errors_total": "the same: no etcd, no etcd error series",
    "rrpc_nic_": "no RDMA device on this host: a context carries its ports' counters only "
                 "once it uses rdma:// (checked in the Soft-RoCE VM's DSCP step)",
}

# The server-side series of a context: each must be read by some panel.
SERVER_SERIES = ("rrpc_requests_total", "rrpc_peer_requests_total",
                 "rrpc_connections_up_total", "rrpc_connections_down_total",
                 "rrpc_keepalive_losses_total", "rrpc_peer_connections")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(url, timeout=30):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read().decode())


def wait_for(what, fn, bound=60):
    end = time.monotonic() + bound
    while True:
        try:
            v = fn()
            if v:
                return v
        except (OSError, ValueError):
            pass
        if time.monotonic() > end:
            raise SystemExit("FAIL: %s did not happen within %d s" % (what, bound))
        time.sleep(0.2)


def start_rrpcd(d, procs):
    subprocess.run([os.environ["MAKE_CERTS"], d, "kv-server", "kv-client"],
                   check=True, stdout=subprocess.DEVNULL)
    conf = os.path.join(d, "rrpcd.conf")
    with open(conf, "w") as f:
        f.write("listen = 127.0.0.1:0\ncert = {d}/rrpcd.crt\nkey = {d}/rrpcd.key\n"
                "ca = {d}/ca.crt\nport_file = {d}/port\nlease_ms = 5000\n"
                "metrics_listen = 127.0.0.1:0\nmetrics_port_file = {d}/mport\n"
                "allow = register * kv-server\nallow = lookup * kv-client\n".format(d=d))
    log = open(os.path.join(d, "rrpcd.log"), "w")
    p = subprocess.Popen([os.environ["RRPCD"], "-c", conf], stdout=log, stderr=log)
    procs.append(p)

    def ports():
        if p.poll() is not None:
            raise SystemExit("FAIL: rrpcd exited: " + open(os.path.join(d, "rrpcd.log")).read())
        return [int(open(os.path.join(d, n)).read()) for n in ("port", "mport")]
    port, mport = wait_for("rrpcd writing its ports", ports)
    return port, mport


def start_prometheus(d, targets, procs):
    """Prometheus scraping {job: port} every second; returns its base URL."""
    cfg = os.path.join(d, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                "scrape_configs:\n")
        for job, port in targets.items():
            f.write("  - job_name: %s\n    static_configs:\n"
                    "      - targets: ['127.0.0.1:%d']\n" % (json.dumps(job), port))
    port = free_port()
    log = open(os.path.join(d, "prometheus.log"), "w")
    p = subprocess.Popen([PROMETHEUS, "--config.file=" + cfg,
                          "--storage.tsdb.path=" + os.path.join(d, "tsdb"),
                          "--web.listen-address=127.0.0.1:%d" % port],
                         stdout=log, stderr=log)
    procs.append(p)
    base = "http://127.0.0.1:%d" % port

    def ready():
        if p.poll() is not None:
            raise SystemExit("FAIL: prometheus exited: " +
                             open(os.path.join(d, "prometheus.log")).read()[-3000:])
        with urllib.request.urlopen(base + "/-/ready", timeout=5) as r:
            return r.status == 200
    wait_for("prometheus ready", ready)
    return base


def query(base, expr):
    """The result list of an instant query; a refused query fails the test."""
    url = base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        r = http_json(url)
    except urllib.error.HTTPError as e:
        raise SystemExit("FAIL: prometheus refused %r: %s" % (expr, e.read().decode()))
    assert r["status"] == "success", r
    return r["data"]["result"]


def main():
    if not os.path.exists(PROMETHEUS):
        print("dashboard_live: SKIPPED: install prometheus (Debian package) to run "
              "the dashboard's queries against a real Prometheus", file=sys.stderr)
        return 77
    dash_path = sys.argv[1]
    dash = json.load(open(dash_path))
    targets = [(p["id"], p["title"], t["refId"], t["expr"])
               for p in dash["panels"] for t in p.get("targets", [])]
    assert targets, "no queries in " + dash_path
    exprs = " ".join(t[3] for t in targets)
    # Fail early, before the servers start, when a server-side series is unread.
    unread = [m for m in SERVER_SERIES if m not in exprs]

    import roce_rpc
    from roce_rpc import RrpcError
    import roce_rpc.broker

    d = tempfile.mkdtemp(prefix="rrpc-dashboard-")
    procs = []
    ctxs, brokers = [], []  # closed in this order: a broker after the contexts it gates
    try:
        rport, rmport = start_rrpcd(d, procs)
        s = roce_rpc.Context(config={"metrics_listen": "127.0.0.1:0"})
        c = roce_rpc.Context(config={"metrics_listen": "127.0.0.1:0"})
        ctxs += [c, s]
        s.add_handler("echo", lambda data: data)
        region = s.register(bytearray(4096))

        @s.handler("token", request=True)
        def token(req, data):
            return region.token(req.conn).to_bytes()

        def brk(who):
            return roce_rpc.broker.Broker("127.0.0.1:%d" % rport,
                                          ca_file=os.path.join(d, "ca.crt"),
                                          cert_file=os.path.join(d, who + ".crt"),
                                          key_file=os.path.join(d, who + ".key"))
        srv, cli = brk("kv-server"), brk("kv-client")
        brokers += [cli, srv]
        srv.gate(s, "echo-service")  # connections need a ticket of rrpcd
        lis = s.listen("tcp://127.0.0.1:0")
        base = start_prometheus(d, {JOBS[0]: s.metrics_port, JOBS[1]: c.metrics_port,
                                    JOBS[2]: rmport}, procs)

        srv.register(s, "echo-service", [lis.uri], classes=["low_latency", "bulk"])
        conn = cli.connect(c, "echo-service")
        tok = roce_rpc.Token.from_bytes(conn.call("token"))
        local = c.register(bytearray(4096))
        end = time.monotonic() + TRAFFIC_S
        n = 0
        while time.monotonic() < end:
            assert conn.call("echo", b"x" * 16, qos="low_latency") == b"x" * 16
            if n % 5 == 0:
                assert conn.call("echo", b"y" * 4000, qos="bulk") == b"y" * 4000
            if n % 50 == 0:
                # A call to a missing method: the error series move.
                try:
                    conn.call("no-such-method", b"")
                except RrpcError:
                    pass
                else:
                    raise SystemExit("FAIL: a call to a missing method succeeded")
                conn.read(local, 0, tok, 0, 4096, qos="bulk")
                cli.lookup("echo-service")
                try:
                    cli.lookup("no-such-service")
                except RrpcError:
                    pass
                else:
                    raise SystemExit("FAIL: a lookup of a missing service succeeded")
                # Not TLS: a handshake failure at rrpcd.
                with socket.create_connection(("127.0.0.1", rport), timeout=30) as sk:
                    sk.sendall(b"GET / HTTP/1.0\r\n\r\n")
                    while sk.recv(4096):
                        pass
                extra = cli.connect(c, "echo-service")  # a connection up and down
                extra.call("echo", b"z")
                extra.close()
            n += 1
            time.sleep(0.01)
        # The last scrapes in: every target up, and the calls counted.
        wait_for("prometheus seeing every target up",
                 lambda: len([r for r in query(base, "up == 1")]) == len(JOBS), 30)

        got, empty, excused = [], [], []
        for pid, title, ref, expr in targets:
            e = expr.replace("$rrpcd_job", ".*").replace("$job", ".*")
            res = query(base, e)
            why = next((w for k, w in EXCUSED.items() if k in e), None)
            if why:
                excused.append((pid, ref, title, why))
                if res:
                    raise SystemExit("FAIL: panel %d %s (%s) is excused but returned data: "
                                     "take it off EXCUSED\n  %s" % (pid, ref, title, e))
                continue
            (got if res else empty).append((pid, ref, title, e, len(res)))
        for pid, ref, title, e, k in got:
            print("data  panel %2d %s: %s (%d series)" % (pid, ref, title, k))
        for pid, ref, title, why in excused:
            print("excused panel %2d %s: %s: %s" % (pid, ref, title, why))
        bad = []
        for pid, ref, title, e, _ in empty:
            bad.append("panel %d %s (%s) returned no data:\n  %s" % (pid, ref, title, e))
        if unread:
            bad.append("no panel reads the server-side series " + ", ".join(unread))
        # The server alone: its requests panel shows its traffic.
        req_panels = [t for t in targets if "rrpc_requests_total" in t[3]]
        if not req_panels:
            bad.append("no panel reads rrpc_requests_total: a server's traffic is not shown")
        for pid, title, ref, expr in req_panels:
            res = query(base, expr.replace("$job", JOBS[0]))
            if not any(float(r["value"][1]) > 0 for r in res):
                bad.append("panel %d %s (%s) shows no traffic for the server's job alone: %r"
                           % (pid, ref, title, res))
        # The variables' lists offer each job (else its panels stay empty in Grafana).
        want = {"job": JOBS[:2], "rrpcd_job": JOBS[2:]}
        for v in dash["templating"]["list"]:
            m = re.fullmatch(r"label_values\((\w+), *job\)", v["query"])
            if not m or v["name"] not in want:
                bad.append("variable %s: unexpected query %r" % (v["name"], v["query"]))
                continue
            jobs = {r["metric"].get("job") for r in query(base, "count by (job) (%s)" % m.group(1))}
            missing = [j for j in want[v["name"]] if j not in jobs]
            if missing:
                bad.append("variable $%s (%s) does not offer the job(s) %s"
                           % (v["name"], v["query"], ", ".join(missing)))
        print("%d panel queries returned data, %d excused, %d failed"
              % (len(got), len(excused), len(bad)))
        if bad:
            print("FAIL:\n" + "\n".join(bad))
            return 1
        return 0
    finally:
        try:
            for x in ctxs + brokers:
                x.close()
        finally:
            stop(procs, d)


def stop(procs, d):
    """Stops the processes the test started and removes its directory."""
    try:
        for p in procs:
            p.terminate()
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
