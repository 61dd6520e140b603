"""roce_rpc.aio: contexts driven by the running asyncio loop through their
own fd and timeout, no library thread, no thread per future."""
import asyncio
import logging
import sys
import threading

import numpy as np
import pytest

import roce_rpc
import roce_rpc.aio as aio
from roce_rpc import RrpcError

from conftest import client_uri, listen_uri

pytest.importorskip("pytest_asyncio", reason="install python3-pytest-asyncio")


async def _pair():
    s = aio.Context()
    c = aio.Context()
    lis = s.listen(listen_uri())
    return s, lis, c


def _count_progress(c, monkeypatch):
    """From now on, the timeout of every rrpc_ctx_progress the driver runs
    for context @c, in a list (returned)."""
    runs = []
    real = aio._progress

    def counting(ptr, ms):
        if ptr == c._ptr:
            runs.append(ms)
        return real(ptr, ms)

    monkeypatch.setattr(aio, "_progress", counting)
    return runs


def _holder(s):
    """Registers "hold" on @s: it defers every request; returns their list."""
    held = []

    @s.handler("hold", request=True)
    def hold(req, data):
        held.append(req.defer())
    return held


@pytest.mark.asyncio
async def test_calls_and_async_handlers_run_on_the_loop_thread_with_no_library_thread():
    before = threading.active_count()
    s, lis, c = await _pair()
    loop_thread = threading.get_ident()
    seen = []

    @s.handler("echo")
    async def echo(data):
        seen.append(threading.get_ident())
        await asyncio.sleep(0)  # a real coroutine: suspends and resumes
        return data

    @s.handler("rev")
    def rev(data):
        seen.append(threading.get_ident())
        return data[::-1]

    async with c:
        conn = await c.connect(client_uri(lis))
        assert conn.up
        assert await conn.call("echo", b"hi") == b"hi"
        assert await conn.call("rev", b"abc") == b"cba"
        # many at once on one connection, out of order
        got = await asyncio.gather(*(conn.call("echo", b"%d" % i) for i in range(50)))
        assert got == [b"%d" % i for i in range(50)]
        assert threading.active_count() == before  # the loop drives both contexts
        assert set(seen) == {loop_thread}
    s.close()


@pytest.mark.asyncio
async def test_a_deadline_fires_through_the_fd_and_timeout_alone():
    s, lis, c = await _pair()
    held = _holder(s)

    conn = await c.connect(client_uri(lis))
    t0 = asyncio.get_running_loop().time()
    with pytest.raises(roce_rpc.RrpcTimeoutError) as ei:
        await conn.call("hold", b"x", timeout=0.3)
    assert isinstance(ei.value, TimeoutError)
    assert ei.value.code == roce_rpc.E_DEADLINE and "hold" in str(ei.value)
    assert asyncio.get_running_loop().time() - t0 < 20  # a bound against hanging only
    assert len(held) == 1
    c.close()
    s.close()


@pytest.mark.asyncio
async def test_a_stopped_server_is_declared_lost_by_the_driven_keepalive():
    s, lis, c0 = await _pair()
    c0.close()
    c = aio.Context(config={"RRPC_KEEPALIVE_MS": 100, "RRPC_KEEPALIVE_TIMEOUT_MS": 400})
    conn = await c.connect(client_uri(lis))

    @s.handler("hold", request=True)
    def hold(req, data):
        req.defer()

    call = asyncio.ensure_future(conn.call("hold", b"x", timeout=30))
    await asyncio.sleep(0.05)
    # The server's loop stops: nothing drives it any more (as a SIGSTOP would).
    asyncio.get_running_loop().remove_reader(s._fd)
    s._kick = lambda: None
    s._core.kick = None
    with pytest.raises(roce_rpc.RrpcConnectionError):
        await asyncio.wait_for(call, 20)
    c.close()
    s.close()


@pytest.mark.asyncio
async def test_handler_failures_answer_at_once_with_a_handler_error_and_are_logged(caplog):
    s, lis, c = await _pair()

    @s.handler("raises")
    async def raises(data):
        await asyncio.sleep(0)
        raise ValueError("bad input %r" % data)

    @s.handler("wrong_type")
    async def wrong_type(data):
        return {"not": "bytes"}

    @s.handler("app_error")
    async def app_error(data):
        raise RrpcError(42, "out of stock")

    conn = await c.connect(client_uri(lis))
    with caplog.at_level(logging.WARNING, logger="roce_rpc"):
        with pytest.raises(RrpcError) as ei:
            await conn.call("raises", b"q", timeout=30)
        assert ei.value.code == roce_rpc.HANDLER_ERROR
        assert "ValueError: bad input b'q'" in ei.value.message
        with pytest.raises(RrpcError) as ei:
            await conn.call("wrong_type", b"", timeout=30)
        assert ei.value.code == roce_rpc.HANDLER_ERROR
        assert "dict" in ei.value.message and "wrong_type" in ei.value.message
    assert any("raises" in r.getMessage() for r in caplog.records)
    assert any("wrong_type" in r.getMessage() for r in caplog.records)
    with pytest.raises(RrpcError) as ei:
        await conn.call("app_error", b"")
    assert (ei.value.code, ei.value.message) == (42, "out of stock")
    c.close()
    s.close()


