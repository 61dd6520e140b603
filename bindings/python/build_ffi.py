#!/usr/bin/python3
"""Builds the cffi extension of the roce_rpc Python package (API mode).

meson builds and installs the extension itself (bindings/python/roce_rpc/
meson.build runs "build_ffi.py emit"); this script is also the quick way to
build it by hand for a library that is already built or installed.

    /usr/bin/python3 bindings/python/build_ffi.py emit OUT.c [--include-dir DIR]
        writes the extension's C source (what meson compiles and installs)

    /usr/bin/python3 bindings/python/build_ffi.py [build] [--build-dir DIR] [--out-dir DIR]
        compiles roce_rpc/_rrpc*.so against the public headers and links it
        with the libroce_rpc.so of DIR: a meson build directory (default:
        $RRPC_BUILD_DIR, else <repo>/build) or an install prefix (DIR/lib,
        DIR/lib64 or DIR/lib/<multiarch>; headers from DIR/include), with an
        rpath to the directory that holds the library, so no LD_LIBRARY_PATH
        is needed while that library stays where it is.  The extension lands
        next to the package sources (bindings/python/roce_rpc/); with
        --out-dir DIR the whole package is copied to DIR/roce_rpc/ instead.

Uses Debian's python3-cffi: run it with /usr/bin/python3.
"""
import argparse
import glob
import os
import shutil
import sys
import sysconfig
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PKG = os.path.join(HERE, "roce_rpc")


def lib_exports_tensor(libdir):
    """Whether the libroce_rpc.so in @libdir exports the tensor API."""
    import ctypes
    try:
        so = ctypes.CDLL(os.path.join(libdir, "libroce_rpc.so"))
    except OSError:
        return False
    return hasattr(so, "rrpc_tensor_send_with") and hasattr(so, "rrpc_kv_transfer")


def cdef_text(tensor, broker=False):
    """The cdef: rrpc_cdef.h, plus tensor_cdef.h when tensors are bound and
    broker_cdef.h when the broker library (libroce_rpc_broker) is."""
    parts = []
    for name in ("rrpc_cdef.h",) + (("tensor_cdef.h",) if tensor else ()) + (
            ("broker_cdef.h",) if broker else ()):
        with open(os.path.join(HERE, name)) as f:
            parts.append(f.read())
    return "\n".join(parts)


def make_ffi(include_dir, tensor, broker=False, **set_source_kw):
    """The cffi builder for roce_rpc._rrpc over the headers in @include_dir."""
    import cffi

    includes = "#include <stdlib.h>\n#include <roce_rpc/rrpc.h>\n"
    if tensor:
        includes += "#include <roce_rpc/tensor.h>\n"
    if broker:
        includes += "#include <roce_rpc/broker.h>\n"
    ffi = cffi.FFI()
    ffi.cdef(cdef_text(tensor, broker) + "\nvoid free(void *);\n" + CALL_WAIT_CDEF)
    with open(os.path.join(HERE, "call_wait.h")) as f:
        includes += f.read()
    ffi.set_source("roce_rpc._rrpc", includes, include_dirs=[include_dir], **set_source_kw)
    return ffi


# The extension's own helpers (call_wait.h): what Conn.call waits on.
CALL_WAIT_CDEF = """
typedef struct rrpcpy_wait { int done; int sleeping; int started; int status; int owned;
                             void *data; size_t len;
                             unsigned char inline_buf[256]; rrpc_meta *meta;
                             size_t nmeta; } rrpcpy_wait;
int rrpcpy_call_wait(rrpc_ctx *ctx, rrpc_conn *conn, const char *method, const void *req,
                     size_t len, const rrpc_call_opts *opts, rrpcpy_wait *w, int slice_ms);
int rrpcpy_wait_more(rrpc_ctx *ctx, rrpcpy_wait *w, int slice_ms);
int rrpcpy_cancel(rrpc_conn *conn, rrpcpy_wait *w);
int rrpcpy_wait_for(rrpcpy_wait *w, int spin_us, int slice_ms);
void rrpcpy_wait_clear(rrpcpy_wait *w);
extern "Python" void _rrpc_py_aio_done(uintptr_t key, int status, size_t len,
                                       const rrpc_result *res);
void rrpcpy_aio_call_done(const rrpc_result *res, void *user);
"""


