import threading

import numpy as np
import pytest

import roce_rpc
from roce_rpc import RrpcError

from conftest import client_uri

pytestmark = pytest.mark.skipif(not roce_rpc.HAVE_TENSOR,
                                reason="libroce_rpc was built without <roce_rpc/tensor.h>")

DTYPES = ["uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64",
          "float16", "float32", "float64"]


@pytest.fixture
def tpair(pair):
    s, lis, c = pair
    srv = s.serve_tensors()
    conn = c.connect(client_uri(lis))
    yield s, srv, c, conn
    srv.close()


@pytest.mark.parametrize("dtype", DTYPES)
def test_dtype_round_trip(dtype):
    code = roce_rpc.dtype_to_rrpc(dtype)
    assert roce_rpc.dtype_from_rrpc(code) == np.dtype(dtype)


def test_unsupported_dtypes_are_refused():
    for dt in (np.complex64, np.bool_, np.dtype(">f4")):
        with pytest.raises(TypeError):
            roce_rpc.dtype_to_rrpc(dt)


def test_send_tensors_of_every_dtype_and_shape(tpair):
    s, srv, c, conn = tpair
    rng = np.random.default_rng(7)
    shapes = [(), (1,), (17,), (3, 5), (2, 3, 4), (2, 1, 3, 1, 2)]
    for i, dt in enumerate(DTYPES):
        shape = shapes[i % len(shapes)]
        x = (rng.random(shape) * 100).astype(dt)
        conn.send_tensor("t%d" % i, x)
        name, y = srv.receive(10)
        assert name == "t%d" % i
        assert y.dtype == x.dtype and y.shape == x.shape
        assert y.tobytes() == x.tobytes()


def test_strided_views_and_empty_tensors(tpair):
    s, srv, c, conn = tpair
    base = np.arange(4 * 6 * 8, dtype=np.int32).reshape(4, 6, 8)
    for view in (base[:, ::2, 1:7], base.transpose(2, 0, 1), base[::-1], base[1]):
        conn.send_tensor("v", view)
        _, y = srv.receive(10)
        assert y.shape == view.shape and np.array_equal(y, view)
    conn.send_tensor("empty", np.zeros((0, 4), np.float32))
    _, y = srv.receive(10)
    assert y.shape == (0, 4) and y.dtype == np.float32


def test_send_from_a_registered_region_and_into_a_chosen_destination(pair):
    s, lis, c = pair
    pool = np.zeros((4, 1000), np.float64)
    s.register(pool, access="w")
    got = []
    done = threading.Event()

    def alloc(conn, name, dtype, shape):
        assert dtype == np.float64 and shape == (1000,)
        return pool[int(name)]

    def on_tensor(conn, name, arr):
        got.append((name, arr))
        done.set()

    srv = s.serve_tensors(alloc=alloc, on_tensor=on_tensor)
    conn = c.connect(client_uri(lis))
    src = np.linspace(0, 1, 4000).reshape(4, 1000)
    region = c.register(src, access="")
    conn.send_tensor("2", src[1])  # from the registered region: zero copy
    assert done.wait(10)
    assert got[0][0] == "2" and np.shares_memory(got[0][1], pool)
    assert np.array_equal(pool[2], src[1]) and not pool[[0, 1, 3]].any()
    region.close()
    srv.close()


def test_refusals_reach_the_sender(pair):
    s, lis, c = pair

    def alloc(conn, name, dtype, shape):
        if name == "no":
            raise RrpcError(77, "not this one")
        return np.zeros((2, 2), np.float32)  # wrong shape for anything else

    srv = s.serve_tensors(alloc=alloc)
    conn = c.connect(client_uri(lis))
    with pytest.raises(RrpcError) as ei:
        conn.send_tensor("no", np.zeros(3))
    assert ei.value.code == 77
    with pytest.raises(RrpcError):
        conn.send_tensor("shape", np.zeros(3, np.float32))
    srv.close()
    with pytest.raises(RrpcError) as ei:
        conn.send_tensor("closed", np.zeros(3))
    assert ei.value.code == roce_rpc.E_NO_METHOD


def test_kv_pages_between_numpy_pools(pair):
    s, lis, c = pair
    dst = np.zeros((64, 2, 8, 16), np.float16)  # 64 pages of 512 bytes
    dpool = s.kv_pool(dst)

    @s.handler("kv", request=True)
    def kv(req, data):
        return dpool.token(req.conn).to_bytes()

    conn = c.connect(client_uri(lis))
    src = np.random.default_rng(3).random((32, 2, 8, 16)).astype(np.float16)
    spool = c.kv_pool(src)
    tok = roce_rpc.KvToken.from_bytes(conn.call("kv"))
    assert (tok.page_size, tok.page_count) == (512, 64) and len(bytes(tok)) == 48
    pairs = [(i, 10 + i) for i in range(8)] + [(20, 3), (31, 63), (8, 40), (9, 41)]
    writes = conn.kv_transfer(spool, tok, pairs, notify=5)
    assert writes == 4  # 10..17, 3, 63, 40..41 are runs on both sides
    assert s.wait_notify(10) == 5
    for a, b in pairs:
        assert dst[b].tobytes() == src[a].tobytes()
    touched = {b for _, b in pairs}
    assert not any(dst[i].any() for i in range(64) if i not in touched)
    assert np.shares_memory(dpool.page(3), dst)
    # an (n, 2) array of pairs, async
    f = conn.kv_transfer_async(spool, tok, np.array([[0, 0], [1, 1]], np.uint64))
    assert f.result(10) == 1 and dst[1].tobytes() == src[1].tobytes()
    with pytest.raises(RrpcError) as ei:
        conn.kv_transfer(spool, tok, [(0, 64)])
    assert ei.value.code == -34  # -ERANGE
    with pytest.raises(RrpcError) as ei:
        conn.kv_transfer(spool, tok, [(0, 1), (2, 1)])
    assert ei.value.code == -17  # -EEXIST
    spool.close()
    dpool.close()
