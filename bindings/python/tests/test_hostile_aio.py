"""A hostile peer against async def handlers (issue #28, point 7): a client
that floods a slow handler over real tcp must not make the server hold a
task per request, and a handler raising KeyboardInterrupt or SystemExit
must stop the host the way Python would while its caller is told why."""
import asyncio
import os
import subprocess
import sys
import threading
import time

import pytest

import roce_rpc
import roce_rpc.aio as aio
from roce_rpc import RrpcError

from conftest import client_uri, listen_uri

SLOW_CALLS = 2000


class AioServer:
    """An aio.Context serving "slow" (an async def that waits for release),
    "count" (a plain def: the tasks held) and "release", on its own thread
    and event loop."""

    def __init__(self):
        self.active = 0  # "slow" handlers running now
        self.ready = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self.thread.start()
        assert self.ready.wait(10)

    async def _main(self):
        self.loop = asyncio.get_running_loop()
        self.done = asyncio.Event()
        release = asyncio.Event()
        async with aio.Context() as s:
            self.ctx = s
            self.lis = s.listen(listen_uri())

            @s.handler("slow")
            async def slow(data):
                self.active += 1
                try:
                    await release.wait()
                finally:
                    self.active -= 1
                return data

            @s.handler("count")
            def count(data):
                return b"%d" % self.active

            @s.handler("release")
            def rel(data):
                release.set()
                return b""

            self.ready.set()
            await self.done.wait()

    def stop(self):
        self.loop.call_soon_threadsafe(self.done.set)
        self.thread.join(10)


@pytest.fixture
def limits():
    """Restores the process's task limits after the test."""
    old = aio.task_counts()
    yield aio.set_task_limits
    aio.set_task_limits(process=old.process_limit, per_conn=old.per_conn_limit)


def _flood(conn, n):
    return [conn.call_async("slow", b"%d" % i, timeout=60) for i in range(n)]


def _outcomes(futs, timeout=60):
    ok, refused = 0, []
    for f in futs:
        try:
            f.result(timeout)
            ok += 1
        except RrpcError as e:
            assert e.code == roce_rpc.E_LIMIT, e
            refused.append(e)
    return ok, refused


def test_a_flood_of_slow_async_calls_holds_at_most_the_credit_window_of_tasks():
    # Before: the credit came back when a task was made, so 2,000 calls on
    # one connection made 2,000 tasks (4,001 in the run).  Now the
    # credit window (64 for low_latency) bounds them, below the default
    # per-connection limit: none is refused, all are served in the end.
    srv = AioServer()
    try:
        with roce_rpc.Context() as c:
            flood = c.connect(client_uri(srv.lis))
            probe = c.connect(client_uri(srv.lis))
            window = srv.ctx.sync.get_class("low_latency")[2]
            futs = _flood(flood, SLOW_CALLS)
            peak = 0
            for _ in range(10):
                time.sleep(0.1)
                peak = max(peak, int(probe.call("count", qos="control", timeout=10)))
            assert 0 < peak <= window, "the server held %d tasks for a window of %d" % (
                peak, window)
            probe.call("release", qos="control", timeout=10)
            ok, refused = _outcomes(futs)
            assert (ok, refused) == (SLOW_CALLS, [])
            assert int(probe.call("count", qos="control", timeout=10)) == 0
    finally:
        srv.stop()


def test_tasks_beyond_a_connections_limit_are_refused_with_e_limit(limits):
    limits(process=100000, per_conn=8)
    srv = AioServer()
    try:
        with roce_rpc.Context() as c:
            flood = c.connect(client_uri(srv.lis))
            probe = c.connect(client_uri(srv.lis))
            refused0 = aio.task_counts().refused
            futs = _flood(flood, 50)
            deadline = time.monotonic() + 20
            while sum(f.done() for f in futs) < 42 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert int(probe.call("count", qos="control", timeout=10)) == 8
            assert srv.ctx.tasks_held == 8 and aio.task_counts().held == 8
            probe.call("release", qos="control", timeout=10)
            ok, refused = _outcomes(futs)
            assert ok == 8 and len(refused) == 42
            assert "per_conn=8" in refused[0].message and "try again later" in refused[0].message
            assert aio.task_counts().refused - refused0 == 42
            # a task lets go of its count once it has ended, just after its
            # answer went out: the caller may see the answer first
            deadline = time.monotonic() + 10
            while srv.ctx.tasks_held and time.monotonic() < deadline:
                time.sleep(0.01)
            assert srv.ctx.stats()["handler_tasks"] == {"held": 0, "refused": 42}
    finally:
        srv.stop()


