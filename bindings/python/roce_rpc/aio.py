"""asyncio, natively: a context driven by the running event loop.

    import roce_rpc.aio as aio

    async def main():
        async with aio.Context() as ctx:
            lis = ctx.listen("tcp://127.0.0.1:0")

            @ctx.handler("echo")
            async def echo(data):
                return data

            conn = await ctx.connect(lis.uri)
            assert await conn.call("echo", b"hi") == b"hi"

An aio.Context has no library thread.  The event loop watches the
context's own file descriptor (rrpc_ctx_fd) with loop.add_reader; the
library keeps its timers in that fd, so deadlines, keepalives and connect
timeouts fire on time with no timer of the loop's.  Every completion and
every handler runs on the event loop's thread, inside the one
rrpc_ctx_progress that each readiness of the fd runs.  No thread per
future, no call_soon_threadsafe on the way back: a call's answer settles
its future inside that progress, and once the progress returns the
driver resumes the awaiting task itself, in that same turn of the loop
(asyncio would resume it at the next turn: one more select, epoll_wait
and Handle per call).  A call allocates no cffi object: its callback
handle is reused, its method name encoded once, its bytes passed as they
are.  While the library polls after traffic (rrpc_ctx_timeout says 0:
its polling window, RRPC_BUSY_POLL_US and on verbs RRPC_VERBS_BUSY_POLL_US,
under its CPU budget) the driver runs again at the loop's next turn
instead of sleeping on the fd, as a C client following rrpc_ctx_timeout
does.

Handlers may be plain functions or `async def` coroutines (a task on the
loop answers when it returns).  A coroutine that raises, or returns
something that is not a buffer, fails the call with HANDLER_ERROR carrying
the exception's type and message, and is logged (logger "roce_rpc").

A request keeps its credit until its handler's task answers it, so a
caller holds at most its credit window of unfinished tasks per class; the
tasks a process holds are bounded too (set_task_limits: per connection,
and for the whole process, a busy connection held to its share of it), and
a request beyond them is refused at once with E_LIMIT.  task_counts() and
Context.tasks_held say how many there are.

A handler that raises KeyboardInterrupt or SystemExit stops the program as
it would anywhere in asyncio: its caller is answered (HANDLER_ERROR, "the
server is stopping: ..."), the exception is logged at ERROR, and it is
raised out of the event loop, so asyncio.run() raises it in the host.

Cancelling an awaited operation (task.cancel(), asyncio.timeout,
asyncio.wait_for) cancels it for the caller: the awaiting task gets
CancelledError at once and the operation's completion is never delivered
later.  A cancelled call is also cancelled in the library
(rrpc_call_cancel): it stops waiting for its answer and its deadline at
once.  What is already on the wire cannot be recalled: a cancelled call may
still run at the server (its answer is dropped when it arrives) and a
cancelled WRITE may still land; the buffers involved stay referenced until
the library is done with them.

The blocking methods of the objects underneath (Conn.call, Context.connect,
...) raise RrpcError(E_DEADLOCK) on an aio context: they would block the
loop that has to run for them to finish.
"""
import asyncio
import collections
import logging
import types
from typing import (Any, Callable, List, NamedTuple, Optional, Tuple, Type, TypeVar,
                    TYPE_CHECKING)

from ._rrpc import ffi, lib
from . import _core
from ._core import RrpcError, _closed_error, _Buffer, _QoS, _TokenLike

if TYPE_CHECKING:
    from .tensor import KvPool

__all__ = ["Context", "Conn", "TensorServer", "TaskCounts", "set_task_limits", "task_counts"]

_log = logging.getLogger("roce_rpc")
_progress = lib.rrpc_ctx_progress
_timeout = lib.rrpc_ctx_timeout
_rrpc_call = lib.rrpc_call
_registry = _core._registry
_registry_pop = _registry.pop

# ---- the per-call path ------------------------------------------------------

