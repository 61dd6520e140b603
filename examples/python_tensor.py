#!/usr/bin/python3
"""Moves a 64 MiB float32 tensor and a batch of KV-cache pages with the
roce_rpc Python bindings, and verifies both byte for byte.

    examples/python_tensor.py                     # server and client in one process, tcp
    examples/python_tensor.py --uri rdma://10.0.0.1:7100          # the same over verbs
    examples/python_tensor.py --mode server --uri tcp://0.0.0.0:7100
    examples/python_tensor.py --mode client --uri tcp://SERVER:7100

Build the bindings first (docs/python.md):
    meson setup build && ninja -C build
    /usr/bin/python3 bindings/python/build_ffi.py

The receiver checks what landed against a SHA-256 the sender computed from
its own memory, so the check is byte for byte also across two hosts.
"""
import argparse
import hashlib
import os
import sys
import time
from typing import Any, Dict, Tuple

import numpy as np

try:  # an installed package, or the one bindings/python/run-tests.sh built
    import roce_rpc
except ImportError:  # the source tree, after bindings/python/build_ffi.py
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                    "bindings", "python"))
    import roce_rpc

TENSOR_SHAPE = (4096, 4096)                 # float32: 64 MiB
PAGE_SHAPE = (2, 8, 64)                     # one KV page: K and V, 8 heads x 64, float16
SRC_PAGES, DST_PAGES = 256, 512             # 2 KiB pages


def sha(a: Any) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def serve(ctx: roce_rpc.Context, uri: str) -> Tuple[roce_rpc.Listener, Any]:
    """The receiving side: a tensor server and a KV pool; returns the
    listener and what must stay alive while it serves."""
    lis = ctx.listen(uri)
    received: Dict[str, Any] = {}
    # each tensor lands in a new numpy array; on_tensor runs once all its bytes are in
    tensors = ctx.serve_tensors(on_tensor=lambda conn, name, arr: received.update({name: arr}))
    pool = ctx.kv_pool(np.zeros((DST_PAGES,) + PAGE_SHAPE, np.float16))

    @ctx.handler("kv.token", request=True)
    def kv_token(req: roce_rpc.Request, data: bytes) -> bytes:
        return pool.token(req.conn).to_bytes()

    @ctx.handler("tensor.verify")
    def tensor_verify(data: bytes) -> bytes:
        name, digest = data.decode().split()
        arr = received.pop(name)  # the sender's send_tensor returned: it is here
        if sha(arr) != digest:
            raise roce_rpc.RrpcError(10, "tensor %s: digest mismatch" % name)
        return ("%s %s %s" % (name, arr.dtype, arr.shape)).encode()

    @ctx.handler("kv.verify")
    def kv_verify(data: bytes) -> bytes:
        bad = 0
        for line in data.decode().splitlines():
            page, digest = line.split()
            bad += int(sha(pool.page(int(page))) != digest)
        if bad:
            raise roce_rpc.RrpcError(11, "%d KV pages differ" % bad)
        return b"ok"

    return lis, (tensors, pool, received)


def client(ctx: roce_rpc.Context, uri: str) -> None:
    conn = ctx.connect(uri, timeout=15)
    print("connected to %s over %s" % (uri, conn.transport))

    # 64 MiB float32 tensor, registered zero-copy, sent as one WRITE
    x = np.arange(np.prod(TENSOR_SHAPE), dtype=np.float32).reshape(TENSOR_SHAPE) * 0.5
    region = ctx.register(x, access="")
    t0 = time.perf_counter()
    conn.send_tensor("weights", x)
    dt = time.perf_counter() - t0
    print("tensor: %d MiB in %.3f s (%.2f GB/s)" % (x.nbytes >> 20, dt, x.nbytes / dt / 1e9))
    print("tensor verified by the receiver:",
          conn.call("tensor.verify", ("weights %s" % sha(x)).encode()).decode())
    region.close()

    # a batch of KV pages into the peer's pool
    rng = np.random.default_rng(2024)
    src = rng.standard_normal((SRC_PAGES,) + PAGE_SHAPE).astype(np.float16)
    pool = ctx.kv_pool(src)
    tok = roce_rpc.KvToken.from_bytes(conn.call("kv.token"))
    scattered = rng.permutation(256)[:128]                  # destinations 0..255, shuffled
    batch = [(2 * i, int(d)) for i, d in enumerate(scattered)]
    batch += [(128 + i, 300 + i) for i in range(64)]        # one run: a single WRITE
    t0 = time.perf_counter()
    writes = conn.kv_transfer(pool, tok, batch, notify=1)
    dt = time.perf_counter() - t0
    print("KV: %d pages of %d bytes in %d WRITEs, %.1f ms" % (len(batch), pool.page_size, writes,
                                                               dt * 1e3))
    report = "\n".join("%d %s" % (d, sha(src[s])) for s, d in batch)
    print("KV pages verified by the receiver:", conn.call("kv.verify", report.encode()).decode())
    pool.close()
    conn.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--uri", default="tcp://127.0.0.1:0")
    ap.add_argument("--mode", choices=["both", "server", "client"], default="both")
    args = ap.parse_args()
    if args.mode == "server":
        with roce_rpc.Context() as ctx:
            lis, _keep = serve(ctx, args.uri)
            print("serving on", lis.uri, flush=True)
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
        return 0
    if args.mode == "client":
        with roce_rpc.Context() as ctx:
            client(ctx, args.uri)
        return 0
    with roce_rpc.Context() as sctx, roce_rpc.Context() as cctx:
        lis, _keep = serve(sctx, args.uri)
        client(cctx, lis.uri)
    print("python_tensor: OK")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except roce_rpc.RrpcError as e:
        print("python_tensor: FAILED: %s" % e, file=sys.stderr)
        sys.exit(1)
