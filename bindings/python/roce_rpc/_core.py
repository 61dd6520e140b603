"""The Python face of libroce_rpc: contexts, connections, RPC, regions.

Threading model: every Context runs its loop on the library's own thread
(rrpc_ctx_start_thread).  Handlers and completion callbacks run on that
thread and take the GIL; every C call releases it (cffi does that in API
mode).  Blocking calls wait on a concurrent.futures.Future, so they can be
interrupted and never hold a library lock.

Lifetimes: a child (Conn, Listener, Region, KvPool, TensorServer) holds a
strong reference to its Context; the Context only knows its children weakly,
so dropping them in any order is safe.  Every use of a C handle is counted
(_Core.use); closing a handle that another thread is using at that moment is
deferred until that use ends, and Context.close() waits for every use to end
before it destroys the C context (which frees what is still open).
"""
import _thread
import asyncio
import atexit
import collections
import concurrent.futures
import enum
import errno
import itertools
import logging
import math
import operator
import os
import threading
import time
import traceback
import types
import weakref
from typing import (Any, Callable, Dict, List, Mapping, Optional, Tuple, Type, TypeVar, Union,
                    get_args, Literal, TYPE_CHECKING)

from ._rrpc import ffi, lib

if TYPE_CHECKING:  # the tensor module needs numpy: imported when used
    from .tensor import KvPool, ReceivePool, TensorServer

__all__ = ["Context", "Conn", "Listener", "Region", "Grant", "Request", "Token",
           "RrpcError", "RpcError", "RrpcTimeoutError", "RrpcConnectionError",
           "RrpcConnectionRefusedError", "RrpcPermissionError", "RrpcValueError",
           "ErrorCode", "QosName", "QosClass",
           "strerror", "err_name", "HANDLER_ERROR", "NO_DEADLINE", "TOKEN_SIZE",
           "REMOTE_READ", "REMOTE_WRITE", "CLASS_CONTROL", "CLASS_LOW_LATENCY", "CLASS_BULK",
           "CLASS_BACKGROUND",
           "E_PROTO", "E_VERSION", "E_NO_METHOD", "E_BAD_CLASS", "E_TOO_BIG", "E_ACCESS",
           "E_CONN_LOST", "E_DEADLINE", "E_NO_DEVICE", "E_URI", "E_CLOSED", "E_CREDIT",
           "E_DEADLOCK", "E_ARGS", "E_TRANSPORT", "E_REGION", "E_TICKET", "E_LIMIT",
           "E_UNKNOWN_HOST", "E_CANCELLED", "E_GRANT", "E_METADATA", "Reply", "Metadata"]

_Buffer = Any  # bytes, bytearray, memoryview, a numpy array: the buffer protocol
# The QoS class names rrpc_class_from_name knows: a type checker refuses any
# other string (qos="bluk"), and so does _qos() at run time (ValueError).
QosName = Literal["control", "low_latency", "bulk", "background"]
_QoS = Union[int, QosName]  # a class number (CLASS_*) or name ("low_latency")
QosClass = _QoS
_TokenLike = Union["Token", bytes]
_F = TypeVar("_F", bound=Callable[..., Any])
_C = TypeVar("_C", bound="_Closable")

log = logging.getLogger("roce_rpc")

# ---- constants --------------------------------------------------------------

class ErrorCode(enum.IntEnum):
    """The library's own error codes (include/roce_rpc/error.h, RRPC_E_*).

    An ``int``: ``e.code == ErrorCode.DEADLINE`` and ``e.code ==
    E_DEADLINE`` both hold.  Negated errno values and a handler's positive
    codes are plain ints.  The values are checked against the C library
    when the package is imported.
    """

    PROTO = -1000
    VERSION = -1001
    NO_METHOD = -1002
    BAD_CLASS = -1003
    TOO_BIG = -1004
    ACCESS = -1005
    CONN_LOST = -1006
    DEADLINE = -1007
    NO_DEVICE = -1008
    URI = -1009
    CLOSED = -1010
    CREDIT = -1012
    DEADLOCK = -1013
    ARGS = -1014
    TRANSPORT = -1015
    REGION = -1016
    TICKET = -1017
    LIMIT = -1018
    UNKNOWN_HOST = -1019
    CANCELLED = -1020
    GRANT = -1021
    METADATA = -1022


for _e in ErrorCode:
    if getattr(lib, "RRPC_E_" + _e.name) != _e.value:  # pragma: no cover
        raise ImportError("roce_rpc: ErrorCode.%s is %d but the library's RRPC_E_%s is %d: "
                          "the package and its extension were built from different sources"
                          % (_e.name, _e.value, _e.name, getattr(lib, "RRPC_E_" + _e.name)))
del _e

# The old names of the codes, each the enum member itself.
E_PROTO = ErrorCode.PROTO
E_VERSION = ErrorCode.VERSION
E_NO_METHOD = ErrorCode.NO_METHOD
E_BAD_CLASS = ErrorCode.BAD_CLASS
E_TOO_BIG = ErrorCode.TOO_BIG
E_ACCESS = ErrorCode.ACCESS
E_CONN_LOST = ErrorCode.CONN_LOST
E_DEADLINE = ErrorCode.DEADLINE
E_NO_DEVICE = ErrorCode.NO_DEVICE
E_URI = ErrorCode.URI
E_CLOSED = ErrorCode.CLOSED
E_CREDIT = ErrorCode.CREDIT
E_DEADLOCK = ErrorCode.DEADLOCK
E_ARGS = ErrorCode.ARGS
E_TRANSPORT = ErrorCode.TRANSPORT
E_REGION = ErrorCode.REGION
E_TICKET = ErrorCode.TICKET
E_LIMIT = ErrorCode.LIMIT
E_UNKNOWN_HOST = ErrorCode.UNKNOWN_HOST
E_CANCELLED = ErrorCode.CANCELLED
E_GRANT = ErrorCode.GRANT
E_METADATA = ErrorCode.METADATA

CLASS_CONTROL: int = lib.RRPC_CLASS_CONTROL
CLASS_LOW_LATENCY: int = lib.RRPC_CLASS_LOW_LATENCY
CLASS_BULK: int = lib.RRPC_CLASS_BULK
CLASS_BACKGROUND: int = lib.RRPC_CLASS_BACKGROUND

REMOTE_READ: int = lib.RRPC_ACCESS_REMOTE_READ
REMOTE_WRITE: int = lib.RRPC_ACCESS_REMOTE_WRITE
TOKEN_SIZE: int = lib.RRPC_TOKEN_SIZE

NO_DEADLINE: float = math.inf

# The code a call fails with when its Python handler raised anything but an
# RrpcError(code > 0), or returned something that is not a buffer.
HANDLER_ERROR: int = 1


def _s(p):
    return ffi.string(p).decode("utf-8", "replace") if p != ffi.NULL else ""


def strerror(code: int) -> str:
    """A one-line description of any code (rrpc_strerror)."""
    return _s(lib.rrpc_strerror(int(code)))


def err_name(code: int) -> str:
    """The symbolic name of a code, e.g. 'RRPC_E_DEADLINE' or 'ENOMEM'."""
    return _s(lib.rrpc_err_name(int(code)))


# ---- errors -----------------------------------------------------------------

# The metadata of a reply or error that has none.
_NO_META: Mapping[str, str] = types.MappingProxyType({})


class RrpcError(Exception):
    """An error from the library or from a remote handler.

    code     0 < code: the handler's application code; code < 0: a library
             code (E_DEADLINE, E_NO_METHOD, ...) or a negated errno
    name     rrpc_err_name(code)
    message  the handler's message, or the library's detail (for a call,
             'call "METHOD" failed: ...', as rrpc_call_sync says it)

    RrpcError(code, message) gives the subclass that matches code, and
    the subclasses are also Python's built-in exceptions (like OSError(
    errno.ENOENT, ...) gives a FileNotFoundError):

      RrpcTimeoutError            TimeoutError            E_DEADLINE, -ETIMEDOUT
      RrpcConnectionError         ConnectionError         E_CONN_LOST, -ECONNRESET,
                                                          -ECONNABORTED, -EPIPE, ...
      RrpcConnectionRefusedError  ConnectionRefusedError  -ECONNREFUSED
      RrpcPermissionError         PermissionError         E_TICKET, E_ACCESS, -EACCES,
                                                          -EPERM
      RrpcValueError              ValueError              E_ARGS, E_URI, E_BAD_CLASS,
                                                          E_REGION, -EINVAL

    The OSError ones carry the matching positive .errno (ETIMEDOUT, ...).

    metadata the failed call's response metadata, as a handler set it
             before it failed (Request.set_response_metadata): a read-only
             mapping of str to str like Reply.metadata, empty when none
             (and for errors that are not a call's)
    """

    _errno = None  # the OSError subclasses' errno when code is no errno
    metadata: Mapping[str, str] = _NO_META

    def __new__(cls, code: int = 0, message: str = "", *rest: Any) -> "RrpcError":
        if cls is RrpcError:
            cls = _ERROR_CLASSES.get(int(code), RrpcError)
        if issubclass(cls, OSError):
            code = int(code)
            eno = -code if -1000 < code < 0 else cls._errno
            return super().__new__(cls, eno, message or "")
        return super().__new__(cls, code, message)

    def __init__(self, code: int = 0, message: str = "") -> None:
        self.code: int = int(code)
        self.message: str = message or ""
        super().__init__(self.code, self.message)
        self.args = (self.code, self.message)

    def __reduce__(self):
        if self.metadata:
            return (_error_with_meta, (type(self), self.code, self.message, dict(self.metadata)))
        return (type(self), (self.code, self.message))

    @property
    def name(self) -> str:
        """rrpc_err_name(code): "RRPC_E_DEADLINE", "ENOMEM", ..."""
        return err_name(self.code)

    def __str__(self):
        if self.code > 0:
            return "application error %d: %s" % (self.code, self.message)
        desc = strerror(self.code)
        if self.message and self.message != desc:
            return "%s (%d): %s" % (self.name, self.code, self.message)
        return "%s (%d): %s" % (self.name, self.code, desc)


def _error_with_meta(cls, code, message, metadata):
    """An error of cls carrying a failed call's response metadata (also
    what unpickles one)."""
    e = cls(code, message)
    e.metadata = types.MappingProxyType(dict(metadata)) if metadata else _NO_META
    return e


class RrpcTimeoutError(RrpcError, TimeoutError):
    """A deadline passed: of a call, a connect, wait_notify(), receive()."""
    _errno = errno.ETIMEDOUT


class RrpcConnectionError(RrpcError, ConnectionError):
    """The connection was lost (or could not be made)."""
    _errno = errno.ECONNRESET


class RrpcConnectionRefusedError(RrpcConnectionError, ConnectionRefusedError):
    """Nobody listens at the address."""
    _errno = errno.ECONNREFUSED


class RrpcPermissionError(RrpcError, PermissionError):
    """A connection ticket was refused, or remote memory access denied."""
    _errno = errno.EACCES


