"""Per-call metadata (#29): Conn.call(metadata=...), Request.metadata,
Request.set_response_metadata and Reply.metadata, the bounds as E_METADATA."""
import asyncio

import pytest

import roce_rpc
from roce_rpc import RrpcError

from conftest import client_uri

TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_metadata_reaches_the_handler_and_comes_back(pair):
    s, lis, c = pair
    seen = []

    @s.handler("meta", request=True)
    def meta(req, data):
        seen.append(req.metadata)
        req.set_response_metadata({"served-by": "py", "echo": req.metadata.get("tenant", "")})
        return data

    conn = c.connect(client_uri(lis))
    r = conn.call("meta", b"x", metadata={"traceparent": TRACE, "tenant": "blue",
                                          "raw": b"\xff\x00"})
    assert r == b"x" and isinstance(r, roce_rpc.Reply) and isinstance(r, bytes)
    assert dict(r.metadata) == {"served-by": "py", "echo": "blue"}
    got = seen[0]
    assert got["traceparent"] == TRACE and got["tenant"] == "blue"
    # bytes that are not UTF-8 come back as they went, through surrogateescape
    assert got["raw"].encode("utf-8", "surrogateescape") == b"\xff\x00"
    with pytest.raises(TypeError):
        got["tenant"] = "red"  # read-only
    # the future of call_async holds a Reply too
    f = conn.call_async("meta", b"y", metadata={"tenant": "green"})
    r2 = f.result(10)
    assert r2 == b"y" and r2.metadata["echo"] == "green"
    # no metadata: an empty mapping each way
    seen.clear()

    @s.handler("plain", request=True)
    def plain(req, data):
        seen.append(req.metadata)
        return b"p"

    r3 = conn.call("plain")
    assert r3 == b"p" and dict(r3.metadata) == {} and dict(seen[0]) == {}


@pytest.mark.parametrize("meta,says", [
    ({"k%d" % i: "v" for i in range(17)}, "17 metadata entries"),
    ({"k" * 65: "v"}, "65 bytes"),
    ({"k": "v" * 1025}, "1025 bytes"),
    ({"Trace": "v"}, "lowercase"),
    ({"k%d" % i: "v" * 1000 for i in range(5)}, "bytes together"),
])
def test_metadata_out_of_bounds_fails_with_E_METADATA_and_the_connection_serves_on(
        pair, meta, says):
    s, lis, c = pair

    @s.handler("echo")
    def echo(data):
        return data

    conn = c.connect(client_uri(lis))
    with pytest.raises(RrpcError) as ei:
        conn.call("echo", b"x", metadata=meta)
    assert ei.value.code == roce_rpc.E_METADATA and says in ei.value.message
    assert conn.call("echo", b"after") == b"after"


def test_a_handler_setting_bad_response_metadata_gets_the_error_and_still_answers(pair):
    s, lis, c = pair
    errors = []

    @s.handler("bad", request=True)
    def bad(req, data):
        try:
            req.set_response_metadata({"Upper": "x"})
        except RrpcError as e:
            errors.append(e)
        with pytest.raises(TypeError):
            req.set_response_metadata({"k": 5})
        return b"ok"

    conn = c.connect(client_uri(lis))
    r = conn.call("bad")
    assert r == b"ok" and dict(r.metadata) == {}
    assert errors and errors[0].code == roce_rpc.E_METADATA


def test_metadata_must_be_a_mapping_of_str():
    with roce_rpc.Context() as ctx:
        del ctx
    with pytest.raises(TypeError):
        roce_rpc._core._meta_c([("k", "v")])
    with pytest.raises(TypeError):
        roce_rpc._core._meta_c({1: "v"})


def test_an_async_handler_reads_metadata_and_an_awaited_call_gets_the_reply():
    import roce_rpc.aio as aio
    from conftest import listen_uri

    async def main():
        async with aio.Context() as server, aio.Context() as client:
            lis = server.listen(listen_uri())

            @server.handler("meta", request=True)
            async def meta(req, data):
                await asyncio.sleep(0)
                req.set_response_metadata({"got": req.metadata["traceparent"]})
                return data

            conn = await client.connect(client_uri(lis))
            r = await conn.call("meta", b"a", metadata={"traceparent": TRACE})
            assert r == b"a" and r.metadata["got"] == TRACE
            r2 = await conn.sync.acall("meta", b"b", metadata={"traceparent": "t"})
            assert r2.metadata["got"] == "t"

    asyncio.run(main())


def test_a_failed_call_carries_the_metadata_its_handler_set(pair):
    """#29: a handler that sets response metadata and then fails: the
    caller's RrpcError has it in .metadata, from Conn.call, a call_async
    future and an aio call; an error without any has an empty mapping."""
    import pickle

    import roce_rpc.aio as aio
    from conftest import listen_uri
    s, lis, c = pair

    @s.handler("refuse", request=True)
    def refuse(req, data):
        req.set_response_metadata({"retry-after": "3", "tenant": req.metadata.get("tenant", "")})
        raise RrpcError(42, "over quota")

    conn = c.connect(client_uri(lis))
    with pytest.raises(RrpcError) as ei:
        conn.call("refuse", b"x", metadata={"tenant": "blue"})
    e = ei.value
    assert e.code == 42 and e.message == "over quota"
    assert dict(e.metadata) == {"retry-after": "3", "tenant": "blue"}
    with pytest.raises(TypeError):
        e.metadata["tenant"] = "red"  # read-only, as Reply.metadata
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is type(e) and dict(back.metadata) == dict(e.metadata)
    with pytest.raises(RrpcError) as ei:
        conn.call_async("refuse", b"y", metadata={"tenant": "green"}).result(10)
    assert dict(ei.value.metadata) == {"retry-after": "3", "tenant": "green"}
    # an error whose response had no metadata, and one from the library
    with pytest.raises(RrpcError) as ei:
        conn.call("no-such-method")
    assert ei.value.code == roce_rpc.E_NO_METHOD and dict(ei.value.metadata) == {}
    assert dict(RrpcError(7, "x").metadata) == {}

    async def main():
        async with aio.Context() as server, aio.Context() as client:
            alis = server.listen(listen_uri())

            @server.handler("refuse", request=True)
            async def arefuse(req, data):
                req.set_response_metadata({"where": "aio"})
                raise RrpcError(43, "no")

            aconn = await client.connect(client_uri(alis))
            with pytest.raises(RrpcError) as ai:
                await aconn.call("refuse", b"a")
            assert ai.value.code == 43 and dict(ai.value.metadata) == {"where": "aio"}

    asyncio.run(main())
