"""Tensors and KV-cache pages over <roce_rpc/tensor.h>, with numpy.

Sending a tensor: conn.send_tensor("name", array).  The array is sent from
where it is (zero copy): from a registered Region of the connection's context
that holds it, or else its memory is registered for the duration of the send.
dtype, shape and strides travel with it.

Receiving: srv = ctx.serve_tensors(); name, array = srv.receive().  By
default every tensor lands in a fresh numpy array of its dtype and shape
(registered for the transfer); alloc(conn, name, dtype, shape) may return an
array of its own instead (for example a view of a registered buffer), and
on_tensor(conn, name, array) replaces the queue.  A byte budget
(max_bytes, default 1 GiB) bounds what peers can make the receiver hold:
tensors offered and still arriving, plus, with the default alloc and the
queue, arrays waiting for receive(); offers beyond it are refused.

KV pages: pool = ctx.kv_pool(array) over an array whose first dimension
counts pages; pool.token(conn) goes to the peer (KvToken, 48 bytes); the
peer calls conn.kv_transfer(its_pool, token, [(src, dst), ...]).
"""
import contextlib
import errno
import logging
import operator
import os as _os
import queue
import threading
import weakref
from typing import Any, Callable, Optional, Tuple

import numpy as np

from ._rrpc import ffi, lib
from . import _core, _dlpack
from ._dlpack import DLPackTensor, export as to_dlpack
from ._core import (RrpcError, Region, Token, _cbuf, _closed_error, _error, _InCallback, _keep,
                    _key, _last_line, _ptrint, _qos, _registry, strerror)

__all__ = ["KvPool", "KvToken", "TensorServer", "ReceivePool", "write_count", "to_dlpack",
           "DLPackTensor", "dtype_to_rrpc", "dtype_from_rrpc",
           "send_tensor_async", "kv_transfer_async", "MAX_DIMS", "KV_TOKEN_SIZE"]

log = logging.getLogger("roce_rpc")

MAX_DIMS = lib.RRPC_TENSOR_MAX_DIMS
KV_TOKEN_SIZE = lib.RRPC_KV_TOKEN_SIZE


# ---- dtypes -----------------------------------------------------------------

def _bf16():
    try:
        import ml_dtypes  # optional
        return np.dtype(ml_dtypes.bfloat16)
    except ImportError:
        return None


def dtype_to_rrpc(dtype: Any) -> int:
    """The rrpc_dtype of a numpy dtype (native byte order); TypeError if none."""
    dt = np.dtype(dtype)
    if not dt.isnative:
        raise TypeError("dtype %s is not in native byte order" % dt)
    r = lib.rrpc_dtype_from_name(dt.name.encode())
    if r < 0:
        raise TypeError("dtype %s has no rrpc_dtype" % dt)
    return r


def dtype_from_rrpc(code: int) -> Any:
    """The numpy dtype of an rrpc_dtype.  bfloat16 needs ml_dtypes; without
    it bfloat16 tensors are received as uint16 (the same bits)."""
    name = lib.rrpc_dtype_name(int(code))
    if name == ffi.NULL:
        raise TypeError("unknown rrpc_dtype %d" % code)
    name = ffi.string(name).decode()
    if name == "bfloat16":
        return _bf16() or np.dtype(np.uint16)
    return np.dtype(name)


# ---- describing arrays ------------------------------------------------------

def _addr(a):
    return a.__array_interface__["data"][0]


def _span(a):
    """[lo, hi) of the bytes the elements of a occupy."""
    base = _addr(a)
    if a.size == 0:
        return base, base
    lo = hi = base
    for n, st in zip(a.shape, a.strides):
        if st < 0:
            lo += (n - 1) * st
        else:
            hi += (n - 1) * st
    return lo, hi + a.itemsize


def _find_region(core, lo, hi, writable):
    for r in list(core.regions.values()):
        if not r._closed and r.contains(lo, hi - lo) and (not writable or not r._readonly):
            if writable and not r.access & _core.REMOTE_WRITE:
                continue
            return r
    return None


def _root(a):
    """The outermost ndarray owning a's memory, as a C-contiguous array
    over that memory (a Fortran-ordered owner is taken transposed), or None."""
    b = a
    while isinstance(b.base, np.ndarray):
        b = b.base
    if b.flags.c_contiguous:
        return b
    return b.T if b.flags.f_contiguous else None