class RrpcValueError(RrpcError, ValueError):
    """Bad arguments: a malformed URI, an unknown QoS class, bad msgpack
    arguments, memory outside its region, an invalid value."""


_ERROR_CLASSES = {}
for _cls, _codes in (
        (RrpcTimeoutError, (lib.RRPC_E_DEADLINE, -errno.ETIMEDOUT)),
        (RrpcConnectionError, (lib.RRPC_E_CONN_LOST, -errno.ECONNRESET, -errno.ECONNABORTED,
                               -errno.EPIPE, -errno.ENOTCONN, -errno.EHOSTUNREACH,
                               -errno.ENETUNREACH, lib.RRPC_E_UNKNOWN_HOST)),
        (RrpcConnectionRefusedError, (-errno.ECONNREFUSED,)),
        (RrpcPermissionError, (lib.RRPC_E_TICKET, lib.RRPC_E_ACCESS, -errno.EACCES,
                               -errno.EPERM)),
        (RrpcValueError, (lib.RRPC_E_ARGS, lib.RRPC_E_URI, lib.RRPC_E_BAD_CLASS,
                          lib.RRPC_E_REGION, -errno.EINVAL))):
    for _c in _codes:
        _ERROR_CLASSES[int(_c)] = _cls
del _cls, _codes, _c


RpcError = RrpcError  # the name a handler may prefer to raise


def _error(code, ctxptr=None, what=None):
    msg = ""
    if ctxptr is not None and ctxptr != ffi.NULL:
        msg = _s(lib.rrpc_ctx_last_error(ctxptr))
    if not msg:
        msg = strerror(code)
    if what:
        msg = "%s: %s" % (what, msg)
    return RrpcError(code, msg)


def _closed_error(what="object"):
    return RrpcError(lib.RRPC_E_CLOSED, "the %s is closed" % what)


_QOS_NAMES = get_args(QosName)


def _qos(qos, default):
    if qos is None:
        return default
    if isinstance(qos, str):
        r = lib.rrpc_class_from_name(qos.encode()) if qos in _QOS_NAMES else -1
        if r < 0:
            import difflib
            near = difflib.get_close_matches(qos, _QOS_NAMES, 1)
            raise RrpcError(lib.RRPC_E_BAD_CLASS, "unknown QoS class %r%s: use one of %s, or a "
                            "class number (CLASS_*)" % (qos, " (did you mean %r?)" % near[0]
                                                         if near else "",
                                                         ", ".join(_QOS_NAMES)))
        return r
    try:
        if isinstance(qos, bool):
            raise TypeError
        return operator.index(qos)
    except TypeError:
        raise TypeError("qos must be a class name (%s) or number, not %s"
                        % (", ".join(_QOS_NAMES), type(qos).__name__)) from None


def _deadline_ms(timeout):
    if timeout is None:
        return 0  # the context default (RRPC_DEADLINE_MS)
    if timeout == math.inf:
        return -1
    if timeout <= 0:
        raise ValueError("timeout must be > 0 seconds (or None, or math.inf)")
    return max(1, int(timeout * 1000))


_opts_cache = {}


#: Per-call metadata as given: keys are lowercase tokens (up to 16 entries,
#: keys up to 64 bytes, values up to 1 KiB, 4 KiB together); a str value
#: travels as UTF-8, a bytes value as it is.
Metadata = Mapping[str, Union[str, bytes]]


class Reply(bytes):
    """What Conn.call (and a call_async future) returns: the response bytes,
    with the response's metadata in .metadata (a read-only mapping of str
    to str, values decoded from UTF-8 with surrogateescape; empty when the
    handler set none)."""

    metadata: Mapping[str, str] = _NO_META  # the instance's, once it has any

    def __new__(cls, data: bytes = b"", metadata: Mapping[str, str] = _NO_META) -> "Reply":
        r = super().__new__(cls, data)
        if metadata is not _NO_META:
            r.metadata = metadata
        return r


def _meta_read(meta, n):
    """A read-only mapping of the n rrpc_meta entries at meta."""
    if not n:
        return _NO_META
    return types.MappingProxyType({
        ffi.string(meta[i].key).decode("ascii", "replace"):
            ffi.buffer(meta[i].value, meta[i].len)[:].decode("utf-8", "surrogateescape")
            if meta[i].len else ""
        for i in range(n)})


def _meta_c(metadata):
    """(rrpc_meta array, n, what keeps its strings alive) of a mapping; the
    library checks the bounds (RrpcError E_METADATA)."""
    if not metadata:
        return ffi.NULL, 0, None
    if not isinstance(metadata, Mapping):
        raise TypeError("metadata must be a mapping of str to str or bytes, not %s"
                        % type(metadata).__name__)
    n = len(metadata)
    arr = ffi.new("rrpc_meta[]", n)
    keep = [arr]
    for i, (k, v) in enumerate(metadata.items()):
        if not isinstance(k, str):
            raise TypeError("metadata keys are str, not %s" % type(k).__name__)
        if isinstance(v, str):
            v = v.encode("utf-8", "surrogateescape")
        elif not isinstance(v, (bytes, bytearray, memoryview)):
            raise TypeError("metadata value of %r is %s; give str or bytes"
                            % (k, type(v).__name__))
        kb = ffi.new("char[]", k.encode("utf-8", "surrogateescape"))
        vb = ffi.from_buffer(v)
        keep += [kb, vb]
        arr[i].key = kb
        arr[i].value = vb
        arr[i].len = len(vb)
    return arr, n, keep


def _call_opts_meta(cls, deadline_ms, metadata):
    """_call_opts, or for a call with metadata its own rrpc_call_opts (and
    what keeps it alive until rrpc_call has copied it)."""
    if not metadata:
        return _call_opts(cls, deadline_ms), None
    arr, n, keep = _meta_c(metadata)
    o = ffi.new("rrpc_call_opts *", [cls, deadline_ms])
    o.meta = arr
    o.nmeta = n
    return o, keep


def _call_opts(cls, deadline_ms):
    """The rrpc_call_opts of (cls, deadline_ms), made once (read only)."""
    o = _opts_cache.get((cls, deadline_ms))
    if o is None:
        o = ffi.new("rrpc_call_opts *", [cls, deadline_ms])
        if len(_opts_cache) < 1024:
            _opts_cache[(cls, deadline_ms)] = o
    return o


_DEFAULT_CALL_OPTS = _call_opts(lib.RRPC_CLASS_LOW_LATENCY, 0)
_methods = {}  # method name -> its bytes (up to _METHODS_MAX names): encoded once
_METHODS_MAX = 4096
_waits = []  # idle rrpcpy_wait records of Conn.call (a record's completion has run)
_new_bytes = bytes.__new__  # a Reply without its Python __new__ (its metadata: the class's)
_call_wait = lib.rrpcpy_call_wait
_buffer = ffi.buffer
_WAITS_MAX = 256


def _method_bytes(method):
    if not isinstance(method, str):
        raise TypeError("method must be a str, not %s" % type(method).__name__)
    b = method.encode()
    if len(_methods) < _METHODS_MAX:
        _methods[method] = b
    return b


def _cbuf(data, writable=False):
    """(cdata pointer, length) over any buffer-protocol object, zero copy."""
    if data is None:
        return ffi.NULL, 0
    if isinstance(data, str):
        data = data.encode()
    b = ffi.from_buffer("char[]", data, require_writable=writable)
    n = len(b)
    return (b if n else ffi.NULL), n


# ---- the handle registry (user pointers of C callbacks) ---------------------

# C callbacks get an integer key as their user pointer, never a PyObject
# address: a late or duplicate callback finds nothing instead of crashing.
_registry = {}
_keys = itertools.count(1)


def _keep(obj):
    k = next(_keys)
    _registry[k] = obj
    return k, ffi.cast("void *", k)


def _key(user):
    return int(ffi.cast("uintptr_t", user))


def _ptrint(p):
    return int(ffi.cast("uintptr_t", p))


class _Tls(threading.local):
    """Per thread: the cores whose callbacks it is inside (a stack).  The
    class's None stands until a thread enters one, so reading it is a
    plain attribute read: getattr(local, name, None) of a missing name
    costs about 150 ns, a seventh of what Conn.call adds to a C call."""
    active: "Optional[list]" = None


_tls = _Tls()


class _InCallback:
    """Marks the current thread as inside a callback of core."""
    __slots__ = ("core",)

    def __init__(self, core):
        self.core = core

    def __enter__(self):
        st = _tls.active
        if st is None:
            st = _tls.active = []
        st.append(self.core)
        return self

    def __exit__(self, *a):
        _tls.active.pop()
        return False


def _in_callback(core):
    st = _tls.active
    return bool(st) and any(c is core for c in st)


class _Use:
    __slots__ = ("core",)

    def __init__(self, core):
        self.core = core

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.core._exit()
        return False


