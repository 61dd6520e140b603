"""GET /metrics over real HTTP, read by real consumers (issue #17): a context
with metrics_listen while calls run in two classes, and rrpcd after
registrations, lookups and refusals; each scrape parsed with
python3-prometheus-client and checked with `promtool check metrics`; and
what a hostile client can do to the endpoint (other methods, other paths,
idle connections past the limit).  Run by run-metrics-http.sh (meson test
metrics_http_*), which skips when a tool is missing.  No timed assertions:
counts are compared, waits are generous bounds."""
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

import roce_rpc
from roce_rpc import RrpcError

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def scrape(port, path="/metrics", method="GET", timeout=60):
    """(status, headers, body) of one HTTP request to 127.0.0.1:@port."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method=method,
                                 data=b"x=1" if method in ("POST", "PUT") else None)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def samples(text):
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def val(d, name, **labels):
    return d[(name, tuple(sorted(labels.items())))]


def promtool_accepts(text):
    """promtool check metrics on @text; the test run installs prometheus."""
    promtool = shutil.which("promtool")
    if not promtool:
        print("promtool: not installed (prometheus package), not checked")
        return
    p = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert p.returncode == 0, "promtool check metrics refused it:\n" + p.stdout.decode()


def get_metrics(port):
    status, headers, body = scrape(port)
    assert status == 200, body
    assert headers["Content-Type"] == CONTENT_TYPE
    return body


# ---- a context ------------------------------------------------------------------


def test_a_context_serves_its_counters_over_http_as_two_classes_move():
    with roce_rpc.Context(config={"metrics_listen": "127.0.0.1:0"}) as s, \
            roce_rpc.Context(config={"metrics_listen": "127.0.0.1:0"}) as c:
        assert s.metrics_port and c.metrics_port and s.metrics_port != c.metrics_port
        s.add_handler("echo", lambda data: data)
        lis = s.listen("tcp://127.0.0.1:0")
        conn = c.connect(lis.uri)
        before_c, before_s = samples(get_metrics(c.metrics_port)), samples(
            get_metrics(s.metrics_port))
        for _ in range(7):
            assert conn.call("echo", b"x" * 10, qos="low_latency") == b"x" * 10
        for _ in range(3):
            assert conn.call("echo", b"y" * 1000, qos="bulk") == b"y" * 1000
        text_c, text_s = get_metrics(c.metrics_port), get_metrics(s.metrics_port)
        promtool_accepts(text_c)
        promtool_accepts(text_s)
        after_c, after_s = samples(text_c), samples(text_s)

        def moved(before, after, name, **labels):
            return val(after, name, **labels) - val(before, name, **labels)
        ll, bulk = {"class": "low_latency"}, {"class": "bulk"}
        assert moved(before_c, after_c, "rrpc_calls_total", **ll) == 7
        assert moved(before_c, after_c, "rrpc_calls_total", **bulk) == 3
        assert moved(before_c, after_c, "rrpc_calls_ok_total", **bulk) == 3
        assert moved(before_c, after_c, "rrpc_call_sent_bytes_total", **bulk) == 3000
        assert moved(before_c, after_c, "rrpc_calls_total", **{"class": "background"}) == 0
        assert moved(before_s, after_s, "rrpc_requests_total", **ll) == 7
        assert moved(before_s, after_s, "rrpc_requests_total", **bulk) == 3
        assert moved(before_c, after_c, "rrpc_call_duration_seconds_count", **ll) == 7
        # The same text the API gives (the counters do not move between the reads).
        assert get_metrics(c.metrics_port) == c.metrics_text()
        conn.close()


def test_a_context_without_metrics_listen_serves_nothing():
    with roce_rpc.Context() as c:
        assert c.metrics_port is None


def test_a_bad_metrics_listen_is_refused_with_how_to_fix_it():
    for bad, words in ((":9464", "host is missing"), ("127.0.0.1:65536", "0..65535"),
                       ("127.0.0.1", "HOST:PORT"), ("::1:9464", "brackets")):
        with pytest.raises(RrpcError) as ei:
            roce_rpc.Context(config={"metrics_listen": bad})
        assert words in str(ei.value), str(ei.value)


def test_an_address_in_use_fails_context_creation_naming_the_address():
    with roce_rpc.Context(config={"metrics_listen": "127.0.0.1:0"}) as c:
        addr = "127.0.0.1:%d" % c.metrics_port
        with pytest.raises(RrpcError) as ei:
            roce_rpc.Context(config={"metrics_listen": addr})
        assert ei.value.code == -98  # -EADDRINUSE
        assert addr in str(ei.value) and "address in use" in str(ei.value)
        assert get_metrics(c.metrics_port)  # the first one still serves


def test_the_endpoint_answers_get_only_at_metrics():
    with roce_rpc.Context(config={"metrics_listen": "127.0.0.1:0"}) as c:
        p = c.metrics_port
        for method in ("POST", "PUT", "DELETE"):
            status, headers, _ = scrape(p, method=method)
            assert status == 405 and headers["Allow"] == "GET, HEAD", (method, status)
        for path in ("/", "/metric", "/metrics/x", "/../metrics", "/favicon.ico"):
            status, _, _ = scrape(p, path=path)
            assert status == 404, (path, status)
        status, _, body = scrape(p, method="HEAD")
        assert status == 200 and body == ""
        # A request head larger than a connection's buffers is refused, not held.
        with socket.create_connection(("127.0.0.1", p), timeout=60) as sk:
            sk.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100000 +
                       b"\r\n\r\n")
            head = sk.recv(100)
        assert head.startswith(b"HTTP/1.1 431"), head  # Request Header Fields Too Large
        assert get_metrics(p)


def test_idle_connections_past_the_limit_do_not_stop_a_scrape():
    """The limit (4 here) bounds what idle clients hold and the timeout (1 s)
    frees their places: a real scrape gets its answer anyway."""
    cfg = {"metrics_listen": "127.0.0.1:0", "metrics_max_conns": 4, "metrics_timeout_s": 1}
    with roce_rpc.Context(config=cfg) as c:
        p = c.metrics_port
        idle = []
        try:
            for i in range(32):
                sk = socket.create_connection(("127.0.0.1", p), timeout=60)
                if i % 2:
                    sk.sendall(b"GET /metr")  # a request that never ends
                idle.append(sk)
            body = get_metrics(p)  # waits (at most 60 s) for a place, then is served
            assert "rrpc_calls_total" in body
            # The server lets every idle one go (those past the limit wait in the
            # backlog, then time out in turn): each read ends, with an end of file
            # or an error answer; one the server held for good would time out here.
            for sk in idle:
                try:
                    sk.recv(4096)
                except ConnectionResetError:
                    pass
        finally:
            for sk in idle:
                sk.close()
        assert get_metrics(p)


class Trickler:
    """Slow clients (issue 28, point 2): @n connections to 127.0.0.1:@port, each
    sending a request head one byte per @every seconds on a thread of its own,
    never finishing it.  Counts the connections the server closed."""

    HEAD = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 4000 + b"\r\n\r\n"

    def __init__(self, port, n, every):
        import threading
        self.port, self.every, self.stop = port, every, threading.Event()
        self.closed_by_server = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, daemon=True) for _ in range(n)]
        for t in self.threads:
            t.start()

    def run(self):
        try:
            sk = socket.create_connection(("127.0.0.1", self.port), timeout=60)
        except OSError:
            return
        with sk:
            for i in range(len(self.HEAD)):
                if self.stop.is_set():
                    return
                try:
                    sk.sendall(self.HEAD[i:i + 1])
                except OSError:
                    break
                if self.stop.wait(self.every):
                    return
            with self.lock:
                self.closed_by_server += 1

    def close(self):
        self.stop.set()
        for t in self.threads:
            t.join(10)


def timed_scrape(port, bound):
    """A scrape answered within @bound seconds (a generous bound: before issue 28
    they waited 25-88 s or forever behind slow clients); returns its text."""
    t0 = time.monotonic()
    try:
        status, _, body = scrape(port, timeout=bound)
    except OSError as e:  # socket.timeout, a reset
        pytest.fail("a scrape got no answer within %d s behind slow clients: %r" % (bound, e))
    assert status == 200, body
    print("scrape answered in %.2f s" % (time.monotonic() - t0))
    return body


def test_slow_clients_at_the_connection_limit_do_not_delay_a_scrape():
    """8 connections (the default limit) each send one byte every 3 s: each is
    progress, so the idle timeout never ends them, and before, every scrape
    waited in the backlog until it timed out.  Now a new connection takes the
    place of the oldest one without a whole request head."""
    with roce_rpc.Context(config={"metrics_listen": "127.0.0.1:0"}) as c:
        slow = Trickler(c.metrics_port, 8, 3.0)
        try:
            time.sleep(0.5)  # all 8 connected and sent their first byte
            for _ in range(3):
                assert "rrpc_calls_total" in timed_scrape(c.metrics_port, 10)
        finally:
            slow.close()


def test_a_request_head_must_arrive_whole_within_the_header_timeout():
    """A head trickled one byte per 0.3 s (progress each time) is closed at
    metrics_header_timeout_s (1 s here), however slowly it comes."""
    cfg = {"metrics_listen": "127.0.0.1:0", "metrics_header_timeout_s": 1}
    with roce_rpc.Context(config=cfg) as c:
        slow = Trickler(c.metrics_port, 2, 0.3)
        try:
            for _ in range(100):  # 10 s at most, ten times the deadline
                if slow.closed_by_server == 2:
                    break
                time.sleep(0.1)
            assert slow.closed_by_server == 2, "a trickled head was held past its deadline"
        finally:
            slow.close()
        assert get_metrics(c.metrics_port)


def test_partial_request_heads_then_close_do_not_delay_a_scrape():
    """72 connections send part of a request head and close: before, they
    waited in the backlog and drained 8 per timeout (scrapes waited 87 s)."""
    with roce_rpc.Context(config={"metrics_listen": "127.0.0.1:0"}) as c:
        for _ in range(72):
            sk = socket.create_connection(("127.0.0.1", c.metrics_port), timeout=60)
            sk.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            sk.close()
        for _ in range(3):
            assert "rrpc_calls_total" in timed_scrape(c.metrics_port, 10)


def test_metrics_listen_binds_only_the_address_written():
    """There is no implicit every-address bind: "*" and shortened IPv4 forms
    such as "0" (which inet_aton reads as 0.0.0.0) are refused, saying what to
    write; 0.0.0.0 binds every IPv4 address because it says so."""
    for bad in ("*:0", "0:0", "127.1:0"):
        with pytest.raises(RrpcError) as ei:
            roce_rpc.Context(config={"metrics_listen": bad})
        assert "0.0.0.0" in str(ei.value), str(ei.value)
    with roce_rpc.Context(config={"metrics_listen": "0.0.0.0:0"}) as c:
        assert get_metrics(c.metrics_port)


# ---- rrpcd ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rrpcd():
    """A real rrpcd over TLS with metrics_listen: (control "HOST:PORT", metrics port,
    DIR with development certificates for kv-server, kv-client and nobody)."""
    if not os.environ.get("RRPCD") or not os.environ.get("MAKE_CERTS"):
        pytest.skip("RRPCD / MAKE_CERTS unset (meson test sets them)")
    d = tempfile.mkdtemp(prefix="rrpc-metrics-http-")
    subprocess.run([os.environ["MAKE_CERTS"], d, "kv-server", "kv-client", "nobody"],
                   check=True, stdout=subprocess.DEVNULL)
    conf = os.path.join(d, "rrpcd.conf")
    with open(conf, "w") as f:
        f.write("listen = 127.0.0.1:0\ncert = {d}/rrpcd.crt\nkey = {d}/rrpcd.key\n"
                "ca = {d}/ca.crt\nport_file = {d}/port\nlease_ms = 5000\n"
                "metrics_listen = 127.0.0.1:0\nmetrics_port_file = {d}/mport\n"
                "metrics_max_connections = 4\nmetrics_timeout_s = 1\n"
                "allow = register * kv-server\nallow = lookup * kv-client\n".format(d=d))
    check = subprocess.run([os.environ["RRPCD"], "-c", conf, "--check"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert check.returncode == 0, check.stdout.decode()
    log = open(os.path.join(d, "log"), "w")
    p = subprocess.Popen([os.environ["RRPCD"], "-c", conf], stdout=log, stderr=log)
    ports = {}
    for _ in range(1000):
        try:
            ports = {n: int(open(os.path.join(d, n)).read()) for n in ("port", "mport")}
            break
        except (OSError, ValueError):
            if p.poll() is not None:
                raise RuntimeError("rrpcd exited: " + open(os.path.join(d, "log")).read())
            time.sleep(0.01)
    assert ports, "rrpcd never wrote its ports"
    yield "127.0.0.1:%d" % ports["port"], ports["mport"], d
    p.terminate()
    p.wait(10)
    log.close()
    shutil.rmtree(d, ignore_errors=True)


def broker(d, addr, who):
    import roce_rpc.broker
    return roce_rpc.broker.Broker(addr, ca_file=os.path.join(d, "ca.crt"),
                                  cert_file=os.path.join(d, who + ".crt"),
                                  key_file=os.path.join(d, who + ".key"))


def test_rrpcd_counts_registrations_lookups_tickets_and_refusals_by_reason(rrpcd):
    if not roce_rpc.HAVE_BROKER:
        pytest.skip("no broker library")
    addr, mport, d = rrpcd
    before = samples(get_metrics(mport))
    srv = broker(d, addr, "kv-server")
    ctx = roce_rpc.Context()
    srv.gate(ctx, "kv-store")
    lis = ctx.listen("tcp://127.0.0.1:0")
    srv.register(ctx, "kv-store", [lis.uri], classes=["low_latency"])
    cli = broker(d, addr, "kv-client")
    for _ in range(3):
        assert cli.lookup("kv-store").instances
    with pytest.raises(RrpcError):
        cli.lookup("no-such-service")
    nobody = broker(d, addr, "nobody")
    with pytest.raises(PermissionError):
        nobody.lookup("kv-store")
    with pytest.raises(PermissionError):
        srv.lookup("kv-store")  # kv-server may register, not look up
    # Not TLS at all: a handshake failure.
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as sk:
        sk.sendall(b"GET / HTTP/1.0\r\n\r\n")
        while sk.recv(4096):
            pass
    text = get_metrics(mport)
    promtool_accepts(text)
    after = samples(text)

    def moved(name, **labels):
        return val(after, name, **labels) - val(before, name, **labels)
    assert val(after, "rrpcd_services") == 1
    assert val(after, "rrpcd_registrations") == 1
    assert val(after, "rrpcd_sessions") >= 3  # srv, cli, nobody are connected
    assert moved("rrpcd_requests_total", op="register", result="ok") == 1
    assert moved("rrpcd_requests_total", op="hello", result="ok") == 3
    assert moved("rrpcd_requests_total", op="lookup", result="ok") == 3
    assert moved("rrpcd_requests_total", op="lookup", result="not_found") == 1
    assert moved("rrpcd_requests_total", op="lookup", result="denied") == 2
    assert moved("rrpcd_requests_total", op="lookup", result="bad_request") == 0
    assert moved("rrpcd_tickets_issued_total") == 3
    assert moved("rrpcd_tls_handshake_failures_total") == 1
    assert moved("rrpcd_sessions_refused_total", reason="max_connections") == 0
    assert not any(k[0].startswith("rrpcd_etcd") for k in after)  # the registry is in memory
    srv.unregister("kv-store")
    gone = samples(get_metrics(mport))
    assert val(gone, "rrpcd_registrations") == 0 and val(gone, "rrpcd_services") == 0
    assert val(gone, "rrpcd_requests_total", op="unregister", result="ok") - val(
        before, "rrpcd_requests_total", op="unregister", result="ok") == 1
    ctx.close()  # before its broker, which it reads
    for b in (srv, cli, nobody):
        b.close()


def test_rrpcd_metrics_answer_get_only_and_survive_idle_connections(rrpcd):
    _, mport, _ = rrpcd
    assert scrape(mport, method="POST")[0] == 405
    assert scrape(mport, path="/")[0] == 404
    idle = [socket.create_connection(("127.0.0.1", mport), timeout=60) for _ in range(16)]
    try:
        assert "rrpcd_requests_total" in get_metrics(mport)
    finally:
        for sk in idle:
            sk.close()


def test_rrpcd_metrics_answer_a_scrape_behind_slow_clients(rrpcd):
    """rrpcd's endpoint (metrics_max_connections 4, metrics_timeout_s 1): 4
    connections trickling a head one byte per 0.5 s (progress within the 1 s
    timeout), and 72 that send part of a head and close."""
    _, mport, _ = rrpcd
    slow = Trickler(mport, 4, 0.5)
    try:
        time.sleep(0.3)
        assert "rrpcd_requests_total" in timed_scrape(mport, 10)
        for _ in range(72):
            sk = socket.create_connection(("127.0.0.1", mport), timeout=60)
            sk.sendall(b"GET /metrics HTTP/1.1\r\n")
            sk.close()
        assert "rrpcd_requests_total" in timed_scrape(mport, 10)
    finally:
        slow.close()


def test_rrpcd_check_refuses_the_same_listen_addresses_as_a_context():
    """One rule for both: rrpcd --check refuses "*:0" and "0:0" alike."""
    if not os.environ.get("RRPCD"):
        pytest.skip("RRPCD unset (meson test sets it)")
    d = tempfile.mkdtemp(prefix="rrpc-metrics-listen-")
    try:
        subprocess.run([os.environ["MAKE_CERTS"], d], check=True, stdout=subprocess.DEVNULL)
        for bad in ("*:0", "0:0"):
            conf = os.path.join(d, "rrpcd.conf")
            with open(conf, "w") as f:
                f.write("listen = 127.0.0.1:0\ncert = {d}/rrpcd.crt\nkey = {d}/rrpcd.key\n"
                        "ca = {d}/ca.crt\nmetrics_listen = {b}\n".format(d=d, b=bad))
            p = subprocess.run([os.environ["RRPCD"], "-c", conf, "--check"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            out = p.stdout.decode()
            assert p.returncode != 0, "rrpcd --check accepted metrics_listen = " + bad
            assert "0.0.0.0" in out, out
    finally:
        shutil.rmtree(d, ignore_errors=True)


_GIVEN_PORTS = set()


def free_port():
    """A loopback port free right now, never one this process was given before (the kernel may
    hand a closed port out again, and two callers need distinct ones)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _GIVEN_PORTS:
            _GIVEN_PORTS.add(port)
            return port