def test_a_flooder_keeps_to_its_share_of_the_process_budget_and_a_newcomer_gets_in(limits):
    limits(process=16, per_conn=64)
    srv = AioServer()
    try:
        with roce_rpc.Context() as c:
            flood = c.connect(client_uri(srv.lis))
            other = c.connect(client_uri(srv.lis))
            probe = c.connect(client_uri(srv.lis))
            futs = _flood(flood, 40)
            deadline = time.monotonic() + 20
            while sum(f.done() for f in futs) < 32 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert int(probe.call("count", qos="control", timeout=10)) == 8  # 16 // (1 + 1)
            mine = _flood(other, 4)  # a connection that held none gets its tasks
            deadline = time.monotonic() + 10
            while srv.ctx.tasks_held < 12 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert srv.ctx.tasks_held == 12
            probe.call("release", qos="control", timeout=10)
            assert _outcomes(mine) == (4, [])
            ok, refused = _outcomes(futs)
            assert ok == 8 and len(refused) == 32
            assert "share" in refused[0].message
    finally:
        srv.stop()


def test_set_task_limits_refuses_nonsense():
    with pytest.raises(ValueError, match="per_conn must be an int >= 1"):
        aio.set_task_limits(per_conn=0)


# ---- KeyboardInterrupt and SystemExit in a handler --------------------------

_SERVER = r'''
import asyncio, logging, sys, time
import roce_rpc, roce_rpc.aio as aio
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
mode, kind = sys.argv[1], sys.argv[2]
exc = {"kbd": KeyboardInterrupt, "exit": lambda: SystemExit(3)}[kind]

def port(lis):
    print(lis.port, flush=True)

if mode.startswith("aio"):
    async def main():
        async with aio.Context() as s:
            lis = s.listen("tcp://127.0.0.1:0")
            if mode == "aio-async":
                @s.handler("stop")
                async def stop(data):
                    await asyncio.sleep(0)
                    raise exc()
            else:
                @s.handler("stop")
                def stop(data):
                    raise exc()
            s.add_handler("ping", lambda d: b"pong")
            port(lis)
            await asyncio.sleep(30)
    asyncio.run(main())
else:
    with roce_rpc.Context() as s:
        lis = s.listen("tcp://127.0.0.1:0")
        @s.handler("stop")
        def stop(data):
            raise exc()
        s.add_handler("ping", lambda d: b"pong")
        port(lis)
        end = time.monotonic() + 30
        while time.monotonic() < end:
            time.sleep(0.02)
print("main loop ended", flush=True)
'''


@pytest.mark.parametrize("mode,kind,returncode", [
    ("aio-async", "exit", 3),           # asyncio.run() raises SystemExit(3)
    ("aio-async", "kbd", -2),           # ... KeyboardInterrupt: -SIGINT, as Ctrl-C
    ("aio-plain", "exit", 3),           # a plain def on aio: the same
    ("aio-plain", "kbd", -2),
    ("thread", "kbd", -2),              # thread mode: to the main thread
    ("thread", "exit", None),           # thread mode: no process ends (logged)
])
def test_keyboardinterrupt_and_systemexit_in_a_handler(tmp_path, mode, kind, returncode):
    script = tmp_path / "server.py"
    script.write_text(_SERVER)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(roce_rpc.__file__)))
    p = subprocess.Popen([sys.executable, "-s", str(script), mode, kind], env=env,
                         cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        port = int(p.stdout.readline())
        with roce_rpc.Context() as c:
            conn = c.connect("tcp://127.0.0.1:%d" % port)
            with pytest.raises(RrpcError) as ei:
                conn.call("stop", timeout=10)
            e = ei.value
            name = "KeyboardInterrupt" if kind == "kbd" else "SystemExit"
            assert e.code == roce_rpc.HANDLER_ERROR
            assert "the server is stopping" in e.message and name in e.message, e.message
            if returncode is None:
                assert conn.call("ping", timeout=10) == b"pong"  # still serving
                p.terminate()
        out, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert "handler 'stop' raised %s" % name in err, err
    if returncode is not None:
        assert p.returncode == returncode, (p.returncode, err)
        assert "main loop ended" not in out