def _region_for(ctx_or_core, a, writable):
    """(Region, temporary?) holding every byte of a."""
    core = ctx_or_core
    lo, hi = _span(a)
    r = _find_region(core, lo, max(hi, lo + 1), writable)
    if r is not None:
        return r, False
    ctx = core.ctx_ref()
    if ctx is None:
        raise _closed_error("context")
    access = _core.REMOTE_WRITE if writable else 0
    for cand in (a, a.T, _root(a)):
        if cand is None or not cand.flags.c_contiguous or cand.nbytes == 0:
            continue
        clo = _addr(cand)
        if clo <= lo and hi <= clo + cand.nbytes:
            return Region(ctx, cand, access), True
    raise ValueError("the array's memory cannot be registered as it is (no owner contiguous "
                     "in C or Fortran order); register its buffer with Context.register() or "
                     "send a copy")


def _describe(t, a, region, offset=None, code=None):
    if a.ndim > MAX_DIMS:
        raise ValueError("at most %d dimensions" % MAX_DIMS)
    t.dtype = dtype_to_rrpc(a.dtype) if code is None else code
    t.ndim = a.ndim
    for i, (n, st) in enumerate(zip(a.shape, a.strides)):
        t.shape[i] = n
        t.strides[i] = st
    t.region = region._ptr
    t.offset = _addr(a) - region.addr if offset is None else offset


def _empty_region(core, writable):
    """A 1-byte region for an empty tensor (it must point somewhere)."""
    ctx = core.ctx_ref()
    if ctx is None:
        raise _closed_error("context")
    return Region(ctx, np.zeros(1, np.uint8), _core.REMOTE_WRITE if writable else 0)


def _dense(dtype, shape, strides):
    """A new array of shape whose strides are strides (dense, in some
    memory order), so it receives a tensor of that layout in one piece."""
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if n == 0 or len(shape) < 2:
        return np.empty(shape, dtype)
    return np.ndarray(shape, dtype, buffer=np.empty(n * dtype.itemsize, np.uint8),
                      strides=strides)


def _layout(a):
    t = ffi.new("rrpc_tensor *")
    t.dtype = dtype_to_rrpc(a.dtype)
    t.ndim = a.ndim
    for i, (n, st) in enumerate(zip(a.shape, a.strides)):
        t.shape[i] = n
        t.strides[i] = st
    return t


def write_count(src: Any, dst: Any) -> int:
    """How many WRITEs sending array src into an array laid out as dst
    takes (rrpc_tensor_write_count): 1 when both are contiguous in the same
    memory order, one per element for a transpose into a C-contiguous array.
    0 for an empty tensor or layouts that do not match in dtype and shape."""
    src, dst = np.asarray(src), np.asarray(dst)
    if src.ndim > MAX_DIMS or dst.ndim > MAX_DIMS:
        raise ValueError("at most %d dimensions" % MAX_DIMS)
    return int(lib.rrpc_tensor_write_count(_layout(src), _layout(dst)))


# ---- sending ----------------------------------------------------------------

class _Temp:
    """Deregisters a temporary region once the operation using it ended."""
    __slots__ = ("region",)

    def __init__(self, region):
        self.region = region

    def _op_end(self):
        self.region.close()


def _as_array(obj):
    """(numpy array, rrpc dtype code or None) of what send_tensor takes:
    a numpy array, or any DLPack CPU tensor (a torch tensor, ...)."""
    if not isinstance(obj, np.ndarray) and hasattr(obj, "__dlpack__") and \
            hasattr(obj, "__dlpack_device__"):
        return _dlpack.consume(obj)
    return np.asarray(obj), None


def send_tensor_async(conn: Any, name: str, array: Any, *, qos: Any = None) -> Any:
    core = conn._core
    a, code = _as_array(array)
    t = ffi.new("rrpc_tensor *")
    if a.size == 0:
        region, temp = _empty_region(core, False), True
        _describe(t, a, region, 0, code)
    else:
        region, temp = _region_for(core, a, writable=False)
        _describe(t, a, region, code=code)
    fut = core.future()
    enders = (region, _Temp(region)) if temp else (region,)

    def start(user):
        opts = ffi.new("rrpc_tensor_send_opts *")
        opts.qos_class = _qos(qos, lib.RRPC_CLASS_BULK)
        r = lib.rrpc_tensor_send_with(conn._ptr, name.encode(), t, opts, lib._rrpc_py_op_done,
                                      user)
        return _error(r, core.ptr, "send tensor %r" % name) if r else None
    return core.submit(conn, (fut, core, None, enders, conn, a, 'tensor "%s"' % name), start,
                       busy=region, enders=enders)