class _Core:
    """Per-context state shared with the callbacks (no reference to the
    Context object itself, so the Context can be collected)."""

    def __init__(self, ptr):
        self.ptr = ptr
        self.lock = threading.Lock()
        self.cv = threading.Condition(self.lock)
        self.waiters = 0  # threads in cv.wait_for (_exit notifies only then)
        self.busy = 0
        self.deferred = []
        self.closing = False
        self.closed = False
        self.handlers = {}                            # method -> _Handler
        self.client = weakref.WeakValueDictionary()   # ptr -> Conn (rrpc_connect*)
        self.accepted = {}                            # ptr -> Conn, until DOWN
        self.regions = weakref.WeakValueDictionary()  # id -> Region
        self.pools = weakref.WeakValueDictionary()    # id -> KvPool
        self.tservers = {}                            # key -> tensor server state
        self.keys = set()                             # registry keys to drop at close
        self.pending = {}                             # key -> Future (calls and ops)
        self.on_connect = None
        self.on_disconnect = None
        self.notify_fn = None
        self.notes = collections.deque(maxlen=1 << 16)
        self.log_fn = None
        self.ctx_ref = None
        self.tasks = set()     # aio: the tasks of async def handlers still running
        self.tasks_refused = 0  # aio: requests refused E_LIMIT by the task budget
        self.stop_exc = None   # aio: a handler's KeyboardInterrupt/SystemExit to re-raise
        self.brokers = set()   # roce_rpc.broker: brokers whose ticket gate this context uses
        self.services = weakref.WeakSet()  # broker Services on this context, closed first
        self.aio = None        # the asyncio loop that drives this context (roce_rpc.aio)
        self.kick = None       # aio: asks the driver to run the loop soon
        self.flush = None      # aio: runs the library's loop once, now
        self.driving = False   # aio: inside the driver's rrpc_ctx_progress
        self.woken = collections.deque()  # aio: (future, its done callback) to run next
        self.key, self.user = _keep(self)
        self.keys.add(self.key)

    # -- counted use of C handles --
    def use(self, obj=None, what="object"):
        with self.lock:
            if self.closing or self.closed:
                raise _closed_error("context")
            if obj is not None and obj._closed:
                raise _closed_error(what)
            self.busy += 1
        return _Use(self)

    def _exit(self):
        while True:
            with self.lock:
                if self.busy == 1 and self.deferred:
                    todo, self.deferred = self.deferred, []
                else:
                    self.busy -= 1
                    if self.busy == 0 and self.waiters:
                        self.cv.notify_all()
                    return
            for fn in todo:
                try:
                    fn()
                except Exception:  # pragma: no cover
                    log.exception("roce_rpc: deferred close failed")

    def retire(self, obj, fn):
        """Marks obj closed and runs fn (which releases its C handle) once
        no other thread uses a handle of this context."""
        with self.lock:
            if obj._closed:
                return
            obj._closed = True
            if self.closing or self.closed:
                return  # rrpc_ctx_destroy releases it
            if self.busy:
                self.deferred.append(fn)
                return
            self.busy += 1
        try:
            fn()
        finally:
            self._exit()

    def forget(self, key):
        _registry.pop(key, None)
        self.keys.discard(key)

    def submit(self, conn, keep, start, busy=None, enders=()):
        """Starts one asynchronous operation on conn and returns its Future,
        keep[0].  keep stays alive until the completion callback; busy (a
        Region or pool, if any) is marked in use first; start(user) makes
        the C call under the context and returns an RrpcError or None.  On an
        error (or an exception) everything is undone: the Future is no longer
        pending, keep is released, and every object of enders is ended."""
        fut = keep[0]
        if busy is not None:
            busy._op_begin()
        key, user = _keep(keep)
        self.keys.add(key)
        self.pending[key] = fut
        try:
            with self.use(conn, "connection"):
                err = start(user)
            if err is not None:
                raise err
        except BaseException:
            self.pending.pop(key, None)
            self.forget(key)
            for e in enders:
                e._op_end()
            raise
        if self.kick is not None:
            self.kick()
        return fut

    def future(self):
        """The future an operation of this context completes: on a context
        that roce_rpc.aio drives, a future of its event loop (completions
        run on that loop's thread; a cancelled one is left as it is), else
        a running concurrent.futures.Future."""
        if self.aio is not None:
            return self.aio.create_future()
        fut = concurrent.futures.Future()
        fut.set_running_or_notify_cancel()
        return fut

    def conn_slot(self):
        """(_ConnSlot, user pointer) for the events of a connection we make."""
        slot = _ConnSlot(self)
        slot.key, user = _keep(slot)
        self.keys.add(slot.key)
        return slot, user

    def adopt(self, ctx, slot, ptr, uri, up):
        """The owned Conn of a connection we made (rrpc_connect*)."""
        c = Conn._wrap(self, ptr, owned=True, ctx=ctx, uri=uri)
        c._up = up
        slot.conn = weakref.ref(c)
        self.client[_ptrint(ptr)] = c
        return c

    def conn_for(self, p):
        ip = _ptrint(p)
        c = self.accepted.get(ip) or self.client.get(ip)
        if c is None:
            c = Conn._wrap(self, p, owned=False)
        return c

    def check_blocking(self, what):
        if self.aio is not None:
            raise RrpcError(lib.RRPC_E_DEADLOCK,
                            "%s would block the asyncio loop that drives this context; "
                            "await the roce_rpc.aio form instead" % what)
        if _in_callback(self):
            raise RrpcError(lib.RRPC_E_DEADLOCK,
                            "%s from a callback of the same context would wait for itself; "
                            "use the _async form" % what)


_live = weakref.WeakSet()

# A future already done (cancelled by its awaiting task, or failed by a close)
_INVALID_STATE = (concurrent.futures.InvalidStateError, asyncio.InvalidStateError)


# ---- callbacks from the library thread --------------------------------------

def _last_line(e):
    return traceback.format_exception_only(type(e), e)[-1].strip()