def wait_for(what, fn, bound=90):
    """Polls @fn until it is true; fails after @bound seconds (a generous bound)."""
    for _ in range(bound * 10):
        if fn():
            return
        time.sleep(0.1)
    pytest.fail("never happened: " + what)


def test_rrpcd_on_etcd_says_when_it_is_degraded_and_counts_etcd_errors():
    etcd = os.environ.get("ETCD") or "/usr/bin/etcd"
    if not os.access(etcd, os.X_OK):
        pytest.skip("no etcd binary at %s (apt-get install etcd-server, or set ETCD)" % etcd)
    if not os.environ.get("RRPCD") or not os.environ.get("MAKE_CERTS"):
        pytest.skip("RRPCD / MAKE_CERTS unset (meson test sets them)")
    d = tempfile.mkdtemp(prefix="rrpc-metrics-etcd-")
    subprocess.run([os.environ["MAKE_CERTS"], d], check=True, stdout=subprocess.DEVNULL)
    cport, pport = free_port(), free_port()
    curl, purl = "http://127.0.0.1:%d" % cport, "http://127.0.0.1:%d" % pport
    elog = open(os.path.join(d, "etcd.log"), "w")

    def start_etcd():
        return subprocess.Popen(
            [etcd, "--name", "t", "--data-dir", os.path.join(d, "data"),
             "--listen-client-urls", curl, "--advertise-client-urls", curl,
             "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
             "--initial-cluster", "t=" + purl, "--heartbeat-interval", "250",
             "--election-timeout", "2500"], stdout=elog, stderr=elog)
    e = start_etcd()
    conf = os.path.join(d, "rrpcd.conf")
    with open(conf, "w") as f:
        f.write("listen = 127.0.0.1:0\ncert = {d}/rrpcd.crt\nkey = {d}/rrpcd.key\n"
                "ca = {d}/ca.crt\nport_file = {d}/port\nregistry = etcd://127.0.0.1:{p}\n"
                "ticket_key = {d}/ticket.pem\n"
                "metrics_listen = 127.0.0.1:0\nmetrics_port_file = {d}/mport\n".format(d=d, p=cport))
    log = open(os.path.join(d, "log"), "w")
    r = subprocess.Popen([os.environ["RRPCD"], "-c", conf], stdout=log, stderr=log)
    try:
        def mport():
            try:
                return int(open(os.path.join(d, "mport")).read())
            except (OSError, ValueError):
                assert r.poll() is None, "rrpcd exited: " + open(os.path.join(d, "log")).read()
                return None
        wait_for("rrpcd serving its metrics", mport)
        port = mport()

        def now():
            return samples(get_metrics(port))
        wait_for("rrpcd synchronized with etcd (rrpcd_etcd_degraded 0)",
                 lambda: val(now(), "rrpcd_etcd_degraded") == 0)
        text = get_metrics(port)
        promtool_accepts(text)
        # rrpcd may have started before etcd took connections: its first
        # attempts count; what matters is that losing etcd adds to them.
        before = val(samples(text), "rrpcd_etcd_errors_total", op="watch")
        e.kill()
        e.wait()
        wait_for("rrpcd degraded once etcd is gone (rrpcd_etcd_degraded 1)",
                 lambda: val(now(), "rrpcd_etcd_degraded") == 1)
        assert val(now(), "rrpcd_etcd_errors_total", op="watch") >= before + 1
        e = start_etcd()
        wait_for("rrpcd synchronized again (rrpcd_etcd_degraded 0)",
                 lambda: val(now(), "rrpcd_etcd_degraded") == 0)
    finally:
        r.terminate()
        r.wait(10)
        e.kill()
        e.wait()
        log.close()
        elog.close()
        shutil.rmtree(d, ignore_errors=True)