# ---- receiving --------------------------------------------------------------

class _TServerState:
    """What the C callbacks of one rrpc_tensor_server reach."""

    def __init__(self, core, alloc, on_tensor, max_bytes, pool=None, recycler=None):
        self.core = core
        self.alloc = alloc
        self.pool = pool
        self.recycler = recycler
        self.wakeup = None   # roce_rpc.aio: called after each queue.put
        self.on_tensor = on_tensor
        self.max_bytes = max_bytes
        self.queue = queue.Queue()
        self.arriving = 0    # bytes of the tensors accepted and still arriving
        self.queued = 0      # bytes of the arrays we allocated waiting in the queue
        self.qlock = threading.Lock()  # guards arriving and queued
        self.refusing = False
        self.inflight = {}   # (conn, region, offset) -> (array, temp region or None, region,
        #                       bytes arriving, bytes to count in self.queued once arrived)
        self.ptr = ffi.NULL
        self.closed = False

    def check_room(self, name, nbytes):
        """The default receiver queues what arrives until receive(): those
        arrays hold memory as much as the ones still arriving do, so they
        count against the same budget.  Raises RrpcError(-ENOBUFS)."""
        with self.qlock:
            queued, held = self.queued, self.arriving + nbytes
        if queued + held <= self.max_bytes:
            self.refusing = False
            return
        if not self.refusing:  # once per episode: a peer must not flood the log
            self.refusing = True
            log.warning("roce_rpc: refusing tensor %r (%d bytes): %d bytes of received "
                        "tensors wait for receive() and %d are arriving, against a budget of "
                        "%d bytes (TensorServer max_bytes)", name, nbytes, queued, held,
                        self.max_bytes)
        raise RrpcError(-errno.ENOBUFS, "the receive queue is full")

    def drop_conn(self, conn):
        if self.ptr != ffi.NULL and not self.closed:
            lib.rrpc_tensor_server_drop_conn(self.ptr, conn)

    def close_now(self):
        if self.closed:
            return
        self.closed = True
        self.core.tservers.pop(self.key, None)
        if self.ptr != ffi.NULL:
            lib.rrpc_tensor_server_close(self.ptr)
        if self.recycler is not None:
            self.recycler.close()
        self.core.forget(self.key)
        self.queue.put(None)
        if self.wakeup is not None:
            self.wakeup()


@ffi.def_extern()
def _rrpc_py_tensor_alloc(conn, name, incoming, ret_dest, user):
    st = _registry.get(_key(user))
    if st is None or st.closed:
        return lib.RRPC_E_CLOSED
    core = st.core
    try:
        with _InCallback(core):
            dtype = dtype_from_rrpc(incoming.dtype)
            shape = tuple(incoming.shape[i] for i in range(incoming.ndim))
            nm = ffi.string(name).decode("utf-8", "replace")
            a = None
            counted = 0
            if st.alloc is not None:
                a = st.alloc(core.conn_for(conn), nm, dtype, shape)
            # the sender's memory order (RRPC_TENSOR_SERVE_SENDER_ORDER): a
            # destination laid out the same way takes the fewest WRITEs
            strides = tuple(incoming.strides[i] for i in range(incoming.ndim))
            if a is None and st.pool is not None:
                a = st.pool._take(dtype, shape, strides)
            if a is None:
                # the C server checked the offer against the budget already
                if st.on_tensor is None:
                    counted = int(lib.rrpc_tensor_nbytes(incoming))
                    st.check_room(nm, counted)
                if st.recycler is not None:
                    a = st.recycler.take(dtype, shape, strides)
                if a is None:
                    a = _dense(dtype, shape, strides)
            a = np.asarray(a)
            if a.shape != shape or a.dtype.itemsize != dtype.itemsize:
                raise RrpcError(-33, "alloc returned %s %s for %s %s" % (
                    a.dtype, a.shape, dtype, shape))  # -EDOM
            if not a.flags.writeable:
                raise ValueError("alloc returned a read-only array")
            if a.size == 0:
                region, temp = _empty_region(core, True), True
                _describe(ret_dest, a, region, 0)
                ret_dest.dtype = incoming.dtype
            else:
                region, temp = _region_for(core, a, writable=True)
                _describe(ret_dest, a, region)
                ret_dest.dtype = incoming.dtype  # (bfloat16 received as uint16)
            region._op_begin()
            nbytes = int(lib.rrpc_tensor_nbytes(incoming))
            with st.qlock:
                st.arriving += nbytes
            st.inflight[(_ptrint(conn), _ptrint(ret_dest.region), int(ret_dest.offset))] = (
                a, region if temp else None, region, nbytes, counted)
            return 0
    except RrpcError as e:
        return e.code
    except Exception as e:
        log.warning("roce_rpc: tensor alloc failed: %s", _last_line(e))
        return 1


