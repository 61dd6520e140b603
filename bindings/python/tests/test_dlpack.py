"""DLPack in and out: any CPU tensor with __dlpack__ is sent from its own
memory; received arrays go to np.from_dlpack / torch.from_dlpack; bfloat16
travels as its raw bits without ml_dtypes."""
import gc
import os

import numpy as np
import pytest

import roce_rpc
from roce_rpc import _dlpack
from roce_rpc.tensor import to_dlpack

pytestmark = pytest.mark.skipif(not roce_rpc.HAVE_TENSOR, reason="no tensor API")


@pytest.fixture
def tpair(pair):
    from conftest import client_uri
    s, lis, c = pair
    srv = s.serve_tensors()
    conn = c.connect(client_uri(lis))
    yield srv, conn
    srv.close()


def _torch():
    if os.environ.get("RRPC_TEST_NO_TORCH"):
        pytest.skip("RRPC_TEST_NO_TORCH is set (the VM run: torch loads too slowly there)")
    return pytest.importorskip("torch", reason="python3-torch is not installed")


def test_a_dlpack_producer_is_consumed_in_place_and_its_deleter_runs_once_unused():
    src = np.arange(24, dtype=np.float32).reshape(4, 6)[:, 1:5]
    n0 = len(_dlpack._exports)
    a, code = _dlpack.consume(to_dlpack(src))
    assert len(_dlpack._exports) == n0 + 1
    assert a.__array_interface__["data"][0] == src.__array_interface__["data"][0]
    assert a.strides == src.strides and np.array_equal(a, src)
    assert code == roce_rpc.dtype_to_rrpc(np.float32)
    view = a[1:]
    del a
    gc.collect()
    assert len(_dlpack._exports) == n0 + 1  # a view still reads the memory
    del view
    gc.collect()
    assert len(_dlpack._exports) == n0       # the producer's deleter ran
    cap = to_dlpack(src).__dlpack__()        # never consumed: freed with the capsule
    assert len(_dlpack._exports) == n0 + 1
    del cap
    gc.collect()
    assert len(_dlpack._exports) == n0


def test_numpy_consumes_what_we_export_and_received_arrays():
    a = np.random.default_rng(3).standard_normal((5, 7))
    assert np.array_equal(np.from_dlpack(to_dlpack(a)), a)
    with pytest.raises(TypeError):
        to_dlpack(np.zeros(3, np.float32), "bfloat16")  # bfloat16 labels 16-bit bits only


def test_dlpack_tensors_and_bfloat16_bits_travel_without_a_copy(tpair):
    srv, conn = tpair
    bits = np.random.default_rng(5).integers(0, 1 << 16, (33, 9), dtype=np.uint16)
    conn.send_tensor("bf", to_dlpack(bits, "bfloat16"))
    name, got = srv.receive(timeout=30)
    assert got.dtype == np.uint16 and np.array_equal(got, bits)  # no ml_dtypes needed
    f = np.random.default_rng(6).standard_normal((16, 12)).astype(np.float32).T
    conn.send_tensor("f", to_dlpack(f))
    _, got = srv.receive(timeout=30)
    assert np.array_equal(np.from_dlpack(got), f) and got.strides == f.strides


def test_memory_off_the_cpu_is_refused_with_a_hint():
    class OnGpu:
        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, stream=None):
            raise AssertionError("must not be asked for its memory")
    with pytest.raises(ValueError, match="CPU"):
        _dlpack.consume(OnGpu())


def test_torch_cpu_tensors_in_and_out(tpair):
    torch = _torch()
    srv, conn = tpair
    t = torch.randn(64, 48).T  # a transposed view: sent in one piece, from its memory
    a, _ = _dlpack.consume(t)
    assert a.__array_interface__["data"][0] == t.data_ptr()
    del a
    conn.send_tensor("t", t)
    _, got = srv.receive(timeout=30)
    back = torch.from_dlpack(got)
    assert back.dtype == torch.float32 and torch.equal(back, t)
    assert back.data_ptr() == got.__array_interface__["data"][0]  # no copy on the way out
    b = torch.randn(10, 6).to(torch.bfloat16)
    conn.send_tensor("b", b)
    _, bits = srv.receive(timeout=30)
    bb = torch.from_dlpack(to_dlpack(bits, "bfloat16"))
    assert bb.dtype == torch.bfloat16 and torch.equal(bb, b)
    i = torch.arange(100, dtype=torch.int64).reshape(10, 10)
    conn.send_tensor("i", i)
    _, got = srv.receive(timeout=30)
    assert torch.equal(torch.from_dlpack(got), i)
