"""The broker (rrpcd) from Python: register a service, look it up, connect
by name with a ticket, and the reconnecting service handle.

    from roce_rpc.broker import Broker

    b = Broker("broker.lan:7700", ca_file="ca.crt", cert_file="kv-server.crt",
               key_file="kv-server.key")
    b.gate(server_ctx, "kv-store")                 # before listen: tickets only
    lis = server_ctx.listen("tcp://10.0.0.5:0")
    b.register(server_ctx, "kv-store", [lis.uri])  # renewed by a lease thread

    c = Broker("broker.lan:7700", ca_file="ca.crt", cert_file="kv-client.crt",
               key_file="kv-client.key")
    conn = c.connect(client_ctx, "kv-store")       # lookup + ticket + connect
    svc = c.service(client_ctx, "kv-store")        # reconnects by itself
    svc.call("get", b"key")

The calls that talk to rrpcd (open, register, lookup, connect, service
calls that must reconnect) block the calling thread for at most the
broker's timeout per round trip; roce_rpc.aio's Context.connect_service
does the lookup on a worker thread and the connect on the event loop.

Lifetimes: a context gated or registered through a Broker, and a Service,
keep that Broker alive; Broker.close() refuses (-EBUSY) while such a
context or a Service of it is open, because they read the broker's state.
Closing a Context closes its Services first.
"""
import concurrent.futures
import errno
import weakref
from typing import Any, Iterable, List, NamedTuple, Optional, Union

from ._rrpc import ffi, lib
from ._core import (Conn, Context, RrpcError, _Closable, _closed_error, _qos, _s, strerror)

__all__ = ["Broker", "Service", "ServiceInfo", "Endpoint", "Instance", "Watch", "WatchEvent"]


class Endpoint(NamedTuple):
    uri: str
    classes: int   # bit 1 << class of each QoS class served
    instance: int  # index into ServiceInfo.instances


class Instance(NamedTuple):
    id: bytes
    ticket: bytes  # as presented (signed ticket + this client's identity): accepted
                   # once, by this instance only, from this client only


class ServiceInfo(NamedTuple):
    """A lookup's answer: the live endpoints, grouped by server instance,
    and a ticket per instance (all expiring at ticket_expiry_ms, Unix ms)."""
    endpoints: List[Endpoint]
    instances: List[Instance]
    ticket_expiry_ms: int


class WatchEvent(NamedTuple):
    """An instance of a watched service came ("added") or left ("removed")."""
    kind: str             # "added" or "removed"
    instance: bytes       # 16 bytes; all zero: the server registered none
    endpoints: List[Endpoint]


def _class_mask(classes):
    if classes is None:
        return 0  # all
    mask = 0
    for c in classes:
        mask |= 1 << _qos(c, 0)
    return mask