@ffi.def_extern()
def _rrpc_py_tensor_done(conn, name, dest, status, user):
    st = _registry.get(_key(user))
    if st is None:
        return
    core = st.core
    try:
        with _InCallback(core):
            nm = ffi.string(name).decode("utf-8", "replace")
            ent = st.inflight.pop((_ptrint(conn), _ptrint(dest.region), int(dest.offset)), None)
            if ent is None:
                return
            a, temp, region, nbytes, counted = ent
            with st.qlock:
                st.arriving -= nbytes
            region._op_end()
            if temp is not None:
                temp.close()
            c = core.conn_for(conn)
            if status == 0:
                item = (nm, a, counted)
            else:
                err = RrpcError(status, "tensor %r: %s" % (nm, strerror(status)))
                err.tensor_name = nm
                item = (nm, err, 0)
            if st.on_tensor is not None:
                if status == 0:
                    st.on_tensor(c, nm, a)
                else:
                    log.warning("roce_rpc: %s", item[1])
            else:
                if item[2]:
                    with st.qlock:
                        st.queued += item[2]
                st.queue.put(item)
                if st.wakeup is not None:
                    st.wakeup()
    except Exception:
        log.exception("roce_rpc: tensor done callback failed")


def _nbytes(dtype, shape):
    return int(np.prod(shape, dtype=np.int64)) * dtype.itemsize if shape else dtype.itemsize


def _lent_array(buf, lo, n, dtype, shape, strides, give_back, arg):
    """An array of shape over n bytes of buf from lo; give_back(arg)
    runs once it and every view of it are gone.  The owner of that memory
    for numpy is an array over a memoryview, so every view made of what
    the user receives keeps this very object alive (numpy collapses view
    chains only through arrays that do not own their memory)."""
    owner = np.frombuffer(memoryview(buf)[lo:lo + n], np.uint8)
    weakref.finalize(owner, give_back, arg)
    return np.ndarray(shape, dtype, buffer=owner, strides=strides)


class ReceivePool:
    """Registered receive destinations, reused across receives
    (Context.receive_pool(slot_bytes, count)).

    The memory (count slots of slot_bytes, rounded up to 4 KiB) is
    allocated, written once and registered when the pool is made, so no
    receive pays for fresh pages or a registration: without a pool the
    first receive of a large tensor does both (measured in docs/python.md).
    A TensorServer given pool= lands each tensor that fits in a free slot;
    one that is larger than a slot, or arrives while every slot is in use,
    gets a new array as without a pool (counted in .misses).  A slot is
    free again once the received array and every view of it are gone; the
    pool holds no reference to them.  Close the pool (or let it be
    collected) after the servers that use it."""

    def __init__(self, ctx: Any, slot_bytes: int, count: int = 2) -> None:
        slot_bytes, count = int(slot_bytes), int(count)
        if slot_bytes <= 0 or count <= 0:
            raise ValueError("slot_bytes and count must be positive")
        self._ctx = ctx
        self.slot_bytes = (slot_bytes + 4095) & ~4095
        self.count = count
        self._buf = np.empty(self.slot_bytes * count, np.uint8)
        self._buf.fill(0)  # fault every page in now, not during a receive
        self.region = Region(ctx, self._buf, _core.REMOTE_WRITE)
        self._free = list(range(count - 1, -1, -1))
        self._lock = threading.Lock()
        self.hits = 0    # tensors received into a slot
        self.misses = 0  # tensors that did not fit a slot or found none free

    def _take(self, dtype, shape, strides=None):
        nbytes = _nbytes(dtype, shape)
        with self._lock:
            if not 0 < nbytes <= self.slot_bytes or not self._free or self.region.closed:
                self.misses += 1
                return None
            i = self._free.pop()
            self.hits += 1
        lo = i * self.slot_bytes
        return _lent_array(self._buf, lo, nbytes, dtype, shape, strides, self._give_back, i)

    def _give_back(self, i):
        with self._lock:
            self._free.append(i)

    @property
    def free(self) -> int:
        """Slots free now."""
        with self._lock:
            return len(self._free)

    def close(self) -> None:
        """Deregisters the pool's memory (after its servers are closed)."""
        self.region.close()

    def __repr__(self):
        return "<roce_rpc.ReceivePool %d x %d bytes, %d free>" % (
            self.count, self.slot_bytes, self.free)