def has_tensor_header(include_dir):
    return os.path.exists(os.path.join(include_dir, "roce_rpc", "tensor.h"))


def find_library(top):
    """(libdir, include_dir) of a meson build directory or an install prefix."""
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    candidates = [os.path.join(top, "libroce_rpc"),          # a meson build directory
                  os.path.join(top, "lib", multiarch) if multiarch else None,
                  os.path.join(top, "lib64"), os.path.join(top, "lib")]
    for libdir in filter(None, candidates):
        if glob.glob(os.path.join(libdir, "libroce_rpc.so*")):
            prefix_inc = os.path.join(top, "include")
            if libdir != candidates[0] and os.path.exists(
                    os.path.join(prefix_inc, "roce_rpc", "rrpc.h")):
                return libdir, prefix_inc
            return libdir, os.path.join(REPO, "include")
    sys.exit("build_ffi: no libroce_rpc.so in %s (a build directory: DIR/libroce_rpc; an "
             "install prefix: DIR/lib, DIR/lib64, DIR/lib/%s); build the library first:\n"
             "    meson setup build && ninja -C build" % (top, multiarch or "<multiarch>"))


def emit(args):
    include_dir = os.path.abspath(args.include_dir)
    ffi = make_ffi(include_dir, has_tensor_header(include_dir), args.broker)
    ffi.emit_c_code(args.output)


def build(args):
    libdir, include_dir = find_library(os.path.abspath(args.build_dir))
    tensor = has_tensor_header(include_dir) and lib_exports_tensor(libdir)
    if not tensor:
        print("build_ffi: the library has no tensor API; building without it")
    broker = bool(glob.glob(os.path.join(libdir, "libroce_rpc_broker.so*")))
    ffi = make_ffi(include_dir, tensor, broker,
                   library_dirs=[libdir], libraries=["roce_rpc"] + (
                       ["roce_rpc_broker"] if broker else []),
                   extra_compile_args=["-D_GNU_SOURCE", "-Wno-unused-parameter"],
                   extra_link_args=["-Wl,-rpath," + os.path.abspath(libdir)])
    dest = PKG
    if args.out_dir:
        dest = os.path.join(os.path.abspath(args.out_dir), "roce_rpc")
        if os.path.abspath(dest) != os.path.abspath(PKG):
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(PKG, dest, ignore=shutil.ignore_patterns(
                "*.so", "__pycache__", "meson.build"))
    tmp = tempfile.mkdtemp(prefix="rrpc-ffi-")
    try:
        so = ffi.compile(tmpdir=tmp, verbose=bool(os.environ.get("RRPC_FFI_VERBOSE")))
        for old in glob.glob(os.path.join(dest, "_rrpc*.so")):
            os.unlink(old)
        out = os.path.join(dest, os.path.basename(so))
        shutil.copy2(so, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("build_ffi: %s (library: %s)" % (os.path.relpath(out), libdir))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command")
    em = sub.add_parser("emit", help="write the extension's C source (for meson)")
    em.add_argument("output")
    em.add_argument("--include-dir", default=os.path.join(REPO, "include"))
    em.add_argument("--broker", action="store_true",
                    help="bind <roce_rpc/broker.h> too (the extension links libroce_rpc_broker)")
    bd = sub.add_parser("build", help="compile the extension (the default)")
    for p, dflt in ((ap, None), (bd, argparse.SUPPRESS)):  # before or after "build"
        p.add_argument("--build-dir", default=dflt or os.environ.get(
            "RRPC_BUILD_DIR", os.path.join(REPO, "build")),
            help="a meson build directory or an install prefix")
        p.add_argument("--out-dir", default=dflt,
                       help="copy the package with its extension to OUT_DIR/roce_rpc")
    args = ap.parse_args()
    if args.command == "emit":
        emit(args)
    else:
        build(args)


if __name__ == "__main__":
    main()
