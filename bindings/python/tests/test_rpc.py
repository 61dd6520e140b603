import concurrent.futures
import gc
import os
import subprocess
import sys
import threading
import time

import pytest

import roce_rpc
from roce_rpc import RrpcError

from conftest import TRANSPORT, client_uri, listen_uri


def test_context_manager_closes_and_is_idempotent():
    with roce_rpc.Context() as ctx:
        assert not ctx.closed
        lis = ctx.listen(listen_uri())
        assert lis.port > 0 and lis.uri.endswith(":%d" % lis.port)
    assert ctx.closed
    ctx.close()
    with pytest.raises(RrpcError) as ei:
        ctx.listen(listen_uri())
    assert ei.value.code == roce_rpc.E_CLOSED


_LEFT_OPEN = """
import sys
import roce_rpc
c = roce_rpc.Context()
conn = c.connect(sys.argv[1])
for _ in range(200):
    assert conn.call("echo", b"x" * 64) == b"x" * 64
print("called", flush=True)
"""


def test_a_process_that_exits_with_its_context_open_exits(pair, tmp_path):
    """A client process makes calls and ends without closing its context or
    its connection: it exits with the interpreter.  Left to the garbage
    collector of a finalizing interpreter, its loop thread stopped in a
    Python callback holding the context's lock, and the process hung in its
    exit for ever."""
    s, lis, _ = pair
    s.add_handler("echo", lambda data: data)
    script = tmp_path / "left_open.py"
    script.write_text(_LEFT_OPEN)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(roce_rpc.__file__)))
    try:
        p = subprocess.run([sys.executable, "-s", str(script), client_uri(lis)],
                           env=env, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired as e:
        pytest.fail("the process did not exit within 60 s of its last statement: %r" % e.stdout)
    assert p.returncode == 0, p.stderr
    assert "called" in p.stdout


def test_decorated_handlers_and_blocking_calls(pair):
    s, lis, c = pair

    @s.handler("echo")
    def echo(data):
        return data

    @lis.handler("upper")
    def upper(data):
        return data.upper()

    @s.handler("who", request=True)
    def who(req, data):
        assert isinstance(req.conn, roce_rpc.Conn)
        return b"%d" % req.qos_class

    conn = c.connect(client_uri(lis))
    assert conn.up and conn.transport == TRANSPORT
    assert conn.call("echo", b"hello") == b"hello"
    assert conn.call("echo") == b""
    assert conn.call("upper", bytearray(b"abc")) == b"ABC"
    assert conn.call("who", qos="bulk") == b"%d" % roce_rpc.CLASS_BULK
    assert conn.call("who", qos=roce_rpc.CLASS_CONTROL) == b"%d" % roce_rpc.CLASS_CONTROL
    big = bytes(range(256)) * 4096  # 1 MiB
    assert conn.call("echo", memoryview(big), qos="bulk") == big
    assert len(lis.connections) == 1


def test_futures_and_callbacks(pair):
    s, lis, c = pair

    @s.handler("inc")
    def inc(data):
        return (int(data) + 1).to_bytes(4, "little")

    conn = c.connect(client_uri(lis))
    futs = [conn.call_async("inc", b"%d" % i) for i in range(200)]
    got = [int.from_bytes(f.result(timeout=10), "little") for f in futs]
    assert got == list(range(1, 201))
    done = threading.Event()
    seen = []

    def cb(fut):
        seen.append(fut.result())
        done.set()

    conn.call_async("inc", b"41", callback=cb)
    assert done.wait(10) and seen == [(42).to_bytes(4, "little")]


def test_asyncio(pair):
    import asyncio
    s, lis, c = pair
    s.add_handler("echo", lambda d: d)
    conn = c.connect(client_uri(lis))

    async def main():
        return await asyncio.gather(*(conn.acall("echo", b"%d" % i) for i in range(10)))

    assert asyncio.run(main()) == [b"%d" % i for i in range(10)]


def test_errors_carry_code_name_and_message(pair):
    s, lis, c = pair

    @s.handler("refuse")
    def refuse(data):
        raise RrpcError(42, "the handler refuses politely")

    @s.handler("crash")
    def crash(data):
        raise KeyError("no such key")

    @s.handler("slow")
    def slow(data):
        time.sleep(0.3)
        return b"late"

    conn = c.connect(client_uri(lis))
    with pytest.raises(RrpcError) as ei:
        conn.call("refuse")
    assert ei.value.code == 42 and ei.value.message == "the handler refuses politely"
    with pytest.raises(RrpcError) as ei:
        conn.call("crash")
    assert ei.value.code == 1 and "KeyError" in ei.value.message and "no such key" in \
        ei.value.message
    with pytest.raises(RrpcError) as ei:
        conn.call("missing")
    assert ei.value.code == roce_rpc.E_NO_METHOD
    assert ei.value.name == "RRPC_E_NO_METHOD"
    assert "RRPC_E_NO_METHOD" in str(ei.value)
    with pytest.raises(RrpcError) as ei:
        conn.call("slow", timeout=0.05)
    assert ei.value.code == roce_rpc.E_DEADLINE and ei.value.name == "RRPC_E_DEADLINE"
    f = conn.call_async("refuse")
    assert isinstance(f.exception(10), RrpcError) and f.exception().code == 42
    # the connection still works after all that
    s.add_handler("echo", lambda d: d)
    assert conn.call("echo", b"x") == b"x"


def test_deferred_and_future_answers(pair):
    s, lis, c = pair
    pool = concurrent.futures.ThreadPoolExecutor(2)

    @s.handler("later", request=True)
    def later(req, data):
        req.defer()
        threading.Timer(0.01, req.respond, args=(b"threaded " + data,)).start()

    @s.handler("fut")
    def fut(data):
        return pool.submit(lambda: data[::-1])

    @s.handler("futfail")
    def futfail(data):
        return pool.submit(lambda: (_ for _ in ()).throw(RrpcError(7, "async no")))

    conn = c.connect(client_uri(lis))
    assert conn.call("later", b"x") == b"threaded x"
    assert conn.call("fut", b"abc") == b"cba"
    with pytest.raises(RrpcError) as ei:
        conn.call("futfail")
    assert (ei.value.code, ei.value.message) == (7, "async no")
    pool.shutdown()


def test_blocking_call_from_a_handler_refuses(pair):
    s, lis, c = pair
    s.add_handler("echo", lambda d: d)
    c.add_handler("echo", lambda d: d)  # clients serve too

    @s.handler("reenter", request=True)
    def reenter(req, data):
        try:
            req.conn.call("echo", b"x")
        except RrpcError as e:
            return e.name.encode()
        return b"no error"

    @s.handler("callback", request=True)
    def callback(req, data):  # the async form works from a handler
        req.defer()
        req.conn.call_async("echo", b"back", callback=lambda f: req.respond(f.result()))

    conn = c.connect(client_uri(lis))
    assert conn.call("reenter") == b"RRPC_E_DEADLOCK"
    assert conn.call("callback") == b"back"


def test_connection_events_and_close(pair):
    s, lis, c = pair
    ups, downs = [], []
    ev, up = threading.Event(), threading.Event()
    # The server's UP runs on its loop thread and needs the GIL: wait for it.
    s.on_connect(lambda cn: (ups.append(cn), up.set()))

    @s.on_disconnect
    def gone(cn, reason):
        downs.append(reason.code)
        ev.set()

    conn = c.connect(client_uri(lis))
    assert up.wait(10) and len(ups) == 1
    conn.close()
    assert conn.closed and not conn.up
    assert ev.wait(10) and downs
    with pytest.raises(RrpcError) as ei:
        conn.call("echo")
    assert ei.value.code == roce_rpc.E_CLOSED
    conn.close()  # idempotent


def test_connect_errors():
    with roce_rpc.Context() as c:
        with pytest.raises(RrpcError) as ei:
            c.connect("nope://x")
        assert ei.value.code == roce_rpc.E_URI
        assert ei.value.message


def test_pending_calls_fail_when_the_context_closes():
    s = roce_rpc.Context()
    c = roce_rpc.Context()
    lis = s.listen(listen_uri())
    held = []
    s.add_handler("hold", lambda req, d: held.append(req.defer()), request=True)
    conn = c.connect(client_uri(lis))
    f = conn.call_async("hold")
    t0 = time.time()
    while not held and time.time() - t0 < 5:
        time.sleep(0.01)
    c.close()
    assert isinstance(f.exception(5), RrpcError)
    assert f.exception().code in (roce_rpc.E_CLOSED, roce_rpc.E_CONN_LOST)
    s.close()
    with pytest.raises(RrpcError):
        held[0].respond(b"too late")


def test_children_keep_parents_alive_any_drop_order():
    for order in range(3):
        s = roce_rpc.Context()
        c = roce_rpc.Context()
        lis = s.listen(listen_uri())
        s.add_handler("echo", lambda d: d)
        conn = c.connect(client_uri(lis))
        buf = bytearray(4096)
        region = c.register(buf)
        assert region.context is c and conn.context is c
        objs = [s, c, lis, conn, region]
        del s, c
        gc.collect()
        assert conn.call("echo", b"alive") == b"alive"  # the contexts are alive
        if order == 1:
            objs.reverse()
        elif order == 2:
            objs = objs[2:] + objs[:2]
        while objs:
            objs.pop()
            gc.collect()
        del conn, lis, region
        gc.collect()


def test_handler_closing_its_own_context_does_not_deadlock():
    s = roce_rpc.Context()
    c = roce_rpc.Context()
    lis = s.listen(listen_uri())

    @s.handler("close")
    def close(data):
        s.close()
        return b"bye"

    conn = c.connect(client_uri(lis))
    try:
        conn.call("close", timeout=5)
    except RrpcError:
        pass
    t0 = time.time()
    while not s._core.closed and time.time() - t0 < 5:
        time.sleep(0.01)
    assert s._core.closed
    c.close()


def test_handler_returning_a_non_buffer_fails_the_call_at_once_with_a_handler_error(pair):
    """A handler's return value that is no buffer (an int, a dict, the
    coroutine of an async def, the result of a Future) is answered with
    HANDLER_ERROR naming the method and the type, not left unanswered until
    the caller's deadline; the request is answered exactly once."""
    s, lis, c = pair
    pool = concurrent.futures.ThreadPoolExecutor(1)
    seen = []

    s.add_handler("int", lambda d: 42)
    s.add_handler("dict", lambda d: {"a": 1})

    async def coro(data):
        return data

    s.add_handler("coro", coro)
    s.add_handler("future", lambda d: pool.submit(lambda: 42))

    @s.handler("respond_int", request=True)
    def respond_int(req, data):
        seen.append(req)
        req.respond(42)  # raises TypeError: the request is still to be answered

    @s.handler("request_dict", request=True)
    def request_dict(req, data):
        seen.append(req)
        return {"a": 1}

    s.add_handler("echo", lambda d: d)
    conn = c.connect(client_uri(lis))
    cases = [("int", "int"), ("dict", "dict"), ("coro", "coroutine"), ("future", "int"),
             ("request_dict", "dict")]
    for method, tname in cases:
        with pytest.raises(RrpcError) as ei:
            conn.call(method, b"x", timeout=30)
        assert ei.value.code == roce_rpc.HANDLER_ERROR, (method, ei.value)
        assert "handler %r returned %s" % (method, tname) in ei.value.message, ei.value.message
        assert "bytes" in ei.value.message
    with pytest.raises(RrpcError) as ei:
        conn.call("respond_int", timeout=30)
    assert ei.value.code == roce_rpc.HANDLER_ERROR and "TypeError" in ei.value.message
    # answered once: a second answer is refused, not sent on a freed request
    assert len(seen) == 2
    for req in seen:
        with pytest.raises(RrpcError) as ei:
            req.respond(b"again")
        assert "already answered" in ei.value.message
    # and the server goes on serving
    assert conn.call("echo", b"still here", timeout=30) == b"still here"
    pool.shutdown()


def test_stats_and_the_metrics_text_count_calls_per_class(pair):
    s, lis, c = pair
    s.add_handler("echo", lambda d: d)
    conn = c.connect(client_uri(lis))
    for _ in range(3):
        conn.call("echo", b"x" * 10, qos="low_latency")
    conn.call("echo", b"y" * 100, qos="bulk")
    st = c.stats()
    ll, bulk = st["classes"]["low_latency"], st["classes"]["bulk"]
    assert (ll["calls"], ll["calls_ok"], ll["call_bytes_out"]) == (3, 3, 30)
    assert (bulk["calls"], bulk["call_bytes_in"]) == (1, 100)
    assert sum(ll["rtt_buckets"]) == 3 and st["conns_up"] == 1
    assert s.stats()["classes"]["bulk"]["requests"] == 1
    try:
        conn.call("nobody", b"")
    except Exception:
        pass
    st = c.stats()
    assert st["classes"]["low_latency"]["call_errors"]["RRPC_E_NO_METHOD"] == 1
    assert sum(st["classes"]["bulk"]["call_errors"].values()) == 0
    peer = st["peers"][next(iter(st["peers"]))]
    assert len(st["peers"]) == 1 and peer["conns"] == 1 and peer["calls"] == 5
    assert s.stats()["peers"][next(iter(s.stats()["peers"]))]["requests"] == 5
    text = c.metrics_text()
    assert 'rrpc_calls_total{class="low_latency"} 4\n' in text
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        return
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert fams["rrpc_call_duration_seconds"].type == "histogram"


def test_a_blocking_call_is_interrupted_by_ctrl_c_and_its_late_answer_dropped(pair):
    """Conn.call sleeps in slices: KeyboardInterrupt reaches the caller
    while the handler still works, the call is cancelled in the library (its
    answer, when it comes, is dropped), and the connection keeps working."""
    import _thread
    s, lis, c = pair
    entered, release, answered = threading.Event(), threading.Event(), threading.Event()
    released = []

    @s.handler("slow")
    def slow(data):
        entered.set()
        released.append(release.wait(30))  # False: the interrupt waited for the answer
        answered.set()
        return b"late"

    @s.handler("echo")
    def echo(data):
        return data

    conn = c.connect(client_uri(lis))

    def interrupt():
        if entered.wait(60):
            _thread.interrupt_main()

    t = threading.Thread(target=interrupt)
    t.start()
    with pytest.raises(KeyboardInterrupt):
        conn.call("slow", b"x", timeout=60)
    t.join()
    release.set()  # the answer goes out now, to a call that is gone
    assert answered.wait(60) and released == [True]
    assert conn.call("echo", b"after") == b"after"
    assert conn.call("echo", b"again", timeout=10) == b"again"


def test_a_handler_on_a_worker_does_not_hold_the_loop(pair):
    """on_worker=True: while a handler works on a worker thread, the loop
    answers other calls (the slow handler waits until one was answered);
    its own answer, and an exception it raises, still reach the caller."""
    s, lis, c = pair
    answered, released = threading.Event(), []
    workers = set()

    @s.handler("slow", on_worker=True)
    def slow(data):
        workers.add(threading.get_ident())
        released.append(answered.wait(30))  # False: the loop waited for this handler
        return data * 2

    @s.handler("fast")
    def fast(data):
        return data

    @s.handler("boom", on_worker=True)
    def boom(data):
        raise KeyError("no such row")

    conn = c.connect(client_uri(lis))
    pending = conn.call_async("slow", b"ab")
    assert conn.call("fast", b"x") == b"x"
    answered.set()
    assert pending.result(60) == b"abab" and released == [True]
    assert threading.get_ident() not in workers
    with pytest.raises(RrpcError) as ei:
        conn.call("boom", b"")
    assert ei.value.code == roce_rpc.HANDLER_ERROR and "no such row" in str(ei.value)


def test_a_handler_sees_its_callers_deadline_and_cancellation(pair):
    """The caller's deadline travels with the request (Request.deadline,
    remaining()); when it passes, the caller sends a cancel, which the
    running handler sees as Request.cancelled and stops, long before its
    own 10 s."""
    s, lis, c = pair
    seen = {}
    done = threading.Event()

    @s.handler("watch", request=True, on_worker=True)
    def watch(req, data):
        seen["remaining"] = req.remaining()
        seen["deadline"] = req.deadline
        t0 = time.monotonic()
        while not req.cancelled and time.monotonic() - t0 < 10:
            time.sleep(0.01)
        seen["cancelled"] = req.cancelled
        seen["took"] = time.monotonic() - t0
        done.set()
        return b"late"

    @s.handler("left", request=True)
    def left(req, data):
        return b"%.3f" % req.remaining()

    conn = c.connect(client_uri(lis))
    with pytest.raises(RrpcError) as ei:
        conn.call("watch", b"", timeout=0.3)
    assert ei.value.code == roce_rpc.E_DEADLINE
    assert done.wait(10)
    assert seen["cancelled"] is True, seen
    assert seen["took"] < 5, seen
    assert 0 < seen["remaining"] <= 0.3 and seen["deadline"] is not None, seen
    assert 1.5 < float(conn.call("left", b"", timeout=2.0)) <= 2.0