KEEP_BYTES_DEFAULT = 512 << 20  # TensorServer keep_bytes


class _Recycler:
    """The default receiver's memory, kept registered after its arrays are
    gone, so the next receive of a like size neither faults fresh pages in
    nor registers again (TensorServer keep_bytes).

    Only tensors of at least RECYCLE_MIN bytes are served from here (below
    that a new array costs little).  A kept buffer serves a tensor of n bytes
    if it holds n to 2n, so a small tensor never pins a large buffer.  At
    most keep_bytes of idle buffers are kept, the least recently returned
    are deregistered first.  A buffer comes back once the received array
    and every view of it are gone; the recycler holds no reference to them."""

    RECYCLE_MIN = 1 << 20

    def __init__(self, ctx, keep_bytes):
        self._ctx = ctx
        self._core = ctx._core
        self.keep_bytes = keep_bytes
        self._lock = threading.Lock()
        self._owner = None   # the thread in a critical section: a finalizer run
        #                      there by the collector must not wait for the lock
        self._returned = []  # what such a finalizer gave back
        self._idle = []      # [capacity, buffer, region], least recently returned first
        self._dead = []      # regions to deregister where that cannot deadlock
        self.idle_bytes = 0
        self.reused = 0      # receives served from kept memory
        self.closed = False

    def take(self, dtype, shape, strides):
        """An array of shape and strides over kept (or new, kept later)
        registered memory, or None when the tensor is too small or too large
        to keep.  Runs in the alloc callback."""
        self._reap()
        n = _nbytes(dtype, shape)
        if n < self.RECYCLE_MIN or n > self.keep_bytes:
            return None
        ent = None
        with self._held():
            if self.closed:
                return None
            for e in self._idle:
                if n <= e[0] <= 2 * n and (ent is None or e[0] < ent[0]):
                    ent = e
            if ent is not None:
                self._idle.remove(ent)
                self.idle_bytes -= ent[0]
                self.reused += 1
        if ent is None:
            cap = (n + 4095) & ~4095
            buf = np.empty(cap, np.uint8)
            ent = [cap, buf, Region(self._ctx, buf, _core.REMOTE_WRITE)]
        return _lent_array(ent[1], 0, n, dtype, shape, strides, self._give_back, ent)

    def warm(self, nbytes):
        """Keeps a buffer of nbytes (rounded up to a page) whose every page
        is in memory, registered: the next tensor of nbytes/2 to nbytes
        lands there with no page fault.  Returns its capacity."""
        n = operator.index(nbytes)
        if n < self.RECYCLE_MIN or n > self.keep_bytes:
            raise ValueError("warm: %d bytes is outside what the default receiver keeps: "
                             "%d (1 MiB) to keep_bytes=%d; raise keep_bytes= of "
                             "serve_tensors, or use receive_pool()"
                             % (n, self.RECYCLE_MIN, self.keep_bytes))
        cap = (n + 4095) & ~4095
        buf = np.empty(cap, np.uint8)
        buf[::4096] = 0  # one write a page: the kernel faults every page in now
        buf[-1] = 0  # (the buffer need not start on a page: its last one)
        ent = [cap, buf, Region(self._ctx, buf, _core.REMOTE_WRITE)]
        with self._held():
            if self.closed:
                self._dead.append(ent[2])
            else:
                self._keep(ent)
        self._reap()
        if self.closed:
            raise _core._closed_error("tensor server")
        return cap

    @contextlib.contextmanager
    def _held(self):
        with self._lock:
            self._owner = threading.get_ident()
            try:
                yield
                for ent in self._returned:  # (a finalizer may add while this runs)
                    self._keep(ent)
                self._returned = []
            finally:
                self._owner = None

    def _keep(self, ent):
        if self.closed or ent[2].closed or ent[0] > self.keep_bytes:
            self._dead.append(ent[2])
            return
        self._idle.append(ent)
        self.idle_bytes += ent[0]
        while self.idle_bytes > self.keep_bytes:
            old = self._idle.pop(0)
            self.idle_bytes -= old[0]
            self._dead.append(old[2])

    def _give_back(self, ent):
        # Runs wherever the last view dies: maybe in this recycler's critical
        # section (the cyclic collector), or in a thread holding the
        # context's lock, where deregistering must wait for the next _reap.
        if self._owner == threading.get_ident():
            self._returned.append(ent)
            return
        with self._held():
            self._keep(ent)
        if self._core.lock.acquire(blocking=False):
            self._core.lock.release()
            self._reap()

    def _reap(self):
        with self._held():
            dead, self._dead = self._dead, []
        for r in dead:
            r.close()

    def close(self):
        """Deregisters every idle buffer; buffers still in arrays are
        deregistered when they come back."""
        with self._held():
            self.closed = True
            self._dead += [e[2] for e in self._idle]
            self._idle, self.idle_bytes = [], 0
        self._reap()