class Broker(_Closable):
    """A TLS session with rrpcd (rrpc_broker_open): authenticated by the
    client certificate (its CN is the principal) and/or a token.

    addr: "HOST:PORT" (or "[IPv6]:PORT", or behind "tls://"), or several
    brokers that share a registry (rrpcd on etcd), as "A:7700,B:7700" or a
    list of such strings (at most 16): the handle uses one at a time and
    moves to the next when it is unreachable or its session dies, each
    tried for at most timeout (docs/broker.md, "Several brokers").
    ca_file: the CA that signed rrpcd's certificate (required).  timeout:
    seconds per broker connect (TCP, TLS and hello) or round trip
    (default 5)."""

    def __init__(self, addr: Union[str, Iterable[str]], *, ca_file: str, cert_file: Optional[str] = None,
                 key_file: Optional[str] = None, token: Optional[str] = None,
                 server_name: Optional[str] = None, timeout: float = 5.0) -> None:
        self._closed = False
        self._ptr = ffi.NULL
        self._served = weakref.WeakSet()  # contexts with a gate that reads this broker
        self._services = weakref.WeakSet()
        keep = []

        def cstr(v):
            if v is None:
                return ffi.NULL
            b = ffi.new("char[]", str(v).encode())
            keep.append(b)
            return b
        o = ffi.new("rrpc_broker_opts *")
        o.ca_file, o.cert_file, o.key_file = cstr(ca_file), cstr(cert_file), cstr(key_file)
        o.token, o.server_name = cstr(token), cstr(server_name)
        o.timeout_ms = max(1, int(timeout * 1000))
        if not isinstance(addr, str):
            addr = ",".join(addr)
        pp = ffi.new("rrpc_broker **")
        r = lib.rrpc_broker_open(addr.encode(), o, pp)
        if r:
            raise RrpcError(r, "broker %s: %s" % (addr, _s(lib.rrpc_broker_last_error(ffi.NULL))
                                                  or strerror(r)))
        self._ptr = pp[0]
        self.addr = addr

    def _check(self):
        if self._closed:
            raise _closed_error("broker")

    def _error(self, r, what):
        return RrpcError(r, "%s: %s" % (what, _s(lib.rrpc_broker_last_error(self._ptr))
                                        or strerror(r)))

    @property
    def principal(self) -> str:
        """Who rrpcd says we are (the certificate's CN, or the token's name)."""
        self._check()
        return _s(lib.rrpc_broker_principal(self._ptr))

    @property
    def current(self) -> str:
        """The broker in use ("HOST:PORT"): which of the list answers now."""
        self._check()
        buf = ffi.new("char[300]")
        r = lib.rrpc_broker_current(self._ptr, buf, 300)
        if r < 0:
            raise RrpcError(r, "broker current: %s" % strerror(r))
        return _s(buf)

    def status(self) -> dict:
        """What the broker in use says of itself (rrpc_broker_status): {"broker",
        "registry" ("memory" or "etcd"), "degraded" (bool), "why" ("" unless
        degraded), "services", "registrations", "sessions"}.  One round trip."""
        self._check()
        st = ffi.new("rrpc_broker_state *")
        r = lib.rrpc_broker_status(self._ptr, st)
        if r < 0:
            raise self._error(r, "broker status")
        return {"broker": _s(st.broker), "registry": _s(st.registry),
                "degraded": bool(st.degraded), "why": _s(st.why),
                "services": int(st.services), "registrations": int(st.registrations),
                "sessions": int(st.sessions)}

    def _serve(self, ctx):
        self._served.add(ctx)
        ctx._core.brokers.add(self)  # the context's gate reads this broker: keep it

    def gate(self, ctx: Context, service: str) -> None:
        """Server side, before ctx.listen(): every connection to ctx must
        then present a ticket rrpcd issued for service and this server
        instance (rrpc_broker_gate).  One service per context."""
        self._check()
        with ctx._core.use():
            r = lib.rrpc_broker_gate(self._ptr, ctx._ptr, service.encode())
        if r:
            raise self._error(r, "gate %r" % service)
        self._serve(ctx)

    def register(self, ctx: Context, service: str, uris: Union[str, Iterable[str]], *,
                 classes: Optional[Iterable[Any]] = None) -> None:
        """Registers service at uris (the addresses clients dial, e.g.
        [listener.uri]) serving classes (names or numbers; None: all).  A
        lease thread renews it and registers again after an rrpcd restart."""
        self._check()
        if isinstance(uris, str):
            uris = [uris]
        cs = [ffi.new("char[]", u.encode()) for u in uris]
        arr = ffi.new("const char *[]", cs)
        with ctx._core.use():
            r = lib.rrpc_broker_register(self._ptr, ctx._ptr, service.encode(), arr, len(cs),
                                         _class_mask(classes))
        if r:
            raise self._error(r, "register %r" % service)
        self._serve(ctx)

    def unregister(self, service: str) -> None:
        """rrpcd forgets service now; the context keeps its gate."""
        self._check()
        r = lib.rrpc_broker_unregister(self._ptr, service.encode())
        if r:
            raise self._error(r, "unregister %r" % service)

    def lookup(self, service: str) -> ServiceInfo:
        """The live endpoints of service with a ticket per instance
        (-ENOENT: no live registration; -EPERM: the ACL says no)."""
        self._check()
        pp = ffi.new("rrpc_service_info **")
        r = lib.rrpc_broker_lookup(self._ptr, service.encode(), pp)
        if r:
            raise self._error(r, "lookup %r" % service)
        i = pp[0]
        try:
            eps = [Endpoint(ffi.string(i.endpoints[k].uri).decode(), int(i.endpoints[k].class_mask),
                            int(i.endpoints[k].instance)) for k in range(i.n_endpoints)]
            insts = [Instance(bytes(ffi.buffer(i.instances[k].id, lib.RRPC_TICKET_INSTANCE_LEN)),
                              bytes(ffi.buffer(i.instances[k].ticket,
                                               i.instances[k].ticket_len)))
                     for k in range(i.n_instances)]
            return ServiceInfo(eps, insts, int(i.ticket_expiry_ms))
        finally:
            lib.rrpc_service_info_free(i)

    def connect(self, ctx: Context, service: str, *, timeout: float = 10.0) -> Conn:
        """Connects ctx to service by name (rrpc_connect_service): a
        lookup, then each endpoint in turn with its instance's ticket.
        Raises RrpcPermissionError when tickets are refused."""
        self._check()
        core = ctx._core
        core.check_blocking("Broker.connect")
        slot, user = core.conn_slot()
        pp = ffi.new("rrpc_conn **")
        with core.use():
            r = lib.rrpc_connect_service(ctx._ptr, self._ptr, service.encode(),
                                         max(1, int(timeout * 1000)), lib._rrpc_py_conn_event,
                                         user, pp)
            detail = _s(lib.rrpc_ctx_last_error(ctx._ptr)) if r else ""
        if r:
            core.forget(slot.key)
            bdetail = _s(lib.rrpc_broker_last_error(self._ptr))
            raise RrpcError(r, "connect to service %r: %s" % (service, detail or bdetail or
                                                              strerror(r)))
        return core.adopt(ctx, slot, pp[0], "service:" + service, True)

    def watch(self, service: str) -> "Watch":
        """Follows the set of live instances of service (rrpc_broker_watch_open):
        a session of its own to the same brokers; Watch.next() gives the
        changes, the instances live now first."""
        self._check()
        return Watch(self, service)

    def service(self, ctx: Context, service: str, *, backoff_min: float = 0.1,
                backoff_max: float = 5.0, connect_timeout: float = 3.0,
                wait: float = 0.0) -> "Service":
        """A reconnecting handle on service (rrpc_service_open)."""
        return Service(self, ctx, service, backoff_min, backoff_max, connect_timeout, wait)

    def close(self) -> None:
        """Unregisters what was registered through this broker and ends the
        session.  -EBUSY while a context gated through it is open (close
        those contexts first)."""
        if getattr(self, "_closed", True) or self._ptr == ffi.NULL:
            return
        open_ctx = [c for c in list(getattr(self, "_served", ())) if not c.closed]
        open_svc = [s for s in list(getattr(self, "_services", ())) if not s._closed]
        if open_ctx or open_svc:
            raise RrpcError(-16, "close the %d context(s) gated through this broker and its %d "
                            "service handle(s) first: they read it" % (len(open_ctx),
                                                                      len(open_svc)))
        self._closed = True
        lib.rrpc_broker_close(self._ptr)
        self._ptr = ffi.NULL

    def __repr__(self):
        return "<roce_rpc.broker.Broker %s%s>" % (getattr(self, "addr", "?"),
                                                  " closed" if self._closed else "")


