"""roce_rpc: Python bindings of libroce_rpc (RPC and one-sided RDMA over
RoCEv2, and TCP).  See docs/python.md.

    import roce_rpc
    with roce_rpc.Context() as server, roce_rpc.Context() as client:
        lis = server.listen("tcp://127.0.0.1:0")

        @server.handler("echo")
        def echo(data):
            return data

        conn = client.connect(lis.uri)
        assert conn.call("echo", b"hi") == b"hi"

The names this module exports are those of __all__ (and of dir()); the
cffi module stays reachable for experts as roce_rpc.ffi and roce_rpc.lib.
"""
from typing import List

from ._rrpc import ffi, lib  # noqa: F401  (roce_rpc.ffi, for experts)
from ._core import (Context, Conn, Listener, Region, Grant, Request, Token, RrpcError, RpcError,
                    RrpcTimeoutError, RrpcConnectionError, RrpcConnectionRefusedError,
                    RrpcPermissionError, RrpcValueError, ErrorCode, QosName, QosClass,
                    strerror, err_name, HANDLER_ERROR, NO_DEADLINE, TOKEN_SIZE, REMOTE_READ,
                    REMOTE_WRITE, CLASS_CONTROL, CLASS_LOW_LATENCY, CLASS_BULK, CLASS_BACKGROUND,
                    E_PROTO, E_VERSION, E_NO_METHOD, E_BAD_CLASS, E_TOO_BIG, E_ACCESS,
                    E_CONN_LOST, E_DEADLINE, E_NO_DEVICE, E_URI, E_CLOSED, E_CREDIT,
                    E_DEADLOCK, E_ARGS, E_TRANSPORT, E_REGION, E_TICKET, E_LIMIT,
                    E_UNKNOWN_HOST, E_CANCELLED, E_GRANT, E_METADATA, Reply, Metadata)
from ._pack import pack_args, unpack_args

__version__ = "0.2.0"

HAVE_TENSOR: bool = hasattr(lib, "rrpc_tensor_send_with")
HAVE_BROKER: bool = hasattr(lib, "rrpc_broker_open")

__all__ = ["Context", "Conn", "Listener", "Region", "Grant", "Request", "Token", "RrpcError", "RpcError",
           "RrpcTimeoutError", "RrpcConnectionError", "RrpcConnectionRefusedError",
           "RrpcPermissionError", "RrpcValueError", "ErrorCode", "QosName", "QosClass",
           "strerror", "err_name", "HANDLER_ERROR", "NO_DEADLINE", "TOKEN_SIZE", "REMOTE_READ",
           "REMOTE_WRITE", "CLASS_CONTROL", "CLASS_LOW_LATENCY", "CLASS_BULK",
           "CLASS_BACKGROUND",
           "E_PROTO", "E_VERSION", "E_NO_METHOD", "E_BAD_CLASS", "E_TOO_BIG", "E_ACCESS",
           "E_CONN_LOST", "E_DEADLINE", "E_NO_DEVICE", "E_URI", "E_CLOSED", "E_CREDIT",
           "E_DEADLOCK", "E_ARGS", "E_TRANSPORT", "E_REGION", "E_TICKET", "E_LIMIT",
           "E_UNKNOWN_HOST", "E_CANCELLED", "E_GRANT", "E_METADATA", "Reply", "Metadata",
           "pack_args", "unpack_args", "HAVE_TENSOR", "HAVE_BROKER", "__version__"]

if HAVE_TENSOR:
    from .tensor import (KvPool, KvToken, TensorServer, ReceivePool,
                         dtype_to_rrpc, dtype_from_rrpc)
    __all__ += ["KvPool", "KvToken", "TensorServer", "ReceivePool", "dtype_to_rrpc",
                "dtype_from_rrpc"]


def __dir__() -> List[str]:
    # the public names and the submodules imported so far (aio, broker, ...)
    import sys
    subs = [n for n in ("aio", "broker", "tensor") if __name__ + "." + n in sys.modules]
    return sorted(set(__all__) | set(subs))