@pytest.mark.asyncio
async def test_a_cancelled_call_is_never_delivered_and_the_connection_goes_on():
    s, lis, c = await _pair()
    held = _holder(s)

    @s.handler("echo")
    def echo(data):
        return data

    conn = await c.connect(client_uri(lis))
    task = asyncio.ensure_future(conn.call("hold", b"x", timeout=30))
    while not held:
        await asyncio.sleep(0.01)
    assert len(c._core.pending) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # rrpc_call_cancel completed it in the library: nothing waits for the
    # answer or the 30 s deadline any more, before the server has answered.
    assert not c._core.pending
    assert roce_rpc.E_CANCELLED == -1020
    # asyncio.wait_for cancels the same way
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(conn.call("hold", b"y", timeout=30), 0.1)
    assert len(held) == 2
    # The server answers afterwards: the answers arrive and are dropped.
    for req in held:
        req.respond(b"late")
    assert await conn.call("echo", b"after") == b"after"
    for _ in range(200):
        if not c._core.pending:
            break
        await asyncio.sleep(0.01)
    assert not c._core.pending  # both completions came back and were consumed
    assert task.cancelled()
    c.close()
    s.close()


@pytest.mark.asyncio
async def test_an_async_handler_gets_cancelled_error_when_its_caller_gives_up():
    """Cancelling a call (a task cancel, or its deadline) reaches the
    server: the async def handler running it gets CancelledError, long
    before its own 30 s; the handler sees the caller's remaining time."""
    s, lis, c = await _pair()
    seen = {}
    started = asyncio.Event()

    @s.handler("slow", request=True)
    async def slow(req, data):
        seen["remaining"] = req.remaining()
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen["cancelled"] = seen.get("cancelled", 0) + 1
            raise
        return b"late"

    conn = await c.connect(client_uri(lis))
    t0 = asyncio.get_running_loop().time()
    task = asyncio.ensure_future(conn.call("slow", b"x", timeout=20))
    await asyncio.wait_for(started.wait(), 10)
    assert 0 < seen["remaining"] <= 20
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(500):
        if seen.get("cancelled"):
            break
        await asyncio.sleep(0.01)
    assert seen.get("cancelled") == 1, seen
    # a deadline that passes cancels the same way
    started.clear()
    with pytest.raises(RrpcError) as ei:
        await conn.call("slow", b"y", timeout=0.3)
    assert ei.value.code == roce_rpc.E_DEADLINE
    for _ in range(500):
        if seen.get("cancelled") == 2:
            break
        await asyncio.sleep(0.01)
    assert seen.get("cancelled") == 2, seen
    assert asyncio.get_running_loop().time() - t0 < 15
    assert not s._core.tasks  # both tasks ended
    c.close()
    s.close()


@pytest.mark.asyncio
async def test_connect_failures_are_the_builtin_exceptions():
    c = aio.Context()
    lis_ctx = aio.Context()
    lis = lis_ctx.listen(listen_uri())
    uri = client_uri(lis)
    lis.close()
    if uri.startswith("tcp"):
        with pytest.raises(ConnectionRefusedError):
            await c.connect(uri, timeout=5)
    with pytest.raises(RrpcError) as ei:
        await c.connect("nope://x", timeout=5)
    assert isinstance(ei.value, ValueError)
    c.close()
    lis_ctx.close()


@pytest.mark.asyncio
async def test_blocking_methods_refuse_on_a_driven_context():
    s, lis, c = await _pair()
    with pytest.raises(RrpcError) as ei:
        c.sync.connect(client_uri(lis))
    assert ei.value.code == roce_rpc.E_DEADLOCK and "aio" in ei.value.message
    conn = await c.connect(client_uri(lis))
    with pytest.raises(RrpcError) as ei:
        conn.sync.call("x")
    assert ei.value.code == roce_rpc.E_DEADLOCK
    c.close()
    s.close()