class _TaskBudget:
    """The asyncio tasks of async def handlers that the process holds
    (roce_rpc.aio): one budget for every aio context of the process, and a
    bound per connection.  A request beyond its connection's share is
    refused with E_LIMIT before its task is made.  The share: per_conn
    tasks, and, once half the process budget is in use, no more than an
    equal part of the whole budget among the connections that hold tasks,
    so peers that flood on many connections leave room for one that holds
    none.  Changed with roce_rpc.aio.set_task_limits."""

    def __init__(self, process, per_conn):
        self.lock = threading.Lock()
        self.process = process
        self.per_conn = per_conn
        self.held = 0
        self.refused = 0
        self.by_conn = {}  # (core key, conn address) -> tasks held

    def admit(self, core, conn):
        """None and one task counted for (core, conn), or why it is refused."""
        k = (core.key, _ptrint(conn))
        with self.lock:
            n = self.by_conn.get(k, 0)
            why = None
            if n >= self.per_conn:
                why = ("this connection has %d unfinished async handler tasks at the server, "
                       "its limit (roce_rpc.aio.set_task_limits(per_conn=%d))"
                       % (n, self.per_conn))
            elif self.held >= self.process:
                why = ("the server process holds %d unfinished async handler tasks, its limit "
                       "(roce_rpc.aio.set_task_limits(process=%d))" % (self.held, self.process))
            elif self.held * 2 >= self.process:
                # an equal part among the busy connections and one more
                # (room for a connection that holds none yet)
                share = max(1, self.process // (len(self.by_conn) + 1))
                if n >= share:
                    why = ("the server process holds %d of its %d async handler tasks and this "
                           "connection has %d, its share among %d busy connections"
                           % (self.held, self.process, n, len(self.by_conn)))
            if why is not None:
                self.refused += 1
                core.tasks_refused += 1
                return why
            self.by_conn[k] = n + 1
            self.held += 1
            return None

    def release(self, core, conn):
        k = (core.key, _ptrint(conn))
        with self.lock:
            n = self.by_conn.get(k, 0)
            if n <= 1:
                self.by_conn.pop(k, None)
            else:
                self.by_conn[k] = n - 1
            if n:
                self.held -= 1


_tasks = _TaskBudget(process=1024, per_conn=64)

# Exceptions a handler raises to stop the program rather than fail a call.
_STOP_EXCEPTIONS = (KeyboardInterrupt, SystemExit)


def _stop_message(method, e):
    return ("the server is stopping: handler %r raised %s; the call was not served"
            % (method, _last_line(e)))


def _stop_host(core, method, e):
    """A handler raised KeyboardInterrupt or SystemExit: its caller has its
    answer; now the exception goes where Python would take it.  On a
    roce_rpc.aio context, out of the event loop (asyncio.run() raises it),
    as from any task or callback; on a thread-mode context (handlers run on
    the library's thread), KeyboardInterrupt to the main thread, as Ctrl-C
    would (_thread.interrupt_main: the main thread's SIGINT handler runs),
    and SystemExit, which in a thread other than the main one ends no
    process, to threading.excepthook (logged here at ERROR first)."""
    log.error("roce_rpc: handler %r raised %s: the caller got an error; %s", method,
              type(e).__name__,
              "re-raised from the event loop" if core.aio is not None else
              ("passed to the main thread" if isinstance(e, KeyboardInterrupt) else
               "passed to threading.excepthook (a SystemExit in a thread other than the "
               "main one ends no process)"), exc_info=e)
    if core.aio is not None:
        if _in_callback(core):  # a plain def handler, inside rrpc_ctx_progress:
            core.stop_exc = e   # the driver raises it once that returns
        elif core.flush is not None:
            core.flush()  # a task: the answer goes out before the task re-raises it
        return
    if isinstance(e, KeyboardInterrupt):
        _thread.interrupt_main()
    else:
        threading.excepthook(threading.ExceptHookArgs((type(e), e, e.__traceback__,
                                                       threading.current_thread())))


async def _handler_task(coro, rq, core):
    """Runs an async def handler's coroutine; a KeyboardInterrupt or
    SystemExit it raises is answered to its caller first, then goes on out
    of the event loop (asyncio re-raises it from the task)."""
    try:
        return await coro
    except _STOP_EXCEPTIONS as e:
        if not rq._answered:
            rq._answer_error(HANDLER_ERROR, _stop_message(rq._method, e))
        _stop_host(core, rq._method, e)
        raise


class _Handler:
    __slots__ = ("fn", "with_request", "core", "method", "key", "user")

    def __init__(self, fn, with_request, core, method):
        self.fn = fn
        self.with_request = with_request
        self.core = core
        self.method = method


@ffi.def_extern()
def _rrpc_py_handler(req, payload, length, user):
    h = _registry.get(_key(user))
    if h is None:
        lib.rrpc_respond_error(req, 1, b"the Python handler is gone")
        return
    rq = Request(req, h.core, h.method)
    try:
        with _InCallback(h.core):
            data = ffi.buffer(payload, length)[:] if length else b""
            try:
                result = h.fn(rq, data) if h.with_request else h.fn(data)
            except RrpcError as e:
                rq._answer_error(e.code, e.message or strerror(e.code))
                return
            except Exception as e:
                log.warning("roce_rpc: handler %r raised; its caller gets HANDLER_ERROR",
                            h.method, exc_info=True)
                rq._answer_error(HANDLER_ERROR, _last_line(e))
                return
            except _STOP_EXCEPTIONS as e:
                if not rq._answered:
                    rq._answer_error(HANDLER_ERROR, _stop_message(h.method, e))
                _stop_host(h.core, h.method, e)
                return
            if rq._answered or rq._deferred:
                if asyncio.iscoroutine(result):
                    result.close()
                return
            if isinstance(result, concurrent.futures.Future):
                rq._deferred = True
                result.add_done_callback(rq._from_future)
                return
            if h.core.aio is not None and asyncio.iscoroutine(result):
                # an async def handler: a task on the driving loop, if the
                # connection's share of the process's task budget allows
                why = _tasks.admit(h.core, rq._conn)
                if why is not None:
                    result.close()
                    rq._refuse('call "%s" refused: %s; try again later' % (h.method, why))
                    return
                rq._deferred = True
                core, conn = h.core, rq._conn
                task = core.aio.create_task(_handler_task(result, rq, core))
                core.tasks.add(task)
                # the caller gives up (cancel, deadline) or goes: the task
                # gets CancelledError (on this loop: the callback runs in
                # rrpc_ctx_progress, which the event loop drives)
                ck, cuser = _keep(task)
                if lib.rrpc_request_on_cancel(req, lib._rrpc_py_req_cancel, cuser) != 0:
                    task.cancel()  # cancelled already

                def done(t, core=core, conn=conn, ck=ck):
                    _registry.pop(ck, None)
                    core.tasks.discard(t)
                    _tasks.release(core, conn)
                task.add_done_callback(rq._from_future)  # answers: no callback after
                task.add_done_callback(done)
                return
            rq._answer(result)
    except BaseException:  # never leave a request unanswered
        log.exception("roce_rpc: internal error in a handler")
        if not rq._answered:
            rq._answered = True
            lib.rrpc_respond_error(req, 1, b"internal error in the Python binding")


@ffi.def_extern()
def _rrpc_py_req_cancel(req, user):
    task = _registry.pop(_key(user), None)
    if task is not None and not task.done():
        task.cancel()


def _call_error(status, message, method, metadata=_NO_META):
    """The error of a failed call: the handler's code and message as they
    are; a library code with rrpc_call_sync's detail, the method named; the
    response's metadata (a _meta_read mapping) in .metadata."""
    if status > 0:
        e = RrpcError(status, message)
    else:
        e = RrpcError(status, 'call "%s" failed: %s%s%s' % (
            method, strerror(status), ": " if message else "", message))
    if metadata:
        e.metadata = metadata
    return e


@ffi.def_extern()
def _rrpc_py_call_done(res, user):
    e = _registry.pop(_key(user), None)
    if e is None:
        return
    fut, core = e[0], e[1]
    core.pending.pop(_key(user), None)
    core.keys.discard(_key(user))
    with _InCallback(core):
        try:
            if res.status == 0:
                fut.set_result(Reply(ffi.buffer(res.data, res.len)[:] if res.len else b"",
                                     _meta_read(res.meta, res.nmeta)))
            else:
                fut.set_exception(_call_error(res.status, _s(res.message), e[2],
                                              _meta_read(res.meta, res.nmeta)))
        except _INVALID_STATE:
            pass
        except Exception:
            log.exception("roce_rpc: completion callback failed")


@ffi.def_extern()
def _rrpc_py_op_done(status, user):
    e = _registry.pop(_key(user), None)
    if e is None:
        return
    fut, core, result = e[0], e[1], e[2]
    message = None
    if status != 0 and len(e) > 6 and core.ptr != ffi.NULL:
        # e[6]: the prefix of the library's detail for this operation (set on
        # this thread just before the completion); another operation's is
        # not taken for this one's
        last = _s(lib.rrpc_ctx_last_error(core.ptr))
        if last.startswith(e[6]):
            message = last
    core.pending.pop(_key(user), None)
    core.keys.discard(_key(user))
    with _InCallback(core):
        try:
            for r in e[3]:
                r._op_end()
            if status == 0:
                fut.set_result(result() if callable(result) else result)
            else:
                fut.set_exception(RrpcError(status, message or strerror(status)))
        except _INVALID_STATE:
            pass
        except Exception:
            log.exception("roce_rpc: completion callback failed")


class _ConnSlot:
    __slots__ = ("core", "conn", "key", "fut", "what", "__weakref__")

    def __init__(self, core):
        self.core = core
        self.conn = None  # weakref to the client Conn
        self.fut = None   # Context.connect_async: resolved by UP or DOWN
        self.what = ""


@ffi.def_extern()
def _rrpc_py_conn_event(conn, ev, reason, user):
    obj = _registry.get(_key(user))
    if obj is None:
        return
    try:
        if isinstance(obj, _ConnSlot):  # a connection of ours (rrpc_connect*)
            core = obj.core
            c = obj.conn() if obj.conn is not None else None
            fut, obj.fut = obj.fut, None
            if fut is not None and not fut.done():
                if ev == lib.RRPC_CONN_UP:
                    if c is not None:
                        c._up = True
                    fut.set_result(None)
                else:
                    detail = _s(lib.rrpc_ctx_last_error(core.ptr)) or strerror(reason)
                    fut.set_exception(RrpcError(reason, "%s: %s" % (obj.what, detail)))
            if ev == lib.RRPC_CONN_DOWN:
                core.forget(obj.key)
                for ts in list(core.tservers.values()):
                    ts.drop_conn(conn)
                if c is not None:
                    c._up = False
                    c.down_reason = reason
        else:  # an accepted connection
            core = obj
            ip = _ptrint(conn)
            if ev == lib.RRPC_CONN_UP:
                c = Conn._wrap(core, conn, owned=False)
                c._up = True
                core.accepted[ip] = c
            else:
                for ts in list(core.tservers.values()):
                    ts.drop_conn(conn)
                c = core.accepted.pop(ip, None)
                if c is not None:
                    with core.lock:
                        c._closed = True  # the handle dies when this returns
                    c._up = False
                    c.down_reason = reason
        with _InCallback(core):
            fn = core.on_connect if ev == lib.RRPC_CONN_UP else core.on_disconnect
            if fn is not None and c is not None:
                if ev == lib.RRPC_CONN_UP:
                    fn(c)
                else:
                    fn(c, RrpcError(reason, strerror(reason)))
    except Exception:
        log.exception("roce_rpc: connection event callback failed")


@ffi.def_extern()
def _rrpc_py_notify(conn, imm, user):
    core = _registry.get(_key(user))
    if core is None:
        return
    try:
        with _InCallback(core):
            if core.notify_fn is not None:
                core.notify_fn(core.conn_for(conn), int(imm))
            else:
                with core.cv:
                    core.notes.append(int(imm))
                    core.cv.notify_all()
    except Exception:
        log.exception("roce_rpc: notify callback failed")


@ffi.def_extern()
def _rrpc_py_log(level, msg, user):
    core = _registry.get(_key(user))
    if core is None or core.log_fn is None:
        return
    try:
        core.log_fn(int(level), _s(msg))
    except Exception:
        pass


_PY_LEVEL = {0: logging.CRITICAL, 1: logging.CRITICAL, 2: logging.CRITICAL, 3: logging.ERROR,
             4: logging.WARNING, 5: logging.INFO, 6: logging.INFO, 7: logging.DEBUG}


# ---- Context ----------------------------------------------------------------

def _create_ctx(config, pp):
    """rrpc_ctx_create, or rrpc_ctx_create_with a config made of config."""
    if not config:
        return lib.rrpc_ctx_create(pp)
    cp = ffi.new("rrpc_config **")
    r = lib.rrpc_config_create(cp)
    if r:
        return r
    try:
        for name, value in config.items():
            text = value if isinstance(value, str) else str(int(value))  # metrics_listen
            r = lib.rrpc_config_set(cp[0], str(name).encode(), text.encode())
            if r:
                raise RrpcError(r, _s(lib.rrpc_ctx_last_error(ffi.NULL)) or
                                "config %s=%r: %s" % (name, value, strerror(r)))
        return lib.rrpc_ctx_create_with(cp[0], pp)
    finally:
        lib.rrpc_config_destroy(cp[0])


class _Closable:
    """`with obj:` closes obj at the end of the block, and so does garbage
    collection (errors are ignored there).  Subclasses define close()."""

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[types.TracebackType]) -> bool:
        self.close()
        return False

    def close(self) -> None:
        raise NotImplementedError

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class Context(_Closable):
    """An rrpc_ctx with its loop on a library thread.

        with roce_rpc.Context() as ctx:
            lis = ctx.listen("tcp://127.0.0.1:0")

            @ctx.handler("echo")
            def echo(data):
                return data

    log: a callable (level, message), or True to send the library's log to
    the "roce_rpc" logger (syslog levels: 3 error .. 7 debug).
    classes: {class: (dscp, weight, credits)} applied before any endpoint.
    config: {tunable: value} set from code over the RRPC_* environment
    (names as rrpc_config_print lists them, e.g. "RRPC_MAX_CONNS" or
    "max_conns"); an unknown name or a bad value raises RrpcValueError.
    config={"metrics_listen": "127.0.0.1:9464"} serves GET /metrics there
    (metrics_port says the port when it was 0).
    """

    def __init__(self, *, log: Union[None, bool, Callable[[int, str], Any]] = None,
                 log_level: int = 6,
                 classes: Optional[Dict[_QoS, Tuple[int, int, int]]] = None,
                 config: Optional[Dict[str, Union[str, int]]] = None,
                 _driven: bool = False) -> None:
        pp = ffi.new("rrpc_ctx **")
        r = _create_ctx(config, pp)
        if r:
            raise RrpcError(r, "rrpc_ctx_create: %s" % (
                _s(lib.rrpc_ctx_last_error(ffi.NULL)) or strerror(r)))
        self._ptr = pp[0]
        self._core = core = _Core(self._ptr)
        core.ctx_ref = weakref.ref(self)
        lib.rrpc_ctx_set_notify(self._ptr, lib._rrpc_py_notify, core.user)
        if log is not None:
            if log is True:
                core.log_fn = lambda lv, m: logging.getLogger("roce_rpc.lib").log(
                    _PY_LEVEL.get(lv, logging.DEBUG), m)
            else:
                core.log_fn = log
            lib.rrpc_ctx_set_log(self._ptr, int(log_level), lib._rrpc_py_log, core.user)
        try:
            for cls, (dscp, weight, credits) in (classes or {}).items():
                self.set_class(cls, dscp, weight, credits)
            if not _driven:  # roce_rpc.aio drives the loop itself
                r = lib.rrpc_ctx_start_thread(self._ptr)
                if r:
                    raise _error(r, self._ptr, "rrpc_ctx_start_thread")
        except BaseException:
            self.close()
            raise
        _live.add(self)

    # -- lifetime --
    @property
    def closed(self) -> bool:
        """Whether close() was called."""
        return self._core.closing or self._core.closed

    def close(self) -> None:
        """Closes every child (connections, listeners, regions, pools, tensor
        servers), fails pending calls with E_CLOSED and stops the loop.
        Idempotent.  From inside one of this context's callbacks, the
        destruction is finished by a helper thread."""
        core = getattr(self, "_core", None)
        if core is None:
            return
        with core.lock:
            if core.closing or core.closed:
                return
            core.closing = True
        if _in_callback(core):
            threading.Thread(target=_destroy, args=(core,), name="rrpc-close",
                             daemon=True).start()
        else:
            _destroy(core)

    # -- metrics --
    def stats(self) -> Dict[str, Any]:
        """The context's counters (rrpc_ctx_stats, rrpc_ctx_peer_stats):
        {"classes": {name: {calls, calls_ok, calls_failed, call_errors (a
        dict by code: RRPC_E_DEADLINE, ..., application, other),
        call_bytes_out, call_bytes_in, requests, onesided_ops,
        onesided_bytes, onesided_failed, credit_stalls, credit_wait_ns,
        queued_frames, rtt_us_sum, rtt_buckets, onesided_us_sum,
        onesided_buckets, credit_lent, credit_lends, credit_lend_refused,
        credit_taken_back}}, "peers": {address: {conns, calls, calls_ok,
        calls_failed, requests, frames_out, bytes_out, frames_in, bytes_in,
        onesided_ops, onesided_bytes}}, "conns_up", "conns_down",
        "keepalive_losses", "busy_poll_budget_stops", "busy_poll_contended_stops",
        "loop_thread_wakeups", "loop_takeovers", "qos_pieces_cut", "qos_turns_preempted"};
        docs/metrics.md says what each counts."""
        st = ffi.new("rrpc_stats *")
        peers = ffi.new("rrpc_peer_stats[]", lib.RRPC_STATS_PEERS + 1)
        n_peers = ffi.new("size_t *")
        with self._core.use():
            r = lib.rrpc_ctx_stats(self._ptr, st)
            if r == 0:
                r = lib.rrpc_ctx_peer_stats(self._ptr, peers, lib.RRPC_STATS_PEERS + 1, n_peers)
        if r:
            raise RrpcError(r, strerror(r))
        fields = ("calls", "calls_ok", "calls_failed", "call_bytes_out", "call_bytes_in",
                  "requests", "onesided_ops", "onesided_bytes", "onesided_failed",
                  "credit_stalls", "credit_wait_ns", "queued_frames", "rtt_us_sum",
                  "onesided_us_sum", "credit_lent", "credit_lends", "credit_lend_refused",
                  "credit_taken_back")
        nb = lib.RRPC_STATS_RTT_BUCKETS
        classes = {}
        for c in (CLASS_CONTROL, CLASS_LOW_LATENCY, CLASS_BULK, CLASS_BACKGROUND):
            cs = st.cls[c]
            d = {f: int(getattr(cs, f)) for f in fields}
            d["rtt_buckets"] = [int(cs.rtt_buckets[i]) for i in range(nb)]
            d["onesided_buckets"] = [int(cs.onesided_buckets[i]) for i in range(nb)]
            d["call_errors"] = {_s(lib.rrpc_stats_error_label(i)): int(cs.call_errors[i])
                                for i in range(lib.RRPC_STATS_ERRORS)}
            classes[_s(lib.rrpc_class_name(c))] = d
        pfields = ("calls", "calls_ok", "calls_failed", "requests", "frames_out", "bytes_out",
                   "frames_in", "bytes_in", "onesided_ops", "onesided_bytes")
        by_peer = {}
        for i in range(n_peers[0]):
            p = peers[i]
            d = {"conns": int(p.conns)}
            d.update({f: int(getattr(p.s, f)) for f in pfields})
            by_peer[_s(p.peer)] = d
        return {"classes": classes, "peers": by_peer, "conns_up": int(st.conns_up),
                "conns_down": int(st.conns_down), "keepalive_losses": int(st.keepalive_losses),
                "busy_poll_budget_stops": int(st.busy_poll_budget_stops),
                "busy_poll_contended_stops": int(st.busy_poll_contended_stops),
                "loop_thread_wakeups": int(st.loop_thread_wakeups),
                "loop_takeovers": int(st.loop_takeovers),
                "qos_pieces_cut": int(st.qos_pieces_cut),
                "qos_turns_preempted": int(st.qos_turns_preempted)}

    @property
    def metrics_port(self) -> Optional[int]:
        """The TCP port this context serves GET /metrics on (the config's
        metrics_listen), or None when it serves none."""
        with self._core.use():
            r = lib.rrpc_ctx_metrics_port(self._ptr)
        return r if r >= 0 else None

    def metrics_text(self) -> str:
        """The counters in the Prometheus text format (rrpc_ctx_stats_text),
        to serve at /metrics from the application's own HTTP server, or by
        the context itself: config={"metrics_listen": "HOST:PORT"}."""
        n = ffi.new("size_t *")
        with self._core.use():
            while True:
                size = n[0] + 1
                buf = ffi.new("char[]", size)
                r = lib.rrpc_ctx_stats_text(self._ptr, buf, size, n)
                if r == 0:
                    return ffi.string(buf).decode()
                if r != -errno.ENOBUFS:
                    raise RrpcError(r, strerror(r))

    # -- configuration --
    def set_class(self, cls: _QoS, dscp: int, weight: int, credits: int) -> None:
        """rrpc_class_set: before the first listen/connect."""
        with self._core.use():
            r = lib.rrpc_class_set(self._ptr, _qos(cls, 0), dscp, weight, credits)
            if r:
                raise _error(r, self._ptr, "rrpc_class_set")

    def get_class(self, cls: _QoS) -> Tuple[int, int, int]:
        """(dscp, weight, credits) of a QoS class."""
        v = ffi.new("int[3]")
        with self._core.use():
            r = lib.rrpc_class_get(self._ptr, _qos(cls, 0), v, v + 1, v + 2)
            if r:
                raise _error(r, self._ptr, "rrpc_class_get")
        return (v[0], v[1], v[2])

    # -- RPC server side --
    def handler(self, method: str, *, request: bool = False,
                on_worker: bool = False) -> Callable[[_F], _F]:
        """Decorator: registers fn(data: bytes) -> bytes-like for method.

        With request=True the function is fn(req: Request, data).  It may
        raise RrpcError(code > 0, message) to fail the call, return a
        concurrent.futures.Future to answer later, or call req.defer() and
        answer with req.respond()/req.fail() from any thread.

        on_worker=True runs it on one of the context's handler worker
        threads (RRPC_HANDLER_ON_WORKER; RRPC_HANDLER_THREADS, default 2),
        not on the loop thread: while it works (numpy, I/O, anything that
        releases the GIL, or just a long computation) the loop goes on
        reading and answering other requests.  Several may run at once, so
        it must be thread-safe; the rules of a callback still hold (no
        blocking call on the same context).  Thread-mode contexts only."""
        def deco(fn):
            self.add_handler(method, fn, request=request, on_worker=on_worker)
            return fn
        return deco

    def add_handler(self, method: str, fn: Callable[..., Any], *, request: bool = False,
                    on_worker: bool = False) -> None:
        """Registers fn for method (see handler())."""
        core = self._core
        if on_worker and core.aio is not None:
            raise ValueError("on_worker handlers are for thread-mode contexts; under "
                             "roce_rpc.aio make the handler an async def instead")
        h = _Handler(fn, request, core, method)
        h.key, h.user = _keep(h)
        core.keys.add(h.key)
        # A handler that answers later (a Future, req.defer(), an async def
        # on roce_rpc.aio) keeps its request's credit until it answers, so a
        # caller holds at most its credit window of unanswered requests here.
        opts = ffi.new("rrpc_register_opts *")
        opts.flags = lib.RRPC_HANDLER_ON_WORKER if on_worker else lib.RRPC_HANDLER_CREDIT_ON_ANSWER
        with core.use():
            r = lib.rrpc_register_with(self._ptr, method.encode(), lib._rrpc_py_handler, h.user,
                                       opts)
            if r:
                core.forget(h.key)
                raise _error(r, self._ptr, "register %r" % method)
        core.handlers[method] = h

    def remove_handler(self, method: str) -> None:
        core = self._core
        with core.use():
            r = lib.rrpc_unregister(self._ptr, method.encode())
            if r:
                raise _error(r, self._ptr, "unregister %r" % method)
        h = core.handlers.pop(method, None)
        if h is not None:
            core.forget(h.key)

    def on_connect(self, fn: _F) -> _F:
        """Decorator: fn(conn) for every accepted or opened connection
        (runs on the loop thread)."""
        self._core.on_connect = fn
        return fn

    def on_disconnect(self, fn: _F) -> _F:
        """Decorator: fn(conn, RrpcError reason)."""
        self._core.on_disconnect = fn
        return fn

    def on_notify(self, fn: _F) -> _F:
        """Decorator: fn(conn, imm) for every write-with-notify that landed in
        this context's memory.  Without one, notifications queue up for
        wait_notify()."""
        self._core.notify_fn = fn
        return fn

    def wait_notify(self, timeout: Optional[float] = None) -> int:
        """The oldest queued notification value; RrpcTimeoutError (a
        TimeoutError) after timeout s."""
        core = self._core
        with core.cv:
            core.waiters += 1
            try:
                ok = core.cv.wait_for(lambda: core.notes or core.closed, timeout)
            finally:
                core.waiters -= 1
            if not ok:
                raise RrpcError(lib.RRPC_E_DEADLINE, "no notification within %s s" % timeout)
            if not core.notes:
                raise _closed_error("context")
            return core.notes.popleft()

    # -- endpoints --
    def listen(self, uri: str) -> "Listener":
        """Listens on uri (tcp://HOST:PORT or rdma://HOST:PORT; port 0 picks one)."""
        return Listener(self, uri)

    def connect_async(self, uri: str, *, timeout: float = 10.0,
                      ticket: Optional[_Buffer] = None, src: Optional[str] = None
                      ) -> "Tuple[Conn, concurrent.futures.Future[None]]":
        """Starts connecting (rrpc_connect_with): returns the Conn at once
        and a Future that completes (None) once it is up, or with the RrpcError of the
        failure (RrpcConnectionRefusedError, RrpcTimeoutError after
        timeout s, RrpcPermissionError when the ticket is refused)."""
        core = self._core
        slot, user = core.conn_slot()
        slot.fut = fut = core.future()
        slot.what = "connect %s" % uri
        pp = ffi.new("rrpc_conn **")
        opts = ffi.new("rrpc_connect_opts *")
        opts.timeout_ms = max(1, int(timeout * 1000))
        keep = []
        if ticket is not None:
            tb, tn = _cbuf(ticket)
            opts.ticket, opts.ticket_len = tb, tn
            keep.append(tb)
        if src is not None:
            sb = ffi.new("char[]", src.encode())
            opts.src = sb
            keep.append(sb)
        with core.use():
            r = lib.rrpc_connect_with(self._ptr, uri.encode(), opts, lib._rrpc_py_conn_event,
                                      user, pp)
            err = _error(r, self._ptr, "connect %s" % uri) if r else None
        if r:
            core.forget(slot.key)
            raise err
        # UP may have come first, on the library thread
        c = core.adopt(self, slot, pp[0], uri, fut.done() and fut.exception() is None)
        if core.kick is not None:
            core.kick()
        return c, fut

    def connect(self, uri: str, *, timeout: float = 10.0,
                ticket: Optional[_Buffer] = None) -> "Conn":
        """Connects to uri and waits until it is up (rrpc_connect_sync, or
        rrpc_connect_ticket with ticket bytes).  Returns a Conn."""
        core = self._core
        core.check_blocking("connect")
        slot, user = core.conn_slot()
        pp = ffi.new("rrpc_conn **")
        tmo = int(timeout * 1000)
        with core.use():
            if ticket is None:
                r = lib.rrpc_connect_sync(self._ptr, uri.encode(), tmo,
                                          lib._rrpc_py_conn_event, user, pp)
            else:
                tb, tn = _cbuf(ticket)
                r = lib.rrpc_connect_ticket(self._ptr, uri.encode(), tb, tn, tmo,
                                            lib._rrpc_py_conn_event, user, pp)
            err = _error(r, self._ptr, "connect %s" % uri) if r else None
        if r:
            core.forget(slot.key)
            raise err
        return core.adopt(self, slot, pp[0], uri, True)

    # -- memory --
    def register(self, obj: _Buffer,
                 access: Union[int, str] = REMOTE_READ | REMOTE_WRITE) -> "Region":
        """Registers the memory of obj (anything with the buffer protocol:
        bytearray, memoryview, mmap, a C-contiguous numpy array) with zero
        copy; the Region keeps obj alive.  access: REMOTE_READ|REMOTE_WRITE
        bits, or a string of 'r'/'w'."""
        return Region(self, obj, access)

    register_memory = register

    def kv_pool(self, array: Any, page_size: Optional[int] = None) -> "KvPool":
        """A KV-cache page pool over array (see KvPool)."""
        from .tensor import KvPool
        return KvPool(self, array, page_size)

    def serve_tensors(self, alloc: Optional[Callable[..., Any]] = None,
                      on_tensor: Optional[Callable[..., Any]] = None, *,
                      max_bytes: Optional[int] = None, pool: Any = None,
                      keep_bytes: Optional[int] = None) -> "TensorServer":
        """Accepts tensors from every connection (see TensorServer)."""
        from .tensor import TensorServer
        return TensorServer(self, alloc, on_tensor, max_bytes=max_bytes, pool=pool,
                            keep_bytes=keep_bytes)

    def receive_pool(self, slot_bytes: int, count: int = 2) -> "ReceivePool":
        """count registered receive destinations of slot_bytes each,
        reused across receives (see ReceivePool; serve_tensors(pool=...))."""
        from .tensor import ReceivePool
        return ReceivePool(self, slot_bytes, count)

    def __repr__(self) -> str:
        return "<roce_rpc.Context%s>" % (" closed" if self.closed else "")