_DEFAULT_CALL_OPTS = _core._DEFAULT_CALL_OPTS
_CALL_DONE = ffi.addressof(lib, "rrpcpy_aio_call_done")  # call_wait.h: _rrpc_py_aio_done
_methods = _core._methods  # method name -> its bytes, encoded once
_method_bytes = _core._method_bytes
_Reply = _core.Reply
_new_bytes = bytes.__new__  # Reply without its Python __new__ (no metadata: the class's)
_meta_read = _core._meta_read
_buffer = ffi.buffer
# (key, user pointer) handles of finished calls, for the next ones: a handle
# goes back only once the library has run its call's completion, which it
# runs exactly once (an answer, an error, rrpc_call_cancel), so a late
# callback cannot find another call under a reused key.
_handles = []
_HANDLES_MAX = 4096
_Future = asyncio.Future
@ffi.def_extern()
def _rrpc_py_aio_done(key: int, status: int, n: int, res: Any) -> None:
    """The completion of an aio call (rrpcpy_aio_call_done), inside
    rrpc_ctx_progress on the loop's thread (or inside rrpc_call_cancel, or
    the close): settles the future right here.  Inside the driver's
    progress, the future's one done callback (its task's wakeup, as a rule)
    is taken off it first, and the driver runs it once the progress has
    returned (Context._run): the task resumes in this turn of the event
    loop, not at the next one (no second turn of the loop: no select,
    epoll_wait or Handle per call).  Anywhere else, or with callbacks other
    than one, asyncio's way (call_soon)."""
    e = _registry_pop(key, None)
    if e is None:
        return
    fut, core, method, h = e
    core.pending.pop(key, None)
    if len(_handles) < _HANDLES_MAX:
        _handles.append(h)
    if fut.done():  # cancelled by its task, or failed by a close
        return
    try:
        if core.driving and not core.closing:  # (a close's completions: asyncio's way)
            cbs = fut._callbacks
            if cbs and len(cbs) == 1:
                cb = cbs[0]
                fut.remove_done_callback(cb[0])
                core.woken.append((fut, cb))
        if status == 0:
            r = _new_bytes(_Reply, _buffer(res.data, n)) if n else _new_bytes(_Reply)
            if res.nmeta:
                r.metadata = _meta_read(res.meta, res.nmeta)
            fut.set_result(r)
        else:
            fut.set_exception(_core._call_error(status, _core._s(res.message), method,
                                                _meta_read(res.meta, res.nmeta)))
    except Exception:  # pragma: no cover
        _log.exception("roce_rpc: completion callback failed")


_A = TypeVar("_A", bound="_AsyncWith")
_F = TypeVar("_F", bound=Callable[..., Any])


class TaskCounts(NamedTuple):
    """The async def handler tasks of this process (task_counts())."""

    held: int            #: tasks running now, in every aio context
    refused: int         #: requests refused E_LIMIT by the limits since the start
    process_limit: int   #: set_task_limits(process=...)
    per_conn_limit: int  #: set_task_limits(per_conn=...)


def set_task_limits(*, process: Optional[int] = None, per_conn: Optional[int] = None) -> None:
    """Bounds the async def handler tasks this process holds.

    Args:
        process: tasks held at once by every aio context of the process
            (default 1024); once half of them are in use, a connection gets
            no more than an equal part among the connections holding tasks.
        per_conn: tasks held at once for one connection (default 64; its
            credit window bounds it too).

    A request beyond them is refused at once: its caller gets E_LIMIT and
    a message saying which limit.  Raises ValueError for a limit below 1.
    """
    for name, v in (("process", process), ("per_conn", per_conn)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError("set_task_limits: %s must be an int >= 1, not %r" % (name, v))
    with _core._tasks.lock:
        if process is not None:
            _core._tasks.process = process
        if per_conn is not None:
            _core._tasks.per_conn = per_conn


def task_counts() -> TaskCounts:
    """How many async def handler tasks the process holds, and its limits."""
    t = _core._tasks
    with t.lock:
        return TaskCounts(t.held, t.refused, t.process, t.per_conn)


def __dir__() -> List[str]:
    return sorted(__all__)


class _AsyncWith:
    """`async with obj:` closes obj at the end of the block."""

    async def __aenter__(self: _A) -> _A:
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException],
                        tb: Optional[types.TracebackType]) -> bool:
        self.close()
        return False

    def close(self) -> None:
        raise NotImplementedError