@pytest.mark.asyncio
async def test_one_sided_write_with_notify_read_and_wait_notify():
    s, lis, c = await _pair()
    target = np.zeros(4096, np.uint8)
    treg = s.register(target)
    tokens = {}

    @s.handler("token", request=True)
    def token(req, data):
        return treg.token(req.conn).to_bytes()

    conn = await c.connect(client_uri(lis))
    tok = await conn.call("token")
    src = np.arange(4096, dtype=np.uint32).astype(np.uint8)
    sreg = c.register(src)
    await conn.write(sreg, 0, tok, notify=7)
    assert await s.wait_notify(timeout=30) == 7
    assert np.array_equal(target, src)
    back = np.zeros(1024, np.uint8)
    breg = c.register(back)
    await conn.read(breg, 0, tok, 100, 1024)
    assert np.array_equal(back, src[100:1124])
    with pytest.raises(roce_rpc.RrpcTimeoutError):
        await s.wait_notify(timeout=0.05)
    del tokens
    c.close()
    s.close()


@pytest.mark.skipif(not roce_rpc.HAVE_TENSOR, reason="no tensor API")
@pytest.mark.asyncio
async def test_tensors_and_kv_pages():
    s, lis, c = await _pair()
    srv = s.serve_tensors()
    conn = await c.connect(client_uri(lis))
    a = np.random.default_rng(1).standard_normal((64, 33)).astype(np.float32)
    send = asyncio.ensure_future(conn.send_tensor("w", a))
    name, got = await srv.receive(timeout=30)
    await send
    assert name == "w" and np.array_equal(got, a)
    with pytest.raises(roce_rpc.RrpcTimeoutError):
        await srv.receive(timeout=0.05)
    pages = np.zeros((8, 256), np.uint8)
    dst = s.kv_pool(pages)

    @s.handler("kvtok", request=True)
    def kvtok(req, data):
        return dst.token(req.conn).to_bytes()

    src_pages = np.arange(8 * 256, dtype=np.uint16).astype(np.uint8).reshape(8, 256)
    src = c.kv_pool(src_pages)
    tok = await conn.call("kvtok")
    writes = await conn.kv_transfer(src, tok, [(0, 3), (1, 4), (5, 0)])
    assert writes >= 1
    assert np.array_equal(pages[3], src_pages[0]) and np.array_equal(pages[4], src_pages[1])
    assert np.array_equal(pages[0], src_pages[5])
    srv.close()
    c.close()
    s.close()


def test_an_aio_context_needs_a_running_loop():
    with pytest.raises(RuntimeError):
        aio.Context()
    assert sys.modules["roce_rpc.aio"] is aio


@pytest.mark.asyncio
async def test_one_progress_per_readiness_and_many_concurrent_calls_get_their_own_answers(
        monkeypatch):
    """The fd's reader runs one rrpc_ctx_progress however many answers are
    ready, and starting a call runs none (the request goes out inside
    rrpc_call); 300 concurrent calls of every buffer kind each get their
    own answer through pooled handles.  The client polls not at all
    (RRPC_BUSY_POLL_US=0 and, on verbs, RRPC_VERBS_BUSY_POLL_US=0): passes
    run in the polling window after traffic are counted by
    test_the_driver_polls_through_the_window_after_traffic_then_sleeps."""
    s = aio.Context()
    c = aio.Context(config={"RRPC_BUSY_POLL_US": 0, "RRPC_VERBS_BUSY_POLL_US": 0})
    lis = s.listen(listen_uri())

    @s.handler("echo")
    def echo(data):
        return data

    conn = await c.connect(client_uri(lis))
    assert await conn.call("echo", b"warm") == b"warm"
    runs = _count_progress(c, monkeypatch)
    n = 200
    for i in range(n):
        assert await conn.call("echo", b"%d" % i) == b"%d" % i
    # one pass for each readiness of the fd: on tcp one per answer, and a few
    # spare ones (a credit frame, a keepalive); on verbs the request's send
    # completion may wake the fd apart from the answer's, so up to two per
    # call.  Never one more per call: a call that kicked a pass of its own
    # took two passes a call on tcp (400 for 200).
    per_call = 2 if conn.transport == "verbs" else 1
    assert n <= len(runs) <= per_call * n + n // 4, (len(runs), conn.transport)
    kinds = (bytes, bytearray, lambda b: memoryview(b), lambda b: np.frombuffer(b, np.uint8))
    want = [(b"%d-" % i) * (1 + i % 50) for i in range(300)]
    got = await asyncio.gather(*(conn.call("echo", kinds[i % 4](want[i]))
                                 for i in range(300)))
    assert got == want
    assert not c._core.pending
    assert 0 < len(aio._handles) <= 4096
    c.close()
    s.close()