def _fail_closed(fut):
    if not fut.done():
        try:
            fut.set_exception(_closed_error("context"))
        except _INVALID_STATE:
            pass


def _destroy(core):
    with core.cv:
        core.waiters += 1
        try:
            core.cv.wait_for(lambda: core.busy == 0)
        finally:
            core.waiters -= 1
        core.deferred = []
    # Children the context does not free itself go first.
    for svc in list(core.services):
        svc.close()
    for ts in list(core.tservers.values()):
        ts.close_now()
    for p in list(core.pools.values()):
        if not p._closed and not p._ops:
            p._closed = True
            p._release()
    lib.rrpc_ctx_destroy(core.ptr)  # runs the last callbacks on this thread
    with core.cv:
        core.closed = True
        core.cv.notify_all()
    for c in list(core.accepted.values()) + list(core.client.values()):
        c._closed = True
        c._up = False
    core.accepted.clear()
    for r in list(core.regions.values()) + list(core.pools.values()):
        r._closed = True
    for fut in list(core.pending.values()):
        if isinstance(fut, asyncio.Future):  # roce_rpc.aio: settled on its own loop
            try:
                fut.get_loop().call_soon_threadsafe(_fail_closed, fut)
            except RuntimeError:  # that loop is closed
                pass
        else:
            _fail_closed(fut)
    for k in list(core.pending):  # roce_rpc.aio calls keep their keys here alone
        _registry.pop(k, None)
    core.pending.clear()
    for k in list(core.keys):
        _registry.pop(k, None)
    core.keys.clear()
    core.handlers.clear()
    core.ptr = ffi.NULL


