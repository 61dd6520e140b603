"""DLPack in both directions, for CPU memory, with no copy.

consume(obj): the memory of any object with __dlpack__ / __dlpack_device__
(a torch CPU tensor, a numpy array, ...) as a numpy array, and its rrpc
dtype.  bfloat16 (kDLBfloat, 16 bits) comes out as uint16, the same bits,
with RRPC_DTYPE_BF16, so no ml_dtypes is needed.  The producer's deleter
runs once the array and every view of it are gone.

export(array, dtype): an object whose __dlpack__ hands array's memory to a
consumer (np.from_dlpack, torch.from_dlpack), with dtype "bfloat16" to
label raw uint16/int16 bits as bfloat16.

Only the DLPack C ABI (dlpack.h, version 0.x: DLManagedTensor in a
"dltensor" capsule) is read and written here, through ctypes.
"""
import ctypes
import threading
import weakref
from typing import Any

import numpy as np

from ._rrpc import lib

__all__ = ["DLPackTensor", "consume", "export"]

KDL_CPU = 1
_INT, _UINT, _FLOAT, _BFLOAT, _BOOL = 0, 1, 2, 4, 6


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                             ("deleter", _DELETER)]

_NAME = b"dltensor"
_USED = b"used_dltensor"  # module constants: the capsule keeps pointing at them

_api = ctypes.pythonapi
_IsValid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api))
_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))
_SetName = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_SetName", _api))
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_New = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p,
                         _CAPSULE_DESTRUCTOR)(("PyCapsule_New", _api))
_IsValidRaw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api))
_GetPointerRaw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))


