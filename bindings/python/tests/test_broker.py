"""The broker from Python against the real rrpcd over TLS: register with a
lease, look up, connect by name with a ticket (also from asyncio), the
reconnecting service handle, and the refusals each raise their built-in
exception.  Needs RRPCD and MAKE_CERTS (meson test sets them)."""
import asyncio
import os
import time

import pytest

import roce_rpc
from roce_rpc import RrpcError

from conftest import listen_uri

pytestmark = pytest.mark.skipif(
    not roce_rpc.HAVE_BROKER or not os.environ.get("RRPCD") or not os.environ.get("MAKE_CERTS"),
    reason="no broker library, or RRPCD / MAKE_CERTS unset (meson test sets them)")

SERVICE = "kv-store"


def _broker(rrpcd, who):
    addr, d = rrpcd
    return roce_rpc.broker.Broker(addr, ca_file=os.path.join(d, "ca.crt"),
                                  cert_file=os.path.join(d, who + ".crt"),
                                  key_file=os.path.join(d, who + ".key"))


@pytest.fixture
def served(rrpcd):
    """A server context gated and registered as kv-store."""
    import roce_rpc.broker  # noqa: F401
    b = _broker(rrpcd, "kv-server")
    ctx = roce_rpc.Context()
    b.gate(ctx, SERVICE)
    lis = ctx.listen(listen_uri())
    ctx.calls = []

    def get(data):
        ctx.calls.append(data)
        return b"value-of-" + data
    ctx.add_handler("get", get)
    b.register(ctx, SERVICE, [lis.uri], classes=["low_latency", "bulk"])
    yield b, ctx, lis
    ctx.close()
    b.close()


def test_register_lookup_and_connect_by_name_with_a_ticket(rrpcd, served):
    b, ctx, lis = served
    calls = ctx.calls
    assert b.principal == "kv-server"
    c = _broker(rrpcd, "kv-client")
    info = c.lookup(SERVICE)
    assert [e.uri for e in info.endpoints] == [lis.uri]
    assert info.endpoints[0].classes == (1 << roce_rpc.CLASS_LOW_LATENCY) | (
        1 << roce_rpc.CLASS_BULK)
    assert len(info.instances) == 1 and info.instances[0].ticket
    with roce_rpc.Context() as cc:
        conn = c.connect(cc, SERVICE)
        assert conn.call("get", b"k") == b"value-of-k"
        # A ticket is accepted once: presenting the same one again is refused
        # before any handler runs, as a PermissionError.
        cc.connect(lis.uri, ticket=info.instances[0].ticket).close()
        with pytest.raises(PermissionError) as ei:
            cc.connect(lis.uri, ticket=info.instances[0].ticket)
        assert ei.value.code == roce_rpc.E_TICKET
        with pytest.raises(PermissionError):
            cc.connect(lis.uri, ticket=b"forged" * 20)
        # Without a ticket the connection comes up on the client's side (it
        # does not know), but nothing it sends reaches a handler.
        bare = cc.connect(lis.uri)
        with pytest.raises(RrpcError) as ei:
            bare.call("get", b"k", timeout=10)
        print("ticketless call:", ei.value)
        assert ei.value.code in (roce_rpc.E_TICKET, roce_rpc.E_CONN_LOST, roce_rpc.E_PROTO)
    assert calls == [b"k"]
    c.close()


def test_status_says_how_the_broker_is(rrpcd, served):
    c = _broker(rrpcd, "kv-client")
    st = c.status()
    assert st["registry"] == "memory" and st["degraded"] is False and st["why"] == ""
    assert st["registrations"] >= 1 and st["services"] >= 1 and st["sessions"] >= 2
    assert st["broker"] == c.current
    c.close()