# ---- RPC requests -----------------------------------------------------------

_NO_DEADLINE = (1 << 63) - 1  # RRPC_NO_DEADLINE


class Request:
    """A call being served.  Answer it exactly once: the handler's return
    value does that unless the handler called defer() (or answered itself)."""

    __slots__ = ("_ptr", "_core", "_method", "_answered", "_deferred", "_lock", "qos_class",
                 "_conn", "deadline", "metadata")

    def __init__(self, ptr: Any, core: "_Core", method: str = "") -> None:
        self._ptr = ptr
        self._core = core
        self._method = method
        self._answered = False
        self._deferred = False
        self._lock = threading.Lock()
        self.qos_class = lib.rrpc_request_class(ptr)
        self._conn = lib.rrpc_request_conn(ptr)
        left = lib.rrpc_request_remaining_us(ptr)
        #: When the caller's deadline passes, on time.monotonic()'s clock
        #: (None: the caller set none).  It travels with the request as the
        #: time left when it was sent.
        self.deadline: Optional[float] = (
            None if left == _NO_DEADLINE else time.monotonic() + left / 1e6)
        meta = ffi.new("const rrpc_meta **")
        n = ffi.new("size_t *")
        lib.rrpc_request_meta(ptr, meta, n)
        #: The metadata the caller sent (a read-only mapping of str to str,
        #: values decoded from UTF-8 with surrogateescape), copied: it stays
        #: valid after the answer.
        self.metadata: Mapping[str, str] = _meta_read(meta[0], n[0])

    def set_response_metadata(self, metadata: Optional[Metadata]) -> None:
        """Metadata to send back with the answer (respond, fail, or the
        handler's return value), replacing any set before; None or {}
        clears it.  Before the request is answered.  Raises RrpcError
        E_METADATA when it breaks the bounds (see Metadata), TypeError for
        keys or values of other types."""
        arr, n, keep = _meta_c(metadata)
        with self._lock:
            if self._answered:
                raise RrpcError(-22, "the request was already answered")
            with self._core.use():
                r = lib.rrpc_request_set_response_meta(self._ptr, arr, n)
        del keep
        if r:
            raise _error(r, self._core.ptr, "response metadata")

    def remaining(self) -> Optional[float]:
        """Seconds the caller has left (<= 0: it gave up), or None when it
        set no deadline."""
        return None if self.deadline is None else self.deadline - time.monotonic()

    @property
    def cancelled(self) -> bool:
        """True once the caller gave up on this call (it cancelled it, or its
        deadline passed) or the connection went down: stop the work and
        answer.  False once the request is answered."""
        with self._lock:
            if self._answered:
                return False
            return bool(lib.rrpc_request_cancelled(self._ptr))

    @property
    def conn(self) -> "Conn":
        """The Conn the request came on (valid while the request is)."""
        return self._core.conn_for(self._conn)

    def defer(self) -> "Request":
        """The handler returns without answering; respond()/fail() later."""
        self._deferred = True
        return self

    def _take(self):
        with self._lock:
            if self._answered:
                raise RrpcError(-22, "the request was already answered")
            self._answered = True

    def respond(self, data: Optional[_Buffer] = b"") -> None:
        """Answers with data (any buffer; copied by the library).  Raises
        TypeError, and leaves the request unanswered, when data is not a
        buffer."""
        b, n = _cbuf(data)  # before _take: a bad data must not use up the request
        self._take()
        with self._core.use():
            r = lib.rrpc_respond(self._ptr, b, n)
        if r:
            raise RrpcError(r, strerror(r))

    def fail(self, code: int, message: str = "") -> None:
        """Fails the call with the application code code (> 0)."""
        msg = str(message).encode()[:1024]
        self._take()
        with self._core.use():
            r = lib.rrpc_respond_error(self._ptr, int(code), msg)
        if r:
            raise RrpcError(r, strerror(r))

    def _answer(self, data):
        """Answers with a handler's result: a buffer, None, or else an error."""
        if data is None:
            data = b""
        try:
            _cbuf(data)
        except (TypeError, ValueError, BufferError) as e:
            if asyncio.iscoroutine(data):
                data.close()  # never to run: no "never awaited" warning
                hint = ("; an async def handler runs only on a roce_rpc.aio.Context; here "
                        "use a plain def that returns a concurrent.futures.Future")
            else:
                hint = " (%s)" % e
            log.warning("roce_rpc: handler %r returned %s, not a buffer; its caller gets "
                        "HANDLER_ERROR", self._method, type(data).__name__)
            self._answer_error(HANDLER_ERROR, "handler %r returned %s; return bytes, "
                               "bytearray, memoryview or None%s"
                               % (self._method, type(data).__name__, hint))
            return
        try:
            self.respond(data)
        except RrpcError as e:
            if e.code not in (lib.RRPC_E_CLOSED,):
                log.warning("roce_rpc: could not respond: %s", e)

    def _answer_error(self, code, message):
        if code <= 0:
            message = "%s: %s" % (err_name(code), message)
            code = 1
        try:
            self.fail(code, message)
        except RrpcError as e:
            if e.code != lib.RRPC_E_CLOSED:
                log.warning("roce_rpc: could not respond: %s", e)

    def _refuse(self, message):
        """Refuses the request for load: the caller's call fails with E_LIMIT."""
        self._take()
        with self._core.use():
            lib.rrpc_respond_error(self._ptr, lib.RRPC_E_LIMIT, message.encode()[:1024])

    def _from_future(self, fut):
        try:
            data = fut.result()
        except asyncio.CancelledError:
            # its caller gave up (or the connection went): nobody waits
            if not self._answered:
                self._take()
                with self._core.use():
                    lib.rrpc_respond_error(self._ptr, lib.RRPC_E_CANCELLED,
                                           b"the handler was cancelled: its caller gave up")
            return
        except RrpcError as e:
            self._answer_error(e.code, e.message)
        except _STOP_EXCEPTIONS as e:
            if not self._answered:
                self._answer_error(HANDLER_ERROR, _stop_message(self._method, e))
            if not isinstance(fut, asyncio.Future):  # a task re-raises it in its loop itself
                _stop_host(self._core, self._method, e)
        except BaseException as e:
            log.warning("roce_rpc: handler %r failed; its caller gets HANDLER_ERROR",
                        self._method, exc_info=e)
            self._answer_error(HANDLER_ERROR, _last_line(e))
        else:
            self._answer(data)


# ---- connections ------------------------------------------------------------

