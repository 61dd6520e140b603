import numpy as np
import pytest

import roce_rpc
from roce_rpc import RrpcError, Token

from conftest import client_uri


@pytest.fixture
def served(pair):
    """A server numpy array registered zero-copy, and a connection that can
    get its token."""
    s, lis, c = pair
    target = np.zeros((256, 1024), dtype=np.float32)  # 1 MiB
    region = s.register(target)

    @s.handler("token", request=True)
    def token(req, data):
        return region.token(req.conn).to_bytes()

    conn = c.connect(client_uri(lis))
    tok = Token.from_bytes(conn.call("token"))
    return s, c, conn, target, region, tok


def test_register_is_zero_copy(served):
    s, c, conn, target, region, tok = served
    assert region.addr == target.__array_interface__["data"][0]
    assert region.nbytes == target.nbytes and region.obj is target
    assert tok.length == target.nbytes
    assert Token.from_bytes(tok.to_bytes()) == tok and len(bytes(tok)) == roce_rpc.TOKEN_SIZE


def test_write_lands_in_the_numpy_array(served):
    s, c, conn, target, region, tok = served
    src = np.arange(target.size, dtype=np.float32).reshape(target.shape) * 0.5
    local = c.register(src, access="")  # local use only
    conn.write(local, 0, tok, 0, src.nbytes, notify=0xC0FFEE)
    assert s.wait_notify(10) == 0xC0FFEE
    # no copy back: the server's own array holds the bytes the client wrote
    assert target.tobytes() == src.tobytes()
    # partial write at offsets
    row = np.full(1024, 7.0, np.float32)
    lr = c.register(row)
    conn.write(lr, 0, tok, 4096 * 3, 4096)
    assert (target[3] == 7.0).all() and (target[2] == src[2]).all()


def test_read_into_a_numpy_array(served):
    s, c, conn, target, region, tok = served
    target[:] = np.random.default_rng(1).random(target.shape, dtype=np.float32)
    dst = np.empty_like(target)
    lr = c.register(dst)
    conn.read(lr, 0, tok, 0, dst.nbytes)
    assert dst.tobytes() == target.tobytes()
    f = conn.read_async(lr, 0, tok, 8, 16)
    assert f.result(10) is None


def test_async_write_and_access_errors(pair):
    s, lis, c = pair
    ro = bytearray(4096)
    region = s.register(ro, access="r")

    @s.handler("token", request=True)
    def token(req, data):
        return region.token(req.conn).to_bytes()

    conn = c.connect(client_uri(lis))
    tok = Token.from_bytes(conn.call("token"))
    src = c.register(bytes(4096), access="")  # a read-only buffer works as a source
    with pytest.raises(RrpcError) as ei:
        conn.write(src, 0, tok, 0, 16)  # the token does not allow writing
    assert ei.value.code == roce_rpc.E_ACCESS
    with pytest.raises(RrpcError) as ei:
        conn.read(src, 0, tok, 0, 16)  # cannot read into bytes
    with pytest.raises(RrpcError) as ei:
        conn.write(src, 4000, tok, 0, 200)  # outside the local region
    assert ei.value.code == roce_rpc.E_REGION
    with pytest.raises(BufferError):  # remote WRITE into bytes: refused
        c.register(bytes(16), access="w")
    forged = Token(tok.addr, tok.length, tok.key ^ 0x5A5A, roce_rpc.REMOTE_READ)
    dst = c.register(bytearray(16))
    f = conn.read_async(dst, 0, forged, 0, 16)
    assert isinstance(f.exception(10), RrpcError) and f.exception().code == roce_rpc.E_ACCESS


def test_region_close_is_deferred_past_inflight_ops(served):
    s, c, conn, target, region, tok = served
    src = np.ones(target.size, np.float32)
    lr = c.register(src)
    f = conn.write_async(lr, 0, tok, 0, src.nbytes)
    lr.close()  # deregisters only after the WRITE completed
    f.result(10)
    assert lr.closed and (target == 1).all()
    with pytest.raises(RrpcError):
        conn.write(lr, 0, tok, 0, 4)