class Context(_AsyncWith, _core._Closable):  # also `with`, and closed when collected
    """A context driven by the running asyncio loop (create it inside a
    coroutine).  Arguments as roce_rpc.Context: log, log_level, classes,
    config.  `async with` closes it; so does close()."""

    def __init__(self, *, log: Any = None, log_level: int = 6,
                 classes: Optional[Any] = None, config: Optional[Any] = None) -> None:
        self._loop = asyncio.get_running_loop()
        self.sync = _core.Context(log=log, log_level=log_level, classes=classes,
                                  config=config, _driven=True)
        core = self._core = self.sync._core
        self._ptr = self.sync._ptr
        self._soon = None
        self._ms = ffi.new("int *")  # rrpc_ctx_timeout's answer
        self._waking = False
        self._notes = collections.deque(maxlen=1 << 16)
        self._note_waiters = collections.deque()
        core.aio = self._loop
        core.kick = self._kick
        core.flush = lambda: self._run(False)
        core.notify_fn = self._on_note
        self._user_notify = None
        fd = lib.rrpc_ctx_fd(self._ptr)
        if fd < 0:
            self.sync.close()
            raise RrpcError(fd, "rrpc_ctx_fd: %s" % _core.strerror(fd))
        self._fd = fd
        self._loop.add_reader(fd, self._run)
        self._kick()

    # -- the driver --
    # The context's fd alone says when to run: the library keeps its timers
    # (deadlines, keepalives, connect timeouts) in it and re-arms it after
    # every progress and every operation started outside the loop, and makes
    # it readable at once when work is pending.  So the loop needs no timer
    # of its own, and starting an operation needs no extra pass: a call's
    # request is written inside rrpc_call, and its answer makes the fd
    # readable.
    def _kick(self) -> None:
        """Runs the library's loop at the next turn of the event loop."""
        if self._soon is None and not self._core.closed and not self._core.closing:
            self._soon = self._loop.call_soon(self._run)

    def _run(self, wake: bool = True) -> None:
        """The fd's reader (and _kick's callback): one rrpc_ctx_progress,
        however many completions are ready; each completion settles its
        future right there, and once the progress has returned, the tasks
        that await those futures resume here, in this turn of the event
        loop (_rrpc_py_aio_done).  wake=False (core.flush, from a
        task, which cannot run another task): they resume at the loop's
        next turn."""
        self._soon = None
        core = self._core
        if core.driving or core.closing or core.closed:
            return
        core.driving = True
        try:
            r = _progress(self._ptr, 0)
            if r and r != lib.RRPC_E_DEADLOCK:
                _log.warning("roce_rpc.aio: rrpc_ctx_progress: %s", _core.strerror(r))
            if core.stop_exc is not None:
                stop, core.stop_exc = core.stop_exc, None
                _progress(self._ptr, 0)  # the caller's answer goes out first
                self._kick()  # should the host's loop run on, so does this context
                raise stop  # a handler's KeyboardInterrupt/SystemExit, as Python would
        finally:
            core.driving = False
        if core.woken and not self._waking:
            if wake:
                self._wake()
            else:
                self._kick()
        # The library polls after traffic (under its governor: a window
        # after the last frame or completion, a CPU budget, a stop when
        # the thread does not get its CPU) and says so with a zero timeout:
        # the loop runs again at its next turn instead of sleeping on the
        # fd, as a C client that follows rrpc_ctx_timeout would.  The turn still
        # selects, with a zero timeout, so other readers are served.
        if (self._soon is None and not core.closed and not core.closing
                and _timeout(self._ptr, self._ms) == 0 and self._ms[0] == 0):
            self._soon = self._loop.call_soon(self._run)

    def _wake(self) -> None:
        """Runs the done callbacks that the last progress took off the
        futures it settled (the awaiting tasks' wakeups), each in its own
        context, as the loop would have; should one raise out
        (KeyboardInterrupt, SystemExit), the rest run at the next turn."""
        woken = self._core.woken
        self._waking = True
        try:
            while woken:
                fut, (fn, ctx) = woken.popleft()
                try:
                    ctx.run(fn, fut)
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:  # as asyncio's Handle does
                    self._loop.call_exception_handler({
                        "message": "Exception in callback %r" % (fn,),
                        "exception": exc, "future": fut})
        finally:
            self._waking = False
            if woken:
                self._kick()

    # -- lifetime --
    @property
    def closed(self) -> bool:
        return self.sync.closed

    def close(self) -> None:
        """Closes the context (see roce_rpc.Context.close); pending
        operations fail with E_CLOSED.  Idempotent."""
        core = self._core
        if core.closing or core.closed:
            return
        try:
            self._loop.remove_reader(self._fd)
        except Exception:  # the loop is already closed
            pass
        if self._soon is not None:
            self._soon.cancel()
        self._soon = None
        for t in list(core.tasks):
            t.cancel()
        core.kick = None
        self.sync.close()
        for fut, (fn, ctx) in core.woken:  # settled, not yet resumed: at the next turn
            try:
                self._loop.call_soon(fn, fut, context=ctx)
            except RuntimeError:  # the loop is already closed
                pass
        core.woken.clear()
        while self._note_waiters:
            w = self._note_waiters.popleft()
            if not w.done():
                w.set_exception(_closed_error("context"))

    # -- server side --
    def listen(self, uri: str) -> "_core.Listener":
        """Listens on uri (tcp://HOST:PORT, rdma://HOST:PORT, inproc://NAME)."""
        lis = self.sync.listen(uri)
        self._kick()
        return lis

    @property
    def tasks_held(self) -> int:
        """The async def handler tasks of this context running now."""
        return len(self._core.tasks)

    @property
    def tasks_refused(self) -> int:
        """Requests of this context refused E_LIMIT by the task limits."""
        return self._core.tasks_refused

    def stats(self) -> "dict[str, Any]":
        """roce_rpc.Context.stats(), and "handler_tasks": {"held",
        "refused"} of this context (the process's: task_counts())."""
        st = self.sync.stats()
        st["handler_tasks"] = {"held": self.tasks_held, "refused": self.tasks_refused}
        return st

    def handler(self, method: str, *, request: bool = False) -> Callable[[_F], _F]:
        """Decorator, as roce_rpc.Context.handler; `async def` handlers too."""
        return self.sync.handler(method, request=request)

    def add_handler(self, method: str, fn: Callable[..., Any], *, request: bool = False) -> None:
        self.sync.add_handler(method, fn, request=request)

    def remove_handler(self, method: str) -> None:
        self.sync.remove_handler(method)

    def on_connect(self, fn: _F) -> _F:
        """Decorator: fn(conn) for every accepted or opened connection."""
        return self.sync.on_connect(fn)

    def on_disconnect(self, fn: _F) -> _F:
        """Decorator: fn(conn, reason) when a connection goes down."""
        return self.sync.on_disconnect(fn)

    def on_notify(self, fn: _F) -> _F:
        """Decorator: fn(conn, imm) for every notification (instead of
        wait_notify)."""
        self._user_notify = fn
        return fn

    def _on_note(self, conn: Any, imm: int) -> None:
        if self._user_notify is not None:
            self._user_notify(conn, imm)
            return
        while self._note_waiters:
            w = self._note_waiters.popleft()
            if not w.done():
                w.set_result(imm)
                return
        self._notes.append(imm)

    async def wait_notify(self, timeout: Optional[float] = None) -> int:
        """The oldest notification value; RrpcTimeoutError after timeout s."""
        if self._notes:
            return self._notes.popleft()
        if self.closed:
            raise _closed_error("context")
        w = self._loop.create_future()
        self._note_waiters.append(w)
        try:
            return await asyncio.wait_for(w, timeout)
        except asyncio.TimeoutError:
            raise RrpcError(lib.RRPC_E_DEADLINE,
                            "no notification within %s s" % timeout) from None

    # -- client side --
    async def connect(self, uri: str, *, timeout: float = 10.0,
                      ticket: Optional[_Buffer] = None, src: Optional[str] = None) -> "Conn":
        """Connects to uri; returns once the connection is up.  Raises as
        roce_rpc.Context.connect; cancelling closes the half-made connection."""
        c, fut = self.sync.connect_async(uri, timeout=timeout, ticket=ticket, src=src)
        try:
            await fut  # of this loop: the context's futures are (_Core.future)
        except BaseException:
            c.close()
            raise
        c._up = True
        return Conn(self, c)

    async def connect_service(self, broker: Any, service: str, *,
                              timeout: float = 10.0) -> "Conn":
        """Connects to service by name through broker (a
        roce_rpc.broker.Broker): the lookup runs on a worker thread (it is a
        TLS round trip to rrpcd), then each endpoint in turn is connected on
        this loop with its instance's ticket, a fresh lookup before reusing
        an instance whose ticket was already presented.  Raises the last
        attempt's error (RrpcPermissionError when tickets are refused)."""
        loop = self._loop
        info = await loop.run_in_executor(None, broker.lookup, service)
        used, last = set(), None
        for k in range(len(info.endpoints)):
            ep = info.endpoints[k]
            if ep.instance in used:  # a ticket is accepted once: get a fresh one
                info = await loop.run_in_executor(None, broker.lookup, service)
                used.clear()
                if k >= len(info.endpoints):
                    break
                ep = info.endpoints[k]
            used.add(ep.instance)
            try:
                return await self.connect(ep.uri, timeout=timeout,
                                          ticket=info.instances[ep.instance].ticket)
            except RrpcError as e:
                last = e
        raise last if last is not None else RrpcError(-2, "service %r has no endpoint"
                                                      % service)

    # -- memory, tensors, KV pages: no waiting, the same objects --
    def register(self, obj: _Buffer, access: "int | str" = _core.REMOTE_READ | _core.REMOTE_WRITE
                 ) -> _core.Region:
        """Registers obj's memory (see roce_rpc.Context.register)."""
        return self.sync.register(obj, access)

    register_memory = register

    def kv_pool(self, array: Any, page_size: Optional[int] = None) -> "KvPool":
        """A KV-cache page pool over array (see roce_rpc.Context.kv_pool)."""
        return self.sync.kv_pool(array, page_size)

    def serve_tensors(self, alloc: Optional[Callable[..., Any]] = None,
                      on_tensor: Optional[Callable[..., Any]] = None, *,
                      max_bytes: Optional[int] = None, pool: Any = None,
                      keep_bytes: Optional[int] = None) -> "TensorServer":
        """As roce_rpc.Context.serve_tensors; receive() is awaited."""
        return TensorServer(self, self.sync.serve_tensors(alloc, on_tensor, max_bytes=max_bytes,
                                                          pool=pool, keep_bytes=keep_bytes))

    def __repr__(self) -> str:
        return "<roce_rpc.aio.Context%s>" % (" closed" if self.closed else "")