class Conn(_Closable):
    """A connection.  From Context.connect (owned: close() it, or let it be
    collected) or accepted by a Listener (valid until it goes down)."""

    uri: Optional[str]  #: the URI it was connected to (None: accepted)
    down_reason: int    #: why it went down (0 while up)
    _core: "_Core"
    _ptr: Any
    _owned: bool
    _closed: bool
    _up: bool
    _ctx: Optional["Context"]

    def __init__(self) -> None:
        raise TypeError("use Context.connect()")

    @classmethod
    def _wrap(cls, core, ptr, owned, ctx=None, uri=None):
        c = object.__new__(cls)
        c._core = core
        c._ptr = ptr
        c._owned = owned
        c._closed = False
        c._up = False
        c._ctx = ctx  # owned connections keep their Context alive
        c.uri = uri
        c.down_reason = 0
        return c

    @property
    def context(self) -> Optional["Context"]:
        """The Context of this connection (None once it is collected)."""
        return self._ctx if self._ctx is not None else (
            self._core.ctx_ref() if self._core.ctx_ref else None)

    @property
    def closed(self) -> bool:
        """Whether close() was called or the connection went down."""
        return self._closed

    @property
    def up(self) -> bool:
        """Whether the connection is up."""
        return self._up and not self._closed

    @property
    def transport(self) -> str:
        """"tcp", "verbs" or "inproc"."""
        with self._core.use(self, "connection"):
            return _s(lib.rrpc_conn_transport(self._ptr))

    @property
    def peer(self) -> str:
        """The peer's address."""
        buf = ffi.new("char[]", 128)
        with self._core.use(self, "connection"):
            r = lib.rrpc_conn_peer(self._ptr, buf, 128)
        if r:
            raise RrpcError(r, strerror(r))
        return _s(buf)

    def class_dscp(self, qos: _QoS) -> int:
        v = ffi.new("int *")
        with self._core.use(self, "connection"):
            r = lib.rrpc_conn_class_dscp(self._ptr, _qos(qos, 0), v)
        if r:
            raise RrpcError(r, strerror(r))
        return v[0]

    def close(self) -> None:
        """Closes the connection: pending calls fail with E_CLOSED."""
        if getattr(self, "_core", None) is None:
            return
        ptr = self._ptr
        self._up = False
        self._core.retire(self, lambda: lib.rrpc_conn_close(ptr))

    def __del__(self):
        try:
            if self._owned:
                self.close()
        except Exception:
            pass

    # -- RPC --
    def call_async(self, method: str, data: Optional[_Buffer] = b"", *, qos: Optional[_QoS] = None,
                   timeout: Optional[float] = None,
                   callback: Optional[Callable[["concurrent.futures.Future[bytes]"], Any]] = None,
                   metadata: Optional[Metadata] = None
                   ) -> "concurrent.futures.Future[bytes]":
        """Calls method; returns a concurrent.futures.Future whose result is
        the response bytes, a Reply with the response's .metadata (or
        RrpcError).  metadata: the request's (see Metadata).
        callback(future), if given, is added as a done callback; it runs on
        the loop thread."""
        core = self._core
        fut = core.future()
        if callback is not None:
            fut.add_done_callback(callback)
        opts, keep = _call_opts_meta(_qos(qos, lib.RRPC_CLASS_LOW_LATENCY),
                                     _deadline_ms(timeout), metadata)

        def start(user, keep=keep):
            b, n = _cbuf(data)
            r = lib.rrpc_call(self._ptr, method.encode(), b, n, opts, lib._rrpc_py_call_done, user)
            return _error(r, core.ptr, "call %r" % method) if r else None
        return core.submit(self, (fut, core, method), start)

    def _cancel_call(self, fut) -> bool:
        """Cancels in the library the call whose future is fut
        (rrpc_call_cancel): its completion runs now (the future is left as
        it is if already done or cancelled) and a late answer is dropped.
        Whether a pending call was found."""
        core = self._core
        key = next((k for k, f in list(core.pending.items()) if f is fut), None)
        if key is None or self._closed or core.closing or core.closed:
            return False
        with core.use(self, "connection"):
            return lib.rrpc_call_cancel(self._ptr, lib._rrpc_py_call_done,
                                        ffi.cast("void *", key)) == 0

    def call(self, method: str, data: Optional[_Buffer] = b"", *, qos: Optional[_QoS] = None,
             timeout: Optional[float] = None, metadata: Optional[Metadata] = None) -> Reply:
        """Calls method and returns the response bytes, a Reply whose
        .metadata is the response's; raises RrpcError (code > 0: the
        handler's; E_NO_METHOD, E_DEADLINE, E_METADATA for metadata out of
        its bounds, ...) whose .metadata is the failed response's.
        metadata: the request's (see Metadata)."""
        core = self._core
        if core.aio is not None or _tls.active:
            core.check_blocking("call")
        # The completion runs in C (call_wait.h) without the GIL, and this
        # thread waits as rrpc_call_sync does (rrpc_ctx_wait_until: it runs
        # the loop itself while the loop thread sleeps), the GIL released,
        # in slices of 100 ms so that signals reach Python between them.
        # Nothing is allocated per call without metadata: the wait record
        # comes from a pool, the options and the method's bytes from caches,
        # bytes go as they are.
        keep = None
        if metadata:
            opts, keep = _call_opts_meta(_qos(qos, lib.RRPC_CLASS_LOW_LATENCY),
                                         _deadline_ms(timeout), metadata)
        elif qos is None and timeout is None:
            opts = _DEFAULT_CALL_OPTS
        else:
            opts = _call_opts(_qos(qos, lib.RRPC_CLASS_LOW_LATENCY), _deadline_ms(timeout))
        mb = _methods.get(method)
        if mb is None:
            mb = _method_bytes(method)
        if data.__class__ is bytes:  # rrpc_call copies it
            n = len(data)
        else:
            data, n = _cbuf(data)
        try:
            w = _waits.pop()
        except IndexError:
            w = ffi.new("rrpcpy_wait *")
        w.started = 0  # a pooled record: only this call's rrpcpy_call may set it
        lock = core.lock
        with lock:
            if core.closing or core.closed or self._closed:
                _waits.append(w)
                raise _closed_error("context" if core.closing or core.closed else "connection")
            core.busy += 1
        try:
            try:
                r = _call_wait(core.ptr, self._ptr, mb, data, n, opts, w, 100)
            finally:
                with lock:  # _exit's common case inline: nothing deferred, nobody waiting
                    slow = core.busy == 1 and core.deferred or core.waiters
                    if not slow:
                        core.busy -= 1
                if slow:
                    core._exit()
            if r < 0:
                raise _error(r, core.ptr, "call %r" % method)
            while not r:
                r = self._wait_slice(w)
        except BaseException:  # KeyboardInterrupt between two slices, or as
            if w.started:  # rrpcpy_call returns: the completion must run
                self._cancel_wait(w)  # before w is reused (it goes back then)
            elif len(_waits) < _WAITS_MAX:
                _waits.append(w)
            raise
        del keep  # the metadata rrpc_call copied
        try:
            n = w.len
            if w.status == 0:
                r = _new_bytes(Reply, _buffer(w.data, n)) if n else _new_bytes(Reply)
                if w.nmeta:
                    r.metadata = _meta_read(w.meta, w.nmeta)
                return r
            msg = ffi.buffer(w.data, n)[:].decode("utf-8", "replace") if n else ""
            raise _call_error(w.status, msg, method, _meta_read(w.meta, w.nmeta))
        finally:
            if w.owned:  # an answer too big for the record, or metadata
                lib.rrpcpy_wait_clear(w)
            if len(_waits) < _WAITS_MAX:
                _waits.append(w)

    def _wait_slice(self, w):
        """Waits up to 100 ms more for the call of w: whether it is done.
        While the context closes, on the record alone (the close fails the
        call): the context must not be in use then."""
        core = self._core
        with core.lock:
            usable = not (core.closing or core.closed)
            if usable:
                core.busy += 1
        if not usable:
            return lib.rrpcpy_wait_for(w, 0, 100)
        try:
            return lib.rrpcpy_wait_more(core.ptr, w, 100)
        finally:
            core._exit()

    def _cancel_wait(self, w):
        core = self._core
        if not (self._closed or core.closing or core.closed):
            with core.use(self, "connection"):
                lib.rrpcpy_cancel(self._ptr, w)
        while not self._wait_slice(w):
            pass
        lib.rrpcpy_wait_clear(w)
        if len(_waits) < _WAITS_MAX:
            _waits.append(w)

    def acall(self, method: str, data: Optional[_Buffer] = b"", *, qos: Optional[_QoS] = None,
              timeout: Optional[float] = None,
              metadata: Optional[Metadata] = None) -> "asyncio.Future[bytes]":
        """asyncio: await conn.acall(...)."""
        return asyncio.wrap_future(self.call_async(method, data, qos=qos, timeout=timeout,
                                                   metadata=metadata))

    # -- one-sided --
    def _op(self, c_fn, what, local, local_offset, remote, remote_offset, length,
            qos, notify, result=None):
        core = self._core
        if not isinstance(local, Region):
            raise TypeError("local must be a Region")
        if not isinstance(remote, Token):
            remote = Token.from_bytes(remote)
        if length is None:
            length = min(local.nbytes - local_offset, remote.length - remote_offset)
        fut = core.future()
        opts = ffi.new("rrpc_op_opts *")
        opts.qos_class = _qos(qos, lib.RRPC_CLASS_BULK)
        if notify is not None:
            opts.notify = 1
            opts.imm = int(notify) & 0xFFFFFFFF
        tok = remote._c()

        def start(user):
            with local._use():
                r = c_fn(self._ptr, local._ptr, int(local_offset), tok, int(remote_offset),
                         int(length), opts, lib._rrpc_py_op_done, user)
                return _error(r, core.ptr, what) if r else None
        return core.submit(self, (fut, core, result, (local,), self), start, busy=local,
                           enders=(local,))

    def write_async(self, local: "Region", local_offset: int, remote: _TokenLike,
                    remote_offset: int = 0, length: Optional[int] = None, *,
                    qos: Optional[_QoS] = None, notify: Optional[int] = None
                    ) -> "concurrent.futures.Future[None]":
        """One-sided WRITE of length bytes of Region local at local_offset
        into the peer memory of Token remote at remote_offset.  notify: a
        32-bit value the target's notify callback receives once the data
        landed.  Returns a Future (result None)."""
        return self._op(lib.rrpc_write, "write", local, local_offset, remote, remote_offset,
                        length, qos, notify)

    def read_async(self, local: "Region", local_offset: int, remote: _TokenLike,
                   remote_offset: int = 0, length: Optional[int] = None, *,
                   qos: Optional[_QoS] = None) -> "concurrent.futures.Future[None]":
        """One-sided READ from the peer into Region local; returns a Future."""
        if local._readonly:
            raise RrpcError(lib.RRPC_E_REGION, "cannot READ into a read-only buffer")
        return self._op(lib.rrpc_read, "read", local, local_offset, remote, remote_offset,
                        length, qos, None)

    def write(self, local: "Region", local_offset: int, remote: _TokenLike,
              remote_offset: int = 0, length: Optional[int] = None, *,
              qos: Optional[_QoS] = None, notify: Optional[int] = None) -> None:
        """Blocking write_async: returns when the data is in the peer's memory."""
        self._core.check_blocking("write")
        self.write_async(local, local_offset, remote, remote_offset, length, qos=qos,
                         notify=notify).result()

    def read(self, local: "Region", local_offset: int, remote: _TokenLike,
             remote_offset: int = 0, length: Optional[int] = None, *,
             qos: Optional[_QoS] = None) -> None:
        """Blocking read_async: returns when the data is in local."""
        self._core.check_blocking("read")
        self.read_async(local, local_offset, remote, remote_offset, length, qos=qos).result()

    # -- tensors and KV pages (roce_rpc.tensor) --
    def send_tensor_async(self, name: str, array: Any, *, qos: Optional[_QoS] = None
                          ) -> "concurrent.futures.Future[None]":
        from .tensor import send_tensor_async
        return send_tensor_async(self, name, array, qos=qos)

    def send_tensor(self, name: str, array: Any, *, qos: Optional[_QoS] = None) -> None:
        """Sends numpy array as tensor name (dtype, shape and strides
        travel with it); returns when the receiver has it all."""
        self._core.check_blocking("send_tensor")
        self.send_tensor_async(name, array, qos=qos).result()

    def kv_transfer_async(self, src: Any, dst: Any, pairs: Any, *, qos: Optional[_QoS] = None,
                          notify: Optional[int] = None) -> "concurrent.futures.Future[int]":
        from .tensor import kv_transfer_async
        return kv_transfer_async(self, src, dst, pairs, qos=qos, notify=notify)

    def kv_transfer(self, src: Any, dst: Any, pairs: Any, *, qos: Optional[_QoS] = None,
                    notify: Optional[int] = None) -> int:
        """Copies pages of KvPool src into the peer's pool (KvToken dst):
        pairs is [(src_page, dst_page), ...] or an (n, 2) integer array.
        Returns the number of WRITEs the batch used."""
        self._core.check_blocking("kv_transfer")
        return self.kv_transfer_async(src, dst, pairs, qos=qos, notify=notify).result()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("up" if self._up else "down")
        return "<roce_rpc.Conn %s %s>" % (self.uri or ("accepted %#x" % _ptrint(self._ptr)),
                                          state)