class TensorServer(_core._Closable):
    """Makes a Context accept tensors (rrpc_tensor_serve).

    alloc(conn, name, dtype, shape) -> a writable numpy array of that dtype
    and shape (any strides; it must lie in a Region registered with
    REMOTE_WRITE, or be C-contiguous so it can be registered), or None for a
    new array.  on_tensor(conn, name, array) runs on the loop thread once
    every byte has landed; without it, receive() returns (name, array).

    max_bytes (None: the RRPC_TENSOR_MAX_BYTES environment variable, else
    1 GiB, lib.RRPC_TENSOR_MAX_BYTES_DEFAULT; as in C) is the byte
    budget for what peers can make this server hold: the tensors offered and
    still arriving (rrpc_tensor_server_opts.max_bytes), plus the arrays the
    default alloc made that wait in the queue for receive().  An offer that
    does not fit is refused before anything is allocated: the sender's
    send_tensor raises RrpcError(-errno.ENOBUFS) saying so.

    pool: a ReceivePool (Context.receive_pool) that the default alloc takes
    destinations from before it makes a new array; arrays from the pool do
    not count against max_bytes (the pool is memory already held).

    keep_bytes (None: KEEP_BYTES_DEFAULT, 512 MiB; 0: keep nothing): the
    default alloc's arrays of 1 MiB or more lie in memory that stays
    registered after the arrays are gone, up to this many idle bytes, and
    the next tensor of 1 to 2 times a kept buffer's size lands there: only
    the first receive of a size pays for fresh pages and a registration.
    .reused counts the receives served so; close() releases what is kept."""

    def __init__(self, ctx: Any, alloc: Optional[Callable[..., Any]] = None,
                 on_tensor: Optional[Callable[..., Any]] = None, *,
                 max_bytes: Optional[int] = None, pool: Optional["ReceivePool"] = None,
                 keep_bytes: Optional[int] = None) -> None:
        if max_bytes is None:  # the C default, which the context read when it was made
            max_bytes = int(_os.environ.get("RRPC_TENSOR_MAX_BYTES", "0"), 0) or \
                lib.RRPC_TENSOR_MAX_BYTES_DEFAULT
        max_bytes = int(max_bytes)
        if not 0 < max_bytes < 1 << 64:
            raise ValueError("max_bytes must be a positive number of bytes (or None: 1 GiB)")
        core = ctx._core
        self._ctx = ctx
        self._core = core
        if pool is not None and (not isinstance(pool, ReceivePool) or pool._ctx is not ctx):
            raise ValueError("pool must be a ReceivePool of the same Context")
        keep_bytes = KEEP_BYTES_DEFAULT if keep_bytes is None else int(keep_bytes)
        if not 0 <= keep_bytes < 1 << 63:
            raise ValueError("keep_bytes must be a number of bytes >= 0 (0 keeps nothing)")
        recycler = _Recycler(ctx, keep_bytes) if keep_bytes else None
        self._st = st = _TServerState(core, alloc, on_tensor, max_bytes, pool, recycler)
        st.key, user = _keep(st)
        core.keys.add(st.key)
        pp = ffi.new("rrpc_tensor_server **")
        opts = ffi.new("rrpc_tensor_server_opts *")
        opts.max_bytes = max_bytes
        opts.flags = lib.RRPC_TENSOR_SERVE_SENDER_ORDER
        with core.use():
            r = lib.rrpc_tensor_serve_with(ctx._ptr, lib._rrpc_py_tensor_alloc,
                                           lib._rrpc_py_tensor_done, user, opts, pp)
            err = _error(r, ctx._ptr, "serve tensors") if r else None
        if r:
            core.forget(st.key)
            raise err
        st.ptr = pp[0]
        core.tservers[st.key] = st

    def receive(self, timeout: Optional[float] = None) -> Tuple[str, Any]:
        """(name, array) of the next tensor that arrived; raises the
        RrpcError of a failed one (with .tensor_name), RrpcTimeoutError (a
        TimeoutError) after timeout s."""
        try:
            item = self._st.queue.get(timeout=timeout)
        except queue.Empty:
            raise RrpcError(lib.RRPC_E_DEADLINE, "no tensor within %s s" % timeout) from None
        if item is None:
            self._st.queue.put(None)
            raise _closed_error("tensor server")
        if item[2]:
            with self._st.qlock:
                self._st.queued -= item[2]
        if isinstance(item[1], RrpcError):
            raise item[1]
        return item[:2]

    @property
    def max_bytes(self) -> int:
        """The byte budget (see the class)."""
        return self._st.max_bytes

    def _recycler_figure(self, name):
        r = self._st.recycler
        return getattr(r, name) if r is not None else 0

    @property
    def keep_bytes(self) -> int:
        """The bound on idle kept memory (see the class); 0: none kept."""
        return self._recycler_figure("keep_bytes")

    @property
    def kept_bytes(self) -> int:
        """Idle memory kept registered for the next receives now."""
        return self._recycler_figure("idle_bytes")

    @property
    def reused(self) -> int:
        """Receives that landed in kept memory."""
        return self._recycler_figure("reused")

    @property
    def bytes_held(self) -> int:
        """Bytes of the budget in use: tensors still arriving, plus arrays
        of the default alloc waiting for receive()."""
        st = self._st
        with st.qlock:
            return st.arriving + st.queued

    def warm(self, nbytes: int) -> int:
        """Pays up front for a first receive of about nbytes (1 MiB up to
        keep_bytes): allocates a buffer of nbytes rounded up to a page,
        faults every page of it in and registers it, and keeps it as the
        default receiver keeps memory (kept_bytes; keep_bytes bounds it, the
        least recently kept let go first).  The next tensor of nbytes/2 to
        nbytes then lands there with no page fault (reused counts it).
        Returns the buffer's size.  Raises ValueError for a size outside
        1 MiB..keep_bytes (keep_bytes=0: the server keeps nothing to warm),
        RrpcError(E_CLOSED) once closed."""
        rc = self._st.recycler
        if self._st.closed:
            raise _core._closed_error("tensor server")
        if rc is None:
            raise ValueError("warm: this tensor server keeps no memory (keep_bytes=0)")
        return rc.warm(nbytes)

    def close(self) -> None:
        """Stops serving; tensors still arriving fail with E_CLOSED."""
        st = self._st
        core = self._core
        if st.closed:
            return
        if core.closing or core.closed:
            st.closed = True
            return
        if _core._in_callback(core):
            raise RrpcError(lib.RRPC_E_DEADLOCK, "TensorServer.close from a callback")
        with core.use():
            st.close_now()