def test_the_acl_and_an_unknown_service_refuse_lookups_clearly(rrpcd, served):
    nobody = _broker(rrpcd, "nobody")
    with pytest.raises(PermissionError) as ei:
        nobody.lookup(SERVICE)
    assert "lookup" in str(ei.value)
    nobody.close()
    c = _broker(rrpcd, "kv-client")
    with pytest.raises(RrpcError) as ei:
        c.lookup("no-such-service")
    assert ei.value.code == -2  # -ENOENT
    c.close()


def test_the_service_handle_connects_and_reconnects_by_itself(rrpcd, served):
    b, ctx, lis = served
    c = _broker(rrpcd, "kv-client")
    cc = roce_rpc.Context()
    svc = c.service(cc, SERVICE, wait=5.0)
    assert svc.call("get", b"1") == b"value-of-1"
    assert svc.stats["connects"] == 1 and svc.stats["up"] == 1
    for conn in list(lis.connections):  # the server drops the client
        conn.close()
    for _ in range(200):
        try:
            if svc.call("get", b"2") == b"value-of-2" and svc.stats["connects"] == 2:
                break
        except RrpcError:
            pass
        time.sleep(0.02)
    assert svc.stats["connects"] == 2 and svc.stats["drops"] >= 1
    with pytest.raises(RrpcError) as ei:
        c.close()  # the service handle still reads the broker
    assert ei.value.code == -16
    cc.close()     # closes the service handle first
    c.close()


def test_asyncio_connects_by_service_name(rrpcd, served):
    import roce_rpc.aio as aio
    c = _broker(rrpcd, "kv-client")

    async def main():
        async with aio.Context() as actx:
            conn = await actx.connect_service(c, SERVICE)
            return await conn.call("get", b"a")
    assert asyncio.run(main()) == b"value-of-a"
    c.close()


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_list_of_brokers_moves_past_a_dead_one_and_bad_lists_are_refused(rrpcd):
    import roce_rpc.broker  # noqa: F401
    addr, d = rrpcd
    dead = "127.0.0.1:%d" % _free_port()
    keys = dict(ca_file=os.path.join(d, "ca.crt"), cert_file=os.path.join(d, "kv-client.crt"),
                key_file=os.path.join(d, "kv-client.key"))
    b = roce_rpc.broker.Broker([dead, addr], **keys)  # the first refuses: the second serves
    try:
        assert b.current == addr
        assert b.principal == "kv-client"
    finally:
        b.close()
    with pytest.raises(RrpcError) as e:
        roce_rpc.broker.Broker(dead + ",," + addr, **keys)
    assert "entry 2 is empty" in str(e.value)
    with pytest.raises(RrpcError) as e:
        roce_rpc.broker.Broker("%s,%s" % (addr, addr), **keys)
    assert "entries 1 and 2 are both" in str(e.value)
    with pytest.raises(RrpcError) as e:
        roce_rpc.broker.Broker([dead], **keys)
    assert dead in str(e.value)


def test_a_watch_sees_an_instance_added_and_removed(rrpcd):
    import roce_rpc.broker  # noqa: F401
    c = _broker(rrpcd, "kv-client")
    s = _broker(rrpcd, "kv-server")
    with c.watch("kv-watched") as w:
        assert w.next(timeout=0.3) is None  # nobody serves it yet
        ctx = roce_rpc.Context()
        s.gate(ctx, "kv-watched")
        lis = ctx.listen(listen_uri())
        s.register(ctx, "kv-watched", [lis.uri])
        added = w.next(timeout=30)
        assert added is not None and added.kind == "added"
        assert [e.uri for e in added.endpoints] == [lis.uri]
        assert added.instance == c.lookup("kv-watched").instances[0].id
        s.unregister("kv-watched")
        removed = w.next(timeout=30)
        assert removed is not None and removed.kind == "removed"
        assert removed.instance == added.instance
        assert w.next(timeout=0.3) is None  # two changes, two events
        ctx.close()
    with pytest.raises(RrpcError):
        w.next(timeout=0)
    s.close()
    c.close()