class Listener(_Closable):
    """A listening endpoint (Context.listen).  .port, .uri, .connections."""

    def __init__(self, ctx: "Context", uri: str) -> None:
        core = ctx._core
        self._ctx = ctx
        self._core = core
        self._closed = False
        pp = ffi.new("rrpc_listener **")
        with core.use():
            r = lib.rrpc_listen(ctx._ptr, uri.encode(), lib._rrpc_py_conn_event, core.user, pp)
            if r:
                raise _error(r, ctx._ptr, "listen %s" % uri)
        self._ptr = pp[0]
        self.port = lib.rrpc_listener_port(self._ptr)
        self.uri = _with_port(uri, self.port)

    def handler(self, method: str, *, request: bool = False,
                on_worker: bool = False) -> Callable[[_F], _F]:
        """Same as Context.handler (handlers belong to the context)."""
        return self._ctx.handler(method, request=request, on_worker=on_worker)

    @property
    def context(self) -> "Context":
        """The Context that listens."""
        return self._ctx

    @property
    def connections(self) -> List["Conn"]:
        """The accepted connections that are up."""
        return list(self._core.accepted.values())

    def client_uri(self, src: Optional[str] = None) -> str:
        """The URI a client connects to, optionally with ?src=ADDR."""
        return self.uri + ("?src=%s" % src if src else "")

    def close(self) -> None:
        if getattr(self, "_core", None) is None or not hasattr(self, "_ptr"):
            return
        ptr = self._ptr
        self._core.retire(self, lambda: lib.rrpc_listener_close(ptr))


def _with_port(uri, port):
    scheme, _, rest = uri.partition("://")
    rest, q, query = rest.partition("?")
    host = rest.rsplit(":", 1)[0] if not rest.endswith("]") else rest
    return "%s://%s:%d%s%s" % (scheme, host, port, q, query)


# ---- memory -----------------------------------------------------------------

def _access_bits(access):
    if isinstance(access, str):
        bits = 0
        for ch in access:
            if ch == "r":
                bits |= REMOTE_READ
            elif ch == "w":
                bits |= REMOTE_WRITE
            elif ch != "-":
                raise ValueError("access letters are 'r' and 'w'")
        return bits
    return int(access)


class Token:
    """What a peer needs to access a region (rrpc_token); 32 bytes on the wire."""

    __slots__ = ("addr", "length", "key", "access")

    def __init__(self, addr: int, length: int, key: int, access: int) -> None:
        self.addr, self.length, self.key, self.access = addr, length, key, access

    @classmethod
    def from_bytes(cls, b: _Buffer) -> "Token":
        t = ffi.new("rrpc_token *")
        buf, n = _cbuf(b)
        r = lib.rrpc_token_decode(buf, n, t)
        if r:
            raise RrpcError(r, "not a region token (%d bytes)" % n)
        return cls._from_c(t)

    @classmethod
    def _from_c(cls, t):
        return cls(t.addr, t.len, t.key, t.access)

    def _c(self):
        t = ffi.new("rrpc_token *")
        t.addr, t.len, t.key, t.access = self.addr, self.length, self.key, self.access
        return t

    def to_bytes(self) -> bytes:
        out = ffi.new("uint8_t[32]")
        lib.rrpc_token_encode(self._c(), out)
        return bytes(ffi.buffer(out))

    __bytes__ = to_bytes

    def __eq__(self, o: object) -> bool:
        return isinstance(o, Token) and (self.addr, self.length, self.key, self.access) == (
            o.addr, o.length, o.key, o.access)

    def __repr__(self) -> str:
        return "<Token addr=%#x len=%d access=%d>" % (self.addr, self.length, self.access)


class Region(_Closable):
    """Registered memory (Context.register_memory).  Zero copy: the library
    reads and writes obj's own memory.  Keeps obj and the Context alive."""

    def __init__(self, ctx: "Context", obj: _Buffer,
                 access: Union[int, str] = REMOTE_READ | REMOTE_WRITE) -> None:
        core = ctx._core
        self._ctx = ctx
        self._core = core
        self._closed = False
        self._ops = 0
        self._close_pending = False
        access = _access_bits(access)
        self._readonly = False
        try:
            self._buf = ffi.from_buffer("char[]", obj, require_writable=True)
        except (TypeError, BufferError, ValueError):
            if access & REMOTE_WRITE:
                raise
            self._buf = ffi.from_buffer("char[]", obj)  # read-only: a WRITE source only
            self._readonly = True
        self.obj = obj
        self.nbytes = len(self._buf)
        self.access = access
        pp = ffi.new("rrpc_region **")
        with core.use():
            r = lib.rrpc_mem_reg(ctx._ptr, self._buf, self.nbytes, access, pp)
            if r:
                raise _error(r, ctx._ptr, "register %d bytes" % self.nbytes)
        self._ptr = pp[0]
        self.addr = _ptrint(self._buf)
        core.regions[id(self)] = self

    @property
    def context(self) -> "Context":
        """The Context the memory is registered with."""
        return self._ctx

    @property
    def closed(self) -> bool:
        """Whether the region is deregistered."""
        return self._closed

    def token(self, conn: "Conn") -> Token:
        """The Token with which the peer of conn may access this region."""
        t = ffi.new("rrpc_token *")
        with self._core.use(self, "region"), self._core_conn(conn):
            r = lib.rrpc_region_token(self._ptr, conn._ptr, t)
            err = _error(r, self._core.ptr, "region token") if r else None
        if r:
            raise err
        return Token._from_c(t)

    def _core_conn(self, conn):
        return _ConnUse(conn)

    def grant(self, conn: "Conn", offset: int, length: int,
              access: Union[int, str] = REMOTE_READ | REMOTE_WRITE,
              expires: Optional[float] = None, qos: Optional[_QoS] = None) -> "Grant":
        """Grants the peer of conn access to [offset, offset + length) of this
        region (rrpc_region_grant): access is a subset of the region's ("r",
        "w", "rw" or REMOTE_* bits), expires is in seconds (None: never), qos
        the class the peer's operations must use (default "bulk").  Returns a
        Grant whose token the peer uses like a region's; revoke it with
        Grant.revoke() or a with block.  Blocks until the grant is in force
        (on verbs the NIC binds a memory window): from a handler, register it
        with on_worker=True (else RrpcError E_DEADLOCK).  Raises RrpcError:
        E_REGION (range outside), E_ACCESS (rights the region lacks),
        E_CLOSED, E_LIMIT (RRPC_MAX_GRANTS)."""
        return Grant(self, conn, offset, length, access, expires, qos)


    def contains(self, addr: int, n: int) -> bool:
        """Whether n bytes at address addr are inside the region."""
        return self.addr <= addr and addr + n <= self.addr + self.nbytes

    # in-flight operations keep the region registered
    def _use(self):
        with self._core.lock:
            if self._closed:
                raise _closed_error("region")
        return _Null

    def _op_begin(self):
        with self._core.lock:
            if self._closed:
                raise _closed_error("region")
            self._ops += 1

    def _op_end(self):
        with self._core.lock:
            self._ops -= 1
            run = self._ops == 0 and self._close_pending
            self._close_pending = False
        if run:
            self._really_close()

    def close(self) -> None:
        """Deregisters (deferred until operations in flight complete)."""
        if getattr(self, "_core", None) is None or not hasattr(self, "_ptr"):
            return
        with self._core.lock:
            if self._ops:
                self._close_pending = True
                return
        self._really_close()

    def _really_close(self):
        ptr = self._ptr
        self._core.retire(self, lambda: lib.rrpc_mem_dereg(ptr))

    def __repr__(self) -> str:
        return "<roce_rpc.Region %s bytes at %#x%s>" % (
            getattr(self, "nbytes", "?"), getattr(self, "addr", 0),
            " closed" if getattr(self, "_closed", True) else "")


class _NullCM:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


_Null = _NullCM()


class Grant(_Closable):
    """One peer's access to part of a Region (Region.grant), revocable.
    Its token is sent to the peer; revoke() (or the end of a with block)
    ends it: from then on no access through it succeeds."""

    def __init__(self, region: Region, conn: "Conn", offset: int, length: int,
                 access: Union[int, str], expires: Optional[float],
                 qos: Optional[_QoS]) -> None:
        self._core = region._core
        self._closed = False
        opts = ffi.new("rrpc_grant_opts *")
        opts.qos_class = _qos(qos, 0)
        if expires is not None:
            if expires <= 0:
                raise ValueError("expires must be > 0 seconds (or None)")
            opts.expires_ms = max(1, int(expires * 1000))
        gp = ffi.new("rrpc_grant **")
        t = ffi.new("rrpc_token *")
        with self._core.use(region, "region"), region._core_conn(conn):
            r = lib.rrpc_region_grant(region._ptr, conn._ptr, offset, length,
                                      _access_bits(access), opts, gp, t)
            err = _error(r, self._core.ptr, "grant") if r else None
        if err:
            raise err
        self._ptr = gp[0]
        self.token = Token._from_c(t)
        self.region = region
        self._core.regions[id(self)] = self  # marked closed when the context closes

    @property
    def closed(self) -> bool:
        """Whether the grant is revoked (or its context closed)."""
        return self._closed

    def revoke(self) -> None:
        """Ends the grant and frees it; idempotent."""
        if getattr(self, "_core", None) is None or not hasattr(self, "_ptr"):
            return
        ptr = self._ptr
        self._core.retire(self, lambda: lib.rrpc_grant_revoke(ptr))

    close = revoke

    def __repr__(self) -> str:
        t = getattr(self, "token", None)
        return "<roce_rpc.Grant %s bytes at %#x%s>" % (
            t.length if t else "?", t.addr if t else 0,
            " revoked" if getattr(self, "_closed", True) else "")


class _ConnUse:
    """Checks that conn is open and of the same context for a handle use."""

    def __init__(self, conn):
        if not isinstance(conn, Conn):
            raise TypeError("expected a Conn")
        if conn._closed:
            raise _closed_error("connection")
        self.conn = conn

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _close_all() -> None:
    """Closes every context still open when the interpreter exits, while its
    threads can still take the GIL: a context left to the garbage collector
    of a finalizing interpreter had its loop thread stopped inside a Python
    callback (CPython ends a thread that asks for the GIL then), holding the
    context's lock, and the process hung in rrpc_ctx_destroy."""
    for ctx in list(_live):
        try:
            ctx.close()
        except Exception:
            pass


atexit.register(_close_all)


def __dir__() -> List[str]:
    return sorted(__all__)