class Conn(_AsyncWith):  # not closed when collected: .sync may live on
    """A connection of an aio.Context: every operation is awaited.  The
    synchronous Conn underneath is .sync (its properties are reachable
    here too: uri, transport, peer, ...)."""

    def __init__(self, actx: Context, conn: _core.Conn) -> None:
        self._actx = actx
        self._loop = actx._loop
        self._core = conn._core
        self.sync = conn

    def __getattr__(self, name: str) -> Any:
        if name == "sync":
            raise AttributeError(name)
        return getattr(self.sync, name)

    async def call(self, method: str, data: Optional[_Buffer] = b"", *,
                   qos: Optional[_QoS] = None, timeout: Optional[float] = None,
                   metadata: Optional[_core.Metadata] = None) -> bytes:
        """Calls method; the response bytes (a roce_rpc.Reply, with the
        response's .metadata), or RrpcError (a handler's code > 0,
        RrpcTimeoutError at the deadline, ...).  metadata: the request's
        (see roce_rpc.Metadata).  Cancelling the awaiting task cancels the
        call in the library (rrpc_call_cancel): it no longer waits for its
        answer or its deadline."""
        sync = self.sync
        core = self._core
        if sync._closed or core.closing or core.closed:
            with core.use(sync, "connection"):  # raises the error that says which
                pass
        keep = None
        if metadata:
            opts, keep = _core._call_opts_meta(_core._qos(qos, lib.RRPC_CLASS_LOW_LATENCY),
                                               _core._deadline_ms(timeout), metadata)
        elif qos is None and timeout is None:
            opts = _DEFAULT_CALL_OPTS
        else:
            opts = _core._call_opts(_core._qos(qos, lib.RRPC_CLASS_LOW_LATENCY),
                                    _core._deadline_ms(timeout))
        mb = _methods.get(method)
        if mb is None:
            mb = _method_bytes(method)
        if data.__class__ is bytes:  # passed as it is: rrpc_call copies it
            n = len(data)
        else:
            data, n = _core._cbuf(data)
        fut = _Future(loop=self._loop)
        try:
            h = _handles.pop()
        except IndexError:
            k = next(_core._keys)
            h = (k, ffi.cast("void *", k))
        key = h[0]
        _registry[key] = (fut, core, method, h)
        core.pending[key] = fut
        r = _rrpc_call(sync._ptr, mb, data, n, opts, _CALL_DONE, h[1])
        del keep  # rrpc_call copied the metadata
        if r:
            _registry.pop(key, None)
            core.pending.pop(key, None)
            _handles.append(h)
            raise _core._error(r, core.ptr, "call %r" % method)
        try:
            return await fut
        except asyncio.CancelledError:
            e = _registry.get(key)
            if (e is not None and e[0] is fut and not sync._closed and not core.closing
                    and not core.closed):
                lib.rrpc_call_cancel(sync._ptr, _CALL_DONE, h[1])  # runs the completion now
            raise

    async def write(self, local: _core.Region, local_offset: int, remote: _TokenLike,
                    remote_offset: int = 0, length: Optional[int] = None, *,
                    qos: Optional[_QoS] = None, notify: Optional[int] = None) -> None:
        """One-sided WRITE (see roce_rpc.Conn.write_async); notify: write-with-notify."""
        await self.sync.write_async(local, local_offset, remote, remote_offset, length,
                                    qos=qos, notify=notify)

    async def read(self, local: _core.Region, local_offset: int, remote: _TokenLike,
                   remote_offset: int = 0, length: Optional[int] = None, *,
                   qos: Optional[_QoS] = None) -> None:
        """One-sided READ into Region local."""
        await self.sync.read_async(local, local_offset, remote, remote_offset, length, qos=qos)

    async def send_tensor(self, name: str, array: Any, *, qos: Optional[_QoS] = None) -> None:
        """Sends array as tensor name; returns when the receiver has it all."""
        await self.sync.send_tensor_async(name, array, qos=qos)

    async def kv_transfer(self, src: Any, dst: Any, pairs: Any, *, qos: Optional[_QoS] = None,
                          notify: Optional[int] = None) -> int:
        """Copies KV pages (see roce_rpc.Conn.kv_transfer); the WRITE count."""
        return await self.sync.kv_transfer_async(src, dst, pairs, qos=qos, notify=notify)

    def close(self) -> None:
        self.sync.close()

    def __repr__(self) -> str:
        return repr(self.sync).replace("roce_rpc.Conn", "roce_rpc.aio.Conn")


class TensorServer:
    """A tensor server of an aio.Context: `name, array = await srv.receive()`."""

    def __init__(self, actx: Context, srv: Any) -> None:
        self._actx = actx
        self.sync = srv
        self._event = asyncio.Event()
        srv._st.wakeup = self._event.set  # runs on the loop thread (driven)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sync, name)

    async def receive(self, timeout: Optional[float] = None) -> Tuple[str, Any]:
        """(name, array) of the next tensor; RrpcTimeoutError after timeout s."""
        loop = self._actx._loop
        end = None if timeout is None else loop.time() + timeout
        while True:
            self._event.clear()
            try:
                return self.sync.receive(timeout=0)
            except RrpcError as e:
                if e.code != lib.RRPC_E_DEADLINE:
                    raise
            left = None if end is None else end - loop.time()
            if left is not None and left <= 0:
                raise RrpcError(lib.RRPC_E_DEADLINE, "no tensor within %s s" % timeout)
            try:
                await asyncio.wait_for(self._event.wait(), left)
            except asyncio.TimeoutError:
                pass

    def close(self) -> None:
        self.sync.close()
