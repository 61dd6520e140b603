"""msgpack arguments in the format of the C side (<roce_rpc/pack.h>).

C servers and clients pack a call's arguments with rrpc_pack(&buf, &len,
fmt, ...) as one msgpack array, and check them with rrpc_unpack(buf, len,
errbuf, errlen, fmt, ...); fmt names each element's type:

    'i' int64   'u' uint64   'd' double (float64)   'b' bool
    's' string (UTF-8)   'y' bytes (msgpack bin)    'n' nil

pack_args() packs Python values the same way: an int as the smallest
msgpack integer, a float as float64, str as str, bytes-likes as bin, None
as nil.  unpack_args() decodes one array; with fmt it checks the element
count and types as rrpc_unpack does, with the same message.
"""
from typing import Any, List, Optional, Union

__all__ = ["pack_args", "unpack_args"]

_Arg = Union[None, bool, int, float, str, bytes, bytearray, memoryview]

_WANT = {"i": "int64", "u": "uint64", "d": "double", "b": "bool", "s": "string", "y": "bytes",
         "n": "nil"}


def _msgpack() -> Any:
    try:
        import msgpack
    except ImportError:
        raise ImportError("roce_rpc.pack_args/unpack_args need the msgpack package: "
                          "apt-get install python3-msgpack (or pip install msgpack)") from None
    return msgpack


def pack_args(*args: _Arg) -> bytes:
    """Packs args as the msgpack array rrpc_unpack reads.

    Args:
        *args: None, bool, int (-2**63 .. 2**64-1), float, str, or a
            bytes-like object (bytes, bytearray, memoryview).

    Returns:
        The msgpack bytes, as rrpc_pack would make them for the matching
        format ('i' or 'u', 'd', 'b', 's', 'y', 'n').

    Raises:
        TypeError: for any other type (a list, a dict: the C side takes
            none); ValueError: for an int out of the 64-bit range.
    """
    out = []
    for k, a in enumerate(args):
        if a is None or isinstance(a, (bool, float, str, bytes)):
            out.append(a)
        elif isinstance(a, int):
            if not -(1 << 63) <= a < (1 << 64):
                raise ValueError("argument %d: %d is outside int64/uint64" % (k, a))
            out.append(int(a))
        elif isinstance(a, (bytearray, memoryview)):
            out.append(bytes(a))
        else:
            raise TypeError("argument %d: %s cannot be a C argument; pass None, bool, int, "
                            "float, str or bytes" % (k, type(a).__name__))
    return bytes(_msgpack().packb(out, use_bin_type=True, use_single_float=False))


def _type_name(v: Any) -> str:
    if v is None:
        return "nil"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "unsigned integer" if v >= 0 else "negative integer"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "string"
    if isinstance(v, bytes):
        return "bytes"
    if isinstance(v, (list, tuple)):
        return "array"
    if isinstance(v, dict):
        return "map"
    return "extension"


def _matches(f: str, v: Any) -> bool:
    if f == "i":
        return isinstance(v, int) and not isinstance(v, bool) and v <= (1 << 63) - 1
    if f == "u":
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0
    if f == "d":
        return isinstance(v, float)
    if f == "b":
        return isinstance(v, bool)
    if f == "s":
        return isinstance(v, str)
    if f == "y":
        return isinstance(v, bytes)
    return v is None


def unpack_args(data: Union[bytes, bytearray, memoryview], fmt: Optional[str] = None
                ) -> List[Any]:
    """Decodes the msgpack array of a call's arguments.

    Args:
        data: what rrpc_pack (or pack_args) made.
        fmt: if given, the format rrpc_unpack would be given ("iis", ...):
            the element count and each element's type are checked.

    Returns:
        The elements: int, float, bool, str, bytes or None.

    Raises:
        RrpcValueError (code E_ARGS): not one msgpack array, trailing
            bytes, or (with fmt) a count or type that does not match,
            worded as rrpc_unpack words it; ValueError: an unknown format
            character.
    """
    from ._core import RrpcError, ErrorCode
    if fmt is not None:
        bad = [c for c in fmt if c not in _WANT]
        if bad:
            raise ValueError("unknown format character %r: use i u d b s y n" % bad[0])
    mp = _msgpack()
    try:
        v = mp.unpackb(bytes(data), raw=False, strict_map_key=False)
    except mp.ExtraData:
        raise RrpcError(ErrorCode.ARGS, "trailing bytes after the arguments") from None
    except Exception as e:
        raise RrpcError(ErrorCode.ARGS, "truncated msgpack data" if "incomplete" in str(e)
                        else "not msgpack data") from None
    if not isinstance(v, list):
        raise RrpcError(ErrorCode.ARGS, "expected an array of %s arguments, found %s"
                        % (len(fmt) if fmt is not None else "", _type_name(v)))
    if fmt is not None:
        if len(v) != len(fmt):
            raise RrpcError(ErrorCode.ARGS, "expected %d arguments, found %d"
                            % (len(fmt), len(v)))
        for k, (f, x) in enumerate(zip(fmt, v)):
            if not _matches(f, x):
                above = (" above INT64_MAX" if f == "i" and isinstance(x, int)
                         and not isinstance(x, bool) and x > 0 else "")
                raise RrpcError(ErrorCode.ARGS, "argument %d: expected %s, found %s%s"
                                % (k, _WANT[f], _type_name(x), above))
    return v


def __dir__() -> List[str]:
    return sorted(__all__)