@pytest.mark.asyncio
async def test_a_cancelled_call_gives_its_handle_back_only_once_completed_and_calls_go_on():
    """A cancelled call's completion runs inside rrpc_call_cancel; only
    then is its handle reused, so its late answer cannot settle the call
    that reuses the handle."""
    s, lis, c = await _pair()
    held = _holder(s)

    @s.handler("echo")
    def echo(data):
        return data

    conn = await c.connect(client_uri(lis))
    aio._handles.clear()
    task = asyncio.ensure_future(conn.call("hold", b"x", timeout=30))
    while not held:
        await asyncio.sleep(0.01)
    (key, _), = [(k, e) for k, e in roce_rpc._core._registry.items()
                 if isinstance(e, tuple) and len(e) == 4 and e[1] is c._core]
    assert not aio._handles  # in use
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [h[0] for h in aio._handles] == [key]  # back once its completion ran
    nxt = asyncio.ensure_future(conn.call("hold", b"y", timeout=30))
    while len(held) < 2:
        await asyncio.sleep(0.01)
    assert key in roce_rpc._core._registry  # the next call reuses it
    held[0].respond(b"late answer of the cancelled call")
    assert await conn.call("echo", b"after") == b"after"
    assert not nxt.done()  # the late answer was dropped, not given to nxt
    held[1].respond(b"mine")
    assert await nxt == b"mine"
    c.close()
    s.close()


@pytest.mark.asyncio
async def test_a_task_resumes_inside_the_readiness_that_answered_its_call(monkeypatch):
    """The driver runs the awaiting task's wakeup itself once the progress
    that settled its future returns: the task resumes inside the fd
    reader's turn of the loop, not at a second turn (a select, an
    epoll_wait and a Handle more per call)."""
    inside = []
    real = aio.Context._run

    def reader(self, *args):
        inside.append(self)
        try:
            real(self, *args)
        finally:
            inside.pop()

    monkeypatch.setattr(aio.Context, "_run", reader)  # before add_reader takes it
    s, lis, c = await _pair()

    @s.handler("echo")
    def echo(data):
        return data

    conn = await c.connect(client_uri(lis))
    resumed_in = []
    for i in range(50):
        assert await conn.call("echo", b"%d" % i) == b"%d" % i
        resumed_in.append(inside[-1] if inside else None)
    assert resumed_in == [c] * 50
    # an error answer resumes its task the same way
    with pytest.raises(RrpcError) as ei:
        await conn.call("no-such-method", b"")
    assert ei.value.code == roce_rpc.E_NO_METHOD
    assert inside == [c]
    c.close()
    s.close()


@pytest.mark.asyncio
async def test_a_task_that_closes_the_context_as_it_resumes_leaves_the_others_whole(caplog):
    """Answers settled by one progress resume their tasks one by one; the
    first closes the context: every other task still resumes exactly once
    (its answer, or E_CLOSED), and asyncio logs no callback error."""
    s, lis, c = await _pair()

    @s.handler("echo")
    def echo(data):
        return data

    conn = await c.connect(client_uri(lis))
    assert await conn.call("echo", b"warm") == b"warm"
    got = []

    async def one(i):
        try:
            got.append(await conn.call("echo", b"%d" % i))
        except RrpcError as e:
            got.append(e.code)
        c.close()

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(16))), 30)
        await asyncio.sleep(0)
    assert len(got) == 16
    answers = [g for g in got if isinstance(g, bytes)]
    assert answers and len(answers) == len(set(answers))
    assert set(answers) <= {b"%d" % i for i in range(16)}
    assert all(isinstance(g, bytes) or g == roce_rpc.E_CLOSED for g in got), got
    assert not [r for r in caplog.records if r.name == "asyncio"], caplog.records
    s.close()


async def _idle_runs(c, monkeypatch, seconds):
    """How many rrpc_ctx_progress the driver runs for @c over @seconds of
    an idle loop."""
    real = aio._progress
    runs = _count_progress(c, monkeypatch)
    await asyncio.sleep(seconds)
    monkeypatch.setattr(aio, "_progress", real)
    return len(runs)


@pytest.mark.asyncio
async def test_the_driver_polls_through_the_window_after_traffic_then_sleeps(monkeypatch):
    """After an answer the driver runs the library again at each turn of
    the loop while rrpc_ctx_timeout says 0 (the polling window), as a C
    client does; once the window has passed it sleeps on the fd: an idle
    context runs no pass.  With polling off (RRPC_BUSY_POLL_US=0, and on
    verbs RRPC_VERBS_BUSY_POLL_US=0, the completion queues' own window) it
    never polls."""
    s = aio.Context()
    lis = s.listen(listen_uri())

    @s.handler("echo")
    def echo(data):
        return data

    for window_us in (50000, 0):
        c = aio.Context(config={"RRPC_BUSY_POLL_US": window_us,
                                "RRPC_VERBS_BUSY_POLL_US": window_us})
        conn = await c.connect(client_uri(lis))
        assert await conn.call("echo", b"x") == b"x"
        during = await _idle_runs(c, monkeypatch, 0.03)  # within the 50 ms window
        await asyncio.sleep(0.1)
        after = await _idle_runs(c, monkeypatch, 0.1)
        if window_us:
            assert during >= 3, during
        else:
            assert during == 0, during
        assert after == 0, after  # idle: no keepalive is due for 5 s
        c.close()
    s.close()