# ---- KV-cache page pools ----------------------------------------------------

class KvToken:
    """A pool's token for one connection (rrpc_kv_token); 48 bytes on the wire."""

    __slots__ = ("region", "page_size", "page_count")

    def __init__(self, region: Token, page_size: int, page_count: int) -> None:
        self.region, self.page_size, self.page_count = region, page_size, page_count

    @classmethod
    def from_bytes(cls, b: Any) -> "KvToken":
        t = ffi.new("rrpc_kv_token *")
        buf, n = _cbuf(b)
        r = lib.rrpc_kv_token_decode(buf, n, t)
        if r:
            raise RrpcError(r, "not a KV pool token (%d bytes)" % n)
        return cls(Token._from_c(t.region), t.page_size, t.page_count)

    def _c(self):
        t = ffi.new("rrpc_kv_token *")
        rt = self.region._c()
        t.region = rt[0]
        t.page_size, t.page_count = self.page_size, self.page_count
        return t

    def to_bytes(self) -> bytes:
        out = ffi.new("uint8_t[48]")
        lib.rrpc_kv_token_encode(self._c(), out)
        return bytes(ffi.buffer(out))

    __bytes__ = to_bytes

    def __repr__(self):
        return "<KvToken %d pages of %d bytes>" % (self.page_count, self.page_size)


