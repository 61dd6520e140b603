"""A typed user script: tests/test_typing.py runs mypy --strict over it (and
the examples) against the installed package, then runs it."""
import asyncio
import sys
from typing import List, Mapping

if sys.version_info >= (3, 11):
    from typing import assert_type
else:  # pragma: no cover
    from typing_extensions import assert_type

import roce_rpc
import roce_rpc.aio as aio
from roce_rpc import (Conn, Context, ErrorCode, QosName, Reply, RrpcError, pack_args,
                      unpack_args)


def sync_side(uri: str) -> None:
    with Context() as server, Context() as client:
        lis = server.listen(uri)

        @server.handler("add")
        def add(data: bytes) -> bytes:
            a, b = unpack_args(data, "ii")
            return pack_args(a + b)

        conn: Conn = client.connect(lis.uri)
        reply = conn.call("add", pack_args(40, 2), qos="low_latency", timeout=5,
                          metadata={"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-"
                                                   "00f067aa0ba902b7-01"})
        assert_type(reply, Reply)
        answer: bytes = reply  # a Reply is the response bytes
        assert_type(reply.metadata, Mapping[str, str])
        assert unpack_args(answer, "i") == [42]
        qos: QosName = "bulk"
        out = conn.call("add", pack_args(1, 2), qos=qos)
        assert unpack_args(out, "i") == [3]
        try:
            conn.call("nope", timeout=5)
        except RrpcError as e:
            assert_type(e.code, int)
            assert e.code == ErrorCode.NO_METHOD == roce_rpc.E_NO_METHOD
            print("no method:", e.name)
        codes: List[ErrorCode] = [roce_rpc.E_DEADLINE, ErrorCode.LIMIT]
        assert all(isinstance(c, int) for c in codes)


async def aio_side(uri: str) -> None:
    async with aio.Context() as server, aio.Context() as client:
        assert_type(server, aio.Context)
        lis = server.listen(uri)

        @server.handler("echo")
        async def echo(data: bytes) -> bytes:
            await asyncio.sleep(0)
            return data

        conn = await client.connect(lis.uri, timeout=5)
        assert_type(conn, aio.Conn)
        assert_type(await conn.call("echo", b"hi", qos="control"), bytes)
        counts = aio.task_counts()
        assert_type(counts.held, int)
        assert_type(server.tasks_held, int)


if __name__ == "__main__":
    sync_side("tcp://127.0.0.1:0")
    asyncio.run(aio_side("tcp://127.0.0.1:0"))
    print("typed user script: OK")
