"""pack_args/unpack_args against the C side's own rrpc_pack/rrpc_unpack
(issue #32, point 5): the same bytes for the same values, and C reads what
Python packs.  The C functions are called with ctypes from the library the
package is linked with (the extension exports them, or loads libroce_rpc)."""
import ctypes
import math

import pytest

import roce_rpc
from roce_rpc import ErrorCode, RrpcError, pack_args, unpack_args

pytest.importorskip("msgpack", reason="install python3-msgpack")

_lib = ctypes.CDLL(roce_rpc._rrpc.__file__ if hasattr(roce_rpc, "_rrpc") else None)
_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]
_lib.rrpc_pack.restype = ctypes.c_int
_lib.rrpc_unpack.restype = ctypes.c_int

_C = {"i": ctypes.c_int64, "u": ctypes.c_uint64, "d": ctypes.c_double, "b": ctypes.c_int}


def c_pack(fmt, *values):
    """rrpc_pack(&buf, &len, fmt, values...) -> bytes."""
    buf, n = ctypes.c_void_p(), ctypes.c_size_t()
    args = []
    for f, v in zip(fmt, values):
        if f == "s":
            args.append(ctypes.c_char_p(v.encode()))
        elif f == "y":
            args += [ctypes.c_char_p(v), ctypes.c_size_t(len(v))]
        elif f != "n":
            args.append(_C[f](v))
    r = _lib.rrpc_pack(ctypes.byref(buf), ctypes.byref(n), fmt.encode(), *args)
    assert r == 0
    try:
        return ctypes.string_at(buf, n.value)
    finally:
        _libc.free(buf)


def c_unpack(data, fmt):
    """rrpc_unpack(data, len, errbuf, 256, fmt, &out...) -> (code, values, message)."""
    err = ctypes.create_string_buffer(256)
    outs, ptrs = [], []
    for f in fmt:
        if f in "sy":
            p, n = ctypes.c_char_p(), ctypes.c_size_t()
            outs.append((f, p, n))
            ptrs += [ctypes.byref(p), ctypes.byref(n)]
        elif f != "n":
            v = _C[f]()
            outs.append((f, v))
            ptrs.append(ctypes.byref(v))
        else:
            outs.append((f,))
    r = _lib.rrpc_unpack(data, ctypes.c_size_t(len(data)), err, ctypes.c_size_t(256),
                         fmt.encode(), *ptrs)
    vals = []
    if r == 0:
        for o in outs:
            if o[0] in "sy":
                raw = ctypes.string_at(o[1], o[2].value)
                vals.append(raw.decode() if o[0] == "s" else raw)
            elif o[0] == "n":
                vals.append(None)
            elif o[0] == "b":
                vals.append(bool(o[1].value))
            else:
                vals.append(o[1].value)
    return r, vals, err.value.decode()


CASES = [
    ("ii", (40, 2)),
    ("iiii", (-1, -33, -(1 << 63), (1 << 63) - 1)),
    ("uu", (0, (1 << 64) - 1)),
    ("u", (1 << 40,)),
    ("d", (1.5,)),
    ("d", (-0.0,)),
    ("bb", (True, False)),
    ("s", ("",)),
    ("s", ("h\u00e9llo " * 10,)),
    ("y", (b"",)),
    ("y", (bytes(range(256)) * 300,)),
    ("n", (None,)),
    ("isydbn", (7, "key", b"\x00\x01", 2.25, True, None)),
]


@pytest.mark.parametrize("fmt,values", CASES)
def test_pack_args_makes_the_bytes_rrpc_pack_makes_and_each_reads_the_other(fmt, values):
    mine = pack_args(*values)
    assert mine == c_pack(fmt, *values)
    r, got, msg = c_unpack(mine, fmt)
    assert r == 0, msg
    assert got == list(values)
    assert unpack_args(c_pack(fmt, *values), fmt) == list(values)
    assert unpack_args(mine) == list(values)


def test_buffers_and_nan():
    assert pack_args(bytearray(b"ab"), memoryview(b"cd")) == c_pack("yy", b"ab", b"cd")
    assert math.isnan(unpack_args(pack_args(math.nan), "d")[0])


@pytest.mark.parametrize("data,fmt", [
    (lambda: pack_args(1, "x"), "ii"),          # a type mismatch
    (lambda: pack_args(1), "ii"),               # a count mismatch
    (lambda: pack_args(1 << 63), "i"),          # above INT64_MAX
    (lambda: pack_args(-1), "u"),
    (lambda: pack_args(1) + b"\x00", "i"),      # trailing bytes
    (lambda: pack_args(1)[:0] + b"\xc1", "i"),  # not msgpack
    (lambda: bytes.fromhex("cd01"), "i"),       # not an array
])
def test_unpack_args_refuses_what_rrpc_unpack_refuses_with_its_words(data, fmt):
    data = data()
    r, _, c_msg = c_unpack(data, fmt)
    assert r == ErrorCode.ARGS
    with pytest.raises(RrpcError) as ei:
        unpack_args(data, fmt)
    assert ei.value.code == ErrorCode.ARGS and isinstance(ei.value, ValueError)
    if "array" not in c_msg:  # C words the count it expected in that one
        assert ei.value.message == c_msg


def test_pack_args_refuses_what_the_c_side_cannot_take():
    with pytest.raises(TypeError, match="argument 1: list cannot be a C argument"):
        pack_args(1, [2])
    with pytest.raises(ValueError, match="outside int64/uint64"):
        pack_args(1 << 64)
    with pytest.raises(ValueError, match="unknown format character 'x'"):
        unpack_args(pack_args(1), "x")


def test_a_c_style_call_with_msgpack_arguments(pair):
    s, lis, c = pair

    @s.handler("add")
    def add(data):
        a, b = unpack_args(data, "ii")
        return pack_args(a + b)
    conn = c.connect(lis.uri)
    assert unpack_args(conn.call("add", c_pack("ii", 40, 2)), "i") == [42]