class KvPool(_core._Closable):
    """A KV-cache page pool over a writable C-contiguous buffer (zero copy).

    With page_size None, array's first dimension counts the pages
    (array[i] is page i); otherwise the buffer is cut into pages of
    page_size bytes.  Keeps the array and the Context alive."""

    def __init__(self, ctx: Any, array: Any, page_size: Optional[int] = None) -> None:
        core = ctx._core
        self._ctx = ctx
        self._core = core
        self._closed = False
        self._ops = 0
        self._close_pending = False
        a = np.asarray(array) if not isinstance(array, (bytearray, memoryview)) else array
        self._buf = ffi.from_buffer("char[]", a, require_writable=True)
        nbytes = len(self._buf)
        if page_size is None:
            if not isinstance(a, np.ndarray) or a.ndim < 1 or a.shape[0] == 0:
                raise ValueError("give page_size, or an array whose first dimension is pages")
            page_count = a.shape[0]
            page_size = nbytes // page_count
        else:
            page_size = int(page_size)
            if page_size <= 0 or nbytes % page_size:
                raise ValueError("the buffer (%d bytes) is not a whole number of %d-byte pages"
                                 % (nbytes, page_size))
            page_count = nbytes // page_size
        self.array = a
        self.page_size = page_size
        self.page_count = page_count
        pp = ffi.new("rrpc_kv_pool **")
        with core.use():
            r = lib.rrpc_kv_pool_reg(ctx._ptr, self._buf, page_size, page_count, pp)
            if r:
                raise _error(r, ctx._ptr, "KV pool of %d x %d bytes" % (page_count, page_size))
        self._ptr = pp[0]
        self.addr = _ptrint(self._buf)
        core.pools[id(self)] = self

    _op_begin = Region._op_begin
    _op_end = Region._op_end

    def close(self) -> None:
        """Deregisters the pool (deferred until the transfers using it complete)."""
        Region.close(self)  # type: ignore[arg-type]  # the same fields as a Region

    @property
    def closed(self) -> bool:
        return self._closed

    def _release(self):
        lib.rrpc_kv_pool_dereg(self._ptr)

    def _really_close(self):
        ptr = self._ptr
        self._core.retire(self, lambda: lib.rrpc_kv_pool_dereg(ptr))

    def page(self, i: int) -> Any:
        """Page i as a numpy view (array[i], or a uint8 slice)."""
        if not 0 <= i < self.page_count:
            raise IndexError(i)
        a = self.array
        if isinstance(a, np.ndarray) and a.ndim >= 1 and a.shape[0] == self.page_count:
            return a[i]
        return np.frombuffer(a, np.uint8)[i * self.page_size:(i + 1) * self.page_size]

    def token(self, conn: Any) -> "KvToken":
        """The KvToken with which the peer of conn may write into this pool."""
        t = ffi.new("rrpc_kv_token *")
        with self._core.use(self, "KV pool"):
            if conn._closed:
                raise _closed_error("connection")
            r = lib.rrpc_kv_pool_token(self._ptr, conn._ptr, t)
            err = _error(r, self._core.ptr, "KV pool token") if r else None
        if r:
            raise err
        return KvToken(Token._from_c(t.region), t.page_size, t.page_count)

    def __repr__(self):
        return "<roce_rpc.KvPool %d pages of %d bytes%s>" % (
            self.page_count, self.page_size, " closed" if self._closed else "")


class _Writes:
    __slots__ = ("p",)

    def __init__(self):
        self.p = ffi.new("size_t *")

    def __call__(self):
        return int(self.p[0])


def kv_transfer_async(conn: Any, src: Any, dst: Any, pairs: Any, *, qos: Any = None,
                      notify: Optional[int] = None) -> Any:
    core = conn._core
    if not isinstance(src, KvPool):
        raise TypeError("src must be a KvPool")
    if not isinstance(dst, KvToken):
        dst = KvToken.from_bytes(dst)
    pa = np.ascontiguousarray(np.asarray(pairs, dtype=np.uint64).reshape(-1, 2))
    n = pa.shape[0]
    cpairs = ffi.cast("rrpc_kv_pair *", ffi.from_buffer(pa)) if n else ffi.NULL
    opts = ffi.new("rrpc_op_opts *")
    opts.qos_class = _qos(qos, lib.RRPC_CLASS_BULK)
    if notify is not None:
        opts.notify = 1
        opts.imm = int(notify) & 0xFFFFFFFF
    writes = _Writes()
    fut = core.future()

    def start(user):
        r = lib.rrpc_kv_transfer(conn._ptr, src._ptr, dst._c(), cpairs, n, opts,
                                 lib._rrpc_py_op_done, user, writes.p)
        return _error(r, core.ptr, "KV transfer") if r else None
    return core.submit(conn, (fut, core, writes, (src,), conn), start, busy=src, enders=(src,))


def __dir__() -> "list[str]":
    return sorted(__all__)