class Service(_Closable):
    """A service by name that reconnects by itself (rrpc_service_*): each
    call borrows the current connection, or a new one from a fresh lookup
    and ticket when it went down, spaced by an exponential backoff."""

    def __init__(self, broker: "Broker", ctx: Context, name: str, backoff_min: float,
                 backoff_max: float, connect_timeout: float, wait: Optional[float]) -> None:
        broker._check()
        self._closed = False
        self._ptr = ffi.NULL
        self._broker = broker
        self._ctx = ctx
        self.name = name
        self._wait_ms = max(0, int(wait * 1000))
        o = ffi.new("rrpc_service_opts *")
        o.backoff_min_ms = max(1, int(backoff_min * 1000))
        o.backoff_max_ms = max(o.backoff_min_ms, int(backoff_max * 1000))
        o.connect_timeout_ms = max(1, int(connect_timeout * 1000))
        pp = ffi.new("rrpc_service **")
        with ctx._core.use():
            r = lib.rrpc_service_open(ctx._ptr, broker._ptr, name.encode(), o, pp)
        if r:
            raise RrpcError(r, "service %r: %s" % (name, strerror(r)))
        self._ptr = pp[0]
        broker._services.add(self)
        ctx._core.services.add(self)

    def _borrow(self, wait):
        if self._closed:
            raise _closed_error("service")
        self._ctx._core.check_blocking("Service call")
        pp = ffi.new("rrpc_conn **")
        r = lib.rrpc_service_conn(self._ptr, self._wait_ms if wait is None else
                                  max(0, int(wait * 1000)), pp)
        if r:
            raise RrpcError(r, "service %r: %s" % (self.name,
                                                   _s(lib.rrpc_service_last_error(self._ptr))
                                                   or strerror(r)))
        return pp[0]

    def call_async(self, method: str, data: Any = b"", *, qos: Any = None,
                   timeout: Optional[float] = None, wait: Optional[float] = None
                   ) -> "concurrent.futures.Future[bytes]":
        """Calls method on the service's current connection (connecting
        first when needed, waiting up to wait s for the backoff)."""
        p = self._borrow(wait)
        try:
            conn = Conn._wrap(self._ctx._core, p, owned=False, ctx=self._ctx,
                              uri="service:" + self.name)
            return conn.call_async(method, data, qos=qos, timeout=timeout)
        finally:
            lib.rrpc_service_conn_release(self._ptr, p)  # the call is on its way

    def call(self, method: str, data: Any = b"", *, qos: Any = None,
             timeout: Optional[float] = None, wait: Optional[float] = None) -> bytes:
        """call_async(...).result()."""
        return self.call_async(method, data, qos=qos, timeout=timeout, wait=wait).result()

    @property
    def stats(self) -> dict:
        """attempts, failures, connects, drops, up, last_error, backoff_ms."""
        st = ffi.new("rrpc_service_stat *")
        if self._closed:
            raise _closed_error("service")
        r = lib.rrpc_service_stats(self._ptr, st)
        if r:
            raise RrpcError(r, strerror(r))
        return {k: int(getattr(st, k)) for k in ("attempts", "failures", "connects", "drops",
                                                 "up", "last_error", "backoff_ms")}

    def close(self) -> None:
        if getattr(self, "_closed", True) or self._ptr == ffi.NULL:
            return
        self._closed = True
        lib.rrpc_service_close(self._ptr)
        self._ptr = ffi.NULL


