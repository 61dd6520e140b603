"""The public namespace: what `import roce_rpc` offers, typed."""
import inspect
import os
import types
import typing

import roce_rpc


def test_dir_lists_no_modules_the_package_only_uses():
    modules = sorted(n for n in dir(roce_rpc) if not n.startswith("_") and n != "lib"
                     and isinstance(getattr(roce_rpc, n), types.ModuleType))
    # the public submodules: roce_rpc.tensor, and roce_rpc.aio and .broker once imported
    assert set(modules) <= {"tensor", "aio", "broker"}, modules
    for name in ("asyncio", "threading", "math", "collections", "weakref", "logging"):
        assert name not in dir(roce_rpc), name


def test_all_names_exist_and_cover_the_documented_api():
    assert len(set(roce_rpc.__all__)) == len(roce_rpc.__all__)
    for name in roce_rpc.__all__:
        assert hasattr(roce_rpc, name), name
    for name in ("Context", "Conn", "Listener", "Region", "Request", "Token", "RrpcError",
                 "RrpcTimeoutError", "RrpcConnectionError", "RrpcConnectionRefusedError",
                 "RrpcPermissionError", "RrpcValueError", "strerror", "err_name",
                 "E_DEADLINE", "E_NO_METHOD", "E_LIMIT", "HANDLER_ERROR", "__version__"):
        assert name in roce_rpc.__all__, name
    star = {}
    exec("from roce_rpc import *", star)
    assert not [n for n in star if isinstance(star[n], types.ModuleType)]


def test_the_package_is_marked_typed_and_its_api_annotated():
    pkg = os.path.dirname(roce_rpc.__file__)
    assert os.path.isfile(os.path.join(pkg, "py.typed")), pkg
    hints = typing.get_type_hints(roce_rpc.Conn.call)
    # the response bytes, with the response's metadata (a bytes subclass)
    assert hints["return"] is roce_rpc.Reply and hints["method"] is str
    assert issubclass(roce_rpc.Reply, bytes)
    assert typing.get_type_hints(roce_rpc.Context.connect)["return"] is roce_rpc.Conn
    assert typing.get_type_hints(roce_rpc.Context.wait_notify)["return"] is int
    for cls in (roce_rpc.Context, roce_rpc.Conn):
        for name, fn in inspect.getmembers(cls, inspect.isfunction):
            if name.startswith("_"):
                continue
            assert inspect.signature(fn).return_annotation is not inspect.Signature.empty, \
                "%s.%s has no return annotation" % (cls.__name__, name)
