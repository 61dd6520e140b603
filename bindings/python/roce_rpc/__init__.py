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
"""
from ._rrpc import ffi, lib  # noqa: F401  (the cffi module, for experts; not in __all__)
from . import _core
from ._core import (Context, Conn, Listener, Region, Request, Token, RrpcError, RpcError,
                    RrpcTimeoutError, RrpcConnectionError, RrpcConnectionRefusedError,
                    RrpcPermissionError, RrpcValueError,
                    strerror, err_name, HANDLER_ERROR, NO_DEADLINE, TOKEN_SIZE, REMOTE_READ,
                    REMOTE_WRITE, CLASS_CONTROL, CLASS_LOW_LATENCY, CLASS_BULK, CLASS_BACKGROUND)

__version__ = "0.2.0"

__all__ = list(_core.__all__) + ["HAVE_TENSOR", "__version__"]
globals().update({n: getattr(_core, n) for n in _core.__all__ if n.startswith("E_")})

HAVE_TENSOR: bool = hasattr(lib, "rrpc_tensor_send_with")
if HAVE_TENSOR:
    from .tensor import (KvPool, KvToken, TensorServer, ReceivePool,  # noqa: F401
                         dtype_to_rrpc, dtype_from_rrpc)
    __all__ += ["KvPool", "KvToken", "TensorServer", "ReceivePool", "dtype_to_rrpc",
                "dtype_from_rrpc"]

HAVE_BROKER: bool = hasattr(lib, "rrpc_broker_open")
__all__ += ["HAVE_BROKER"]