class Watch(_Closable):
    """A watch of one service (rrpc_broker_watch): next() returns the next
    WatchEvent, or None when none came within timeout seconds.  It keeps
    following the service through the broker list by itself (a session that
    dies is made again, failing over); a subscription that fails again
    raises once from next(), with which brokers failed and why."""

    def __init__(self, broker: "Broker", service: str) -> None:
        self._closed = False
        self._ptr = ffi.NULL
        self.service = service
        pp = ffi.new("rrpc_broker_watch **")
        r = lib.rrpc_broker_watch_open(broker._ptr, service.encode(), pp)
        if r:
            raise broker._error(r, "watch %r" % service)
        self._ptr = pp[0]
        self._ev = ffi.new("rrpc_watch_event *")

    def next(self, timeout: Optional[float] = None) -> Optional[WatchEvent]:
        """The next change; None after timeout seconds without one (None:
        wait as long as it takes, in slices, so KeyboardInterrupt works)."""
        if self._closed:
            raise _closed_error("watch")
        while True:
            ms = 1000 if timeout is None else max(0, int(timeout * 1000))
            r = lib.rrpc_broker_watch_next(self._ptr, ms, self._ev)
            if r == -errno.ETIMEDOUT:
                if timeout is None:
                    continue
                return None
            if r:
                raise RrpcError(r, "watch %r: %s" % (
                    self.service, _s(lib.rrpc_broker_watch_last_error(self._ptr)) or strerror(r)))
            e = self._ev
            eps = [Endpoint(ffi.string(e.endpoints[k].uri).decode(),
                            int(e.endpoints[k].class_mask), 0) for k in range(e.n_endpoints)]
            return WatchEvent("added" if e.type == lib.RRPC_WATCH_ADDED else "removed",
                              bytes(ffi.buffer(e.instance, lib.RRPC_TICKET_INSTANCE_LEN)), eps)

    def close(self) -> None:
        """Stops following the service (rrpc_broker_watch_close).  Idempotent."""
        if not self._closed:
            self._closed = True
            lib.rrpc_broker_watch_close(self._ptr)
            self._ptr = ffi.NULL


def __dir__() -> List[str]:
    return sorted(__all__)