def _numpy_dtype(code, bits):
    """(numpy dtype, rrpc dtype) of a DLPack dtype, or TypeError."""
    if code == _BFLOAT and bits == 16:
        return np.dtype(np.uint16), lib.RRPC_DTYPE_BF16
    kind = {_INT: "i", _UINT: "u", _FLOAT: "f"}.get(code)
    if kind is None or bits not in (8, 16, 32, 64) or (kind == "f" and bits == 8):
        raise TypeError("DLPack dtype code %d with %d bits has no rrpc_dtype" % (code, bits))
    dt = np.dtype("%s%d" % (kind, bits // 8))
    return dt, lib.rrpc_dtype_from_name(dt.name.encode())


def _call_deleter(addr):
    mt = _DLManagedTensor.from_address(addr)
    if mt.deleter:
        mt.deleter(ctypes.cast(addr, ctypes.POINTER(_DLManagedTensor)))


def consume(obj: Any) -> Any:
    """(numpy array over obj's memory, rrpc dtype code).  ValueError for
    memory that is not the CPU's; TypeError for dtypes rrpc cannot carry."""
    dev = obj.__dlpack_device__()
    if int(dev[0]) != KDL_CPU:
        raise ValueError("DLPack device type %d: only CPU memory (type 1) can be sent; "
                         "copy the tensor to the CPU first (tensor.cpu())" % int(dev[0]))
    cap = obj.__dlpack__()
    if not _IsValid(cap, _NAME):
        raise ValueError("__dlpack__ did not return an unused DLPack capsule")
    addr = _GetPointer(cap, _NAME)
    _SetName(cap, _USED)  # consumed: calling the deleter is ours now
    try:
        t = _DLManagedTensor.from_address(addr).dl_tensor
        if t.dtype.lanes != 1:
            raise TypeError("DLPack vector dtypes (lanes %d) have no rrpc_dtype" % t.dtype.lanes)
        dt, code = _numpy_dtype(t.dtype.code, t.dtype.bits)
        nd = int(t.ndim)
        shape = tuple(int(t.shape[i]) for i in range(nd))
        if t.strides:
            strides = tuple(int(t.strides[i]) * dt.itemsize for i in range(nd))
        else:  # NULL: C-contiguous
            strides, step = [0] * nd, dt.itemsize
            for i in range(nd - 1, -1, -1):
                strides[i] = step
                step *= max(shape[i], 1)
            strides = tuple(strides)
        data = int(t.data or 0) + int(t.byte_offset)
        if any(n == 0 for n in shape):
            _call_deleter(addr)
            return np.empty(shape, dt), code
        lo = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
        hi = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0) + dt.itemsize
        buf = (ctypes.c_char * (hi - lo)).from_address(data + lo)
        root = np.frombuffer(buf, np.uint8)  # every view below keeps this object alive
        weakref.finalize(root, _call_deleter, addr)
    except BaseException:
        _call_deleter(addr)
        raise
    return np.ndarray(shape, dt, buffer=root, offset=-lo, strides=strides), code


# ---- producing ---------------------------------------------------------------

_exports = {}  # address of a DLManagedTensor we made -> what it keeps alive
_exports_lock = threading.Lock()


@_DELETER
def _delete_export(p):
    with _exports_lock:
        _exports.pop(ctypes.cast(p, ctypes.c_void_p).value, None)


@_CAPSULE_DESTRUCTOR
def _capsule_gone(cap):
    # never consumed: the deleter is still ours to run
    if _IsValidRaw(cap, _NAME):
        addr = _GetPointerRaw(cap, _NAME)
        if addr:
            _call_deleter(addr)


_DL_CODES = {"i": _INT, "u": _UINT, "f": _FLOAT}


class DLPackTensor:
    """What export() returns: a CPU tensor for any DLPack consumer."""

    __slots__ = ("array", "_code", "_bits", "__weakref__")

    def __init__(self, array: Any, dtype: Any = None) -> None:
        a = np.asarray(array)
        if dtype not in (None, "bfloat16"):
            raise ValueError("dtype is None or 'bfloat16'")
        if dtype == "bfloat16" or a.dtype.name == "bfloat16":  # raw bits, or ml_dtypes'
            if a.dtype.itemsize != 2 or (a.dtype.kind not in "iu" and
                                         a.dtype.name != "bfloat16"):
                raise TypeError("dtype='bfloat16' labels 16-bit integer arrays (the raw bits), "
                                "not %s" % a.dtype)
            self._code, self._bits = _BFLOAT, 16
        else:
            if a.dtype.kind not in _DL_CODES or not a.dtype.isnative:
                raise TypeError("dtype %s has no DLPack code here" % a.dtype)
            self._code, self._bits = _DL_CODES[a.dtype.kind], a.dtype.itemsize * 8
        self.array = a

    def __dlpack_device__(self):
        return (KDL_CPU, 0)

    def __dlpack__(self, stream=None):
        if stream is not None:
            raise BufferError("CPU memory takes no stream")
        a = self.array
        nd = a.ndim
        mt = _DLManagedTensor()
        shape = (ctypes.c_int64 * max(nd, 1))(*a.shape)
        item = a.dtype.itemsize
        if any(s % item for s in a.strides):
            raise BufferError("strides that are not whole elements cannot be exported")
        strides = (ctypes.c_int64 * max(nd, 1))(*(s // item for s in a.strides))
        t = mt.dl_tensor
        t.data = a.__array_interface__["data"][0]
        t.device = _DLDevice(KDL_CPU, 0)
        t.ndim = nd
        t.dtype = _DLDataType(self._code, self._bits, 1)
        t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
        t.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
        t.byte_offset = 0
        mt.deleter = _delete_export
        addr = ctypes.addressof(mt)
        with _exports_lock:
            _exports[addr] = (mt, shape, strides, a)
        return _New(addr, _NAME, _capsule_gone)


def export(array: Any, dtype: Any = None) -> "DLPackTensor":
    """An object with __dlpack__ over array's memory (no copy); dtype
    'bfloat16' labels 16-bit integer raw bits as bfloat16."""
    return DLPackTensor(array, dtype)


def __dir__() -> "list[str]":
    return sorted(__all__)
