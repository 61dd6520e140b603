#!/usr/bin/python3
"""Builds the cffi extension of the roce_rpc Python package (API mode).

    /usr/bin/python3 bindings/python/build_ffi.py [build] [--build-dir DIR] [--out-dir DIR]

compiles roce_rpc/_rrpc*.so against the public headers in include/roce_rpc/
and links it with the libroce_rpc.so of a meson build directory (default:
$RRPC_BUILD_DIR, else <repo>/build), with an rpath to that directory, so no
LD_LIBRARY_PATH is needed.  The extension lands next to the package sources
(bindings/python/roce_rpc/); with --out-dir DIR the whole package is copied to
DIR/roce_rpc/ instead (for example a meson build directory).

Uses Debian's python3-cffi: run it with /usr/bin/python3.
"""
import argparse
import glob
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PKG = os.path.join(HERE, "roce_rpc")


def have_tensor(libdir):
    """Tensors are bound when the header exists and the library exports them."""
    if not os.path.exists(os.path.join(REPO, "include", "roce_rpc", "tensor.h")):
        return False
    import ctypes
    try:
        so = ctypes.CDLL(os.path.join(libdir, "libroce_rpc.so"))
    except OSError:
        return False
    return hasattr(so, "rrpc_tensor_send") and hasattr(so, "rrpc_kv_transfer")


def cdef_text(tensor):
    """The cdef: rrpc_cdef.h, plus tensor_cdef.h when tensors are bound."""
    parts = []
    for name in ("rrpc_cdef.h",) + (("tensor_cdef.h",) if tensor else ()):
        with open(os.path.join(HERE, name)) as f:
            parts.append(f.read())
    return "\n".join(parts)


def make_ffi(build_dir):
    import cffi

    libdir = os.path.join(build_dir, "libroce_rpc")
    if not glob.glob(os.path.join(libdir, "libroce_rpc.so*")):
        sys.exit("build_ffi: no libroce_rpc.so in %s; build the library first:\n"
                 "    meson setup build && ninja -C build" % libdir)
    includes = "#include <stdlib.h>\n#include <roce_rpc/rrpc.h>\n"
    tensor = have_tensor(libdir)
    if tensor:
        includes += "#include <roce_rpc/tensor.h>\n"
    else:
        print("build_ffi: the library has no tensor API; building without it")
    ffi = cffi.FFI()
    ffi.cdef(cdef_text(tensor) + "\nvoid free(void *);\n")
    ffi.set_source(
        "roce_rpc._rrpc", includes,
        include_dirs=[os.path.join(REPO, "include")],
        library_dirs=[libdir],
        libraries=["roce_rpc"],
        extra_compile_args=["-D_GNU_SOURCE", "-Wno-unused-parameter"],
        extra_link_args=["-Wl,-rpath," + os.path.abspath(libdir)],
    )
    return ffi


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", nargs="?", default="build", choices=["build"])
    ap.add_argument("--build-dir", default=os.environ.get("RRPC_BUILD_DIR",
                                                          os.path.join(REPO, "build")))
    ap.add_argument("--out-dir", default=None,
                    help="copy the package with its extension to OUT_DIR/roce_rpc")
    args = ap.parse_args()
    build_dir = os.path.abspath(args.build_dir)
    ffi = make_ffi(build_dir)
    dest = PKG
    if args.out_dir:
        dest = os.path.join(os.path.abspath(args.out_dir), "roce_rpc")
        if os.path.abspath(dest) != os.path.abspath(PKG):
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(PKG, dest, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    tmp = tempfile.mkdtemp(prefix="rrpc-ffi-")
    try:
        so = ffi.compile(tmpdir=tmp, verbose=bool(os.environ.get("RRPC_FFI_VERBOSE")))
        for old in glob.glob(os.path.join(dest, "_rrpc*.so")):
            os.unlink(old)
        out = os.path.join(dest, os.path.basename(so))
        shutil.copy2(so, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("build_ffi: %s (library: %s)" % (os.path.relpath(out), build_dir))


if __name__ == "__main__":
    main()
