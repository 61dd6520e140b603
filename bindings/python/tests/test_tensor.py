import errno
import mmap
import os
import struct
import threading

import numpy as np
import pytest

import roce_rpc
from roce_rpc import RrpcError

from conftest import client_uri, listen_uri

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


# ---- the receiver's byte budget ------------------------------------------------

def _mp_uint(v):
    return b"\xcf" + struct.pack(">Q", v)


def _mp_int(v):
    return b"\xd3" + struct.pack(">q", v)


def _mp_raw(tag8, b):
    return bytes([tag8, len(b)]) + b


def _mp_decode(b):
    """The flat msgpack array of an answer: ints, strs and bins only."""
    assert 0x90 <= b[0] <= 0x9f
    n, i, out = b[0] & 0x0f, 1, []
    for _ in range(n):
        t = b[i]
        if t <= 0x7f or t >= 0xe0:
            out.append(t if t <= 0x7f else t - 0x100)
            i += 1
        elif t in (0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3):
            fmt = {0xcc: ">B", 0xcd: ">H", 0xce: ">I", 0xcf: ">Q",
                   0xd0: ">b", 0xd1: ">h", 0xd2: ">i", 0xd3: ">q"}[t]
            size = struct.calcsize(fmt)
            out.append(struct.unpack(fmt, b[i + 1:i + 1 + size])[0])
            i += 1 + size
        elif 0xa0 <= t <= 0xbf:
            ln = t & 0x1f
            out.append(b[i + 1:i + 1 + ln].decode())
            i += 1 + ln
        elif t in (0xd9, 0xc4):
            ln = b[i + 1]
            v = b[i + 2:i + 2 + ln]
            out.append(v.decode() if t == 0xd9 else v)
            i += 2 + ln
        elif t in (0xda, 0xc5):
            ln = struct.unpack(">H", b[i + 1:i + 3])[0]
            v = b[i + 3:i + 3 + ln]
            out.append(v.decode() if t == 0xda else v)
            i += 3 + ln
        else:
            raise AssertionError("unexpected msgpack byte 0x%02x" % t)
    return out


def raw_offer(conn, name, dtype, shape):
    """Offers a tensor as a hostile peer can: the offer RPC alone, with no
    data and no memory behind it.  Returns (status, message, reception id)."""
    sh = struct.pack("<%dq" % len(shape), *shape)
    req = (b"\x94" + _mp_uint(1) + _mp_raw(0xd9, name.encode()) +
           _mp_uint(roce_rpc.dtype_to_rrpc(dtype)) + _mp_raw(0xc4, sh))
    st, msg, rx_id = _mp_decode(conn.call("rrpc.tensor.offer", req, timeout=30))[:3]
    return st, msg, rx_id


def raw_done(conn, rx_id, status):
    conn.call("rrpc.tensor.done", b"\x92" + _mp_uint(rx_id) + _mp_int(status), timeout=30)


def vm_kib(field="VmSize"):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError("no %s in /proc/self/status" % field)


def test_tensor_offers_beyond_the_budget_are_refused_and_the_receiver_does_not_grow(pair):
    s, lis, c = pair
    tensors = s.serve_tensors()
    assert tensors.max_bytes == 1 << 30 == roce_rpc.lib.RRPC_TENSOR_MAX_BYTES_DEFAULT
    tensors.close()
    tensors = s.serve_tensors(max_bytes=1 << 20)  # the default receiver: np.empty
    conn = c.connect(client_uri(lis))
    before = vm_kib()
    # issue 13: four offers of 4 GiB grew VmSize by 16 GiB; here 4 x 1 GiB
    # (1024 times the budget) keep the damage small should the budget break
    for i in range(4):
        st, msg, rx_id = raw_offer(conn, "huge%d" % i, "uint8", (1 << 30,))
        assert st == -errno.ENOBUFS and rx_id == 0, (st, msg)
        assert "the offer of 1073741824 bytes exceeds the receiver's tensor budget of " \
            "1048576 bytes" in msg, msg
        assert "max_bytes" in msg
    grew = vm_kib() - before
    assert grew < 256 << 10, "VmSize grew by %d KiB after 4 GiB of refused offers" % grew
    assert tensors.bytes_held == 0
    tensors.close()


def test_tensor_budget_returns_the_bytes_of_finished_and_failed_receptions(pair):
    s, lis, c = pair
    tensors = s.serve_tensors(max_bytes=1 << 20)
    conn = c.connect(client_uri(lis))
    part = 768 << 10
    st, msg, a = raw_offer(conn, "a", "uint8", (part,))
    assert st == 0 and a != 0, msg
    assert tensors.bytes_held == part
    st, msg, _ = raw_offer(conn, "b", "uint8", (512 << 10,))
    assert st == -errno.ENOBUFS
    assert "the offer of 524288 bytes exceeds the 262144 bytes left" in msg, msg
    assert "786432 of 1048576 bytes are held" in msg, msg
    # the sender reports that its WRITEs failed: the bytes come back
    raw_done(conn, a, -errno.EIO)
    with pytest.raises(RrpcError) as ei:
        tensors.receive(timeout=10)
    assert ei.value.code == -errno.EIO and ei.value.tensor_name == "a"
    assert tensors.bytes_held == 0
    # tensors within the budget land one after another
    for i in range(3):
        x = np.arange(part, dtype=np.uint8) + i
        conn.send_tensor("fits", x)
        name, got = tensors.receive(timeout=10)
        assert name == "fits" and np.array_equal(got, x)
        assert tensors.bytes_held == 0
    # a sender beyond the budget gets the code and the receiver's words
    with pytest.raises(RrpcError) as ei:
        conn.send_tensor("big", np.zeros(2 << 20, np.uint8))
    assert ei.value.code == -errno.ENOBUFS
    assert 'tensor "big"' in ei.value.message
    assert "the offer of 2097152 bytes exceeds the receiver's tensor budget of 1048576 " \
        "bytes" in ei.value.message, ei.value.message
    assert "max_bytes" in ei.value.message
    tensors.close()


def test_tensors_waiting_for_receive_count_against_the_budget(pair):
    s, lis, c = pair
    tensors = s.serve_tensors(max_bytes=1 << 20)
    conn = c.connect(client_uri(lis))
    first = np.ones(768 << 10, np.uint8)
    conn.send_tensor("first", first)  # lands, and waits in the queue
    assert tensors.bytes_held == first.nbytes
    with pytest.raises(RrpcError) as ei:
        conn.send_tensor("second", np.ones(512 << 10, np.uint8))
    assert ei.value.code == -errno.ENOBUFS, ei.value
    name, got = tensors.receive(timeout=10)
    assert name == "first" and np.array_equal(got, first)
    assert tensors.bytes_held == 0
    conn.send_tensor("second", np.ones(512 << 10, np.uint8))
    assert tensors.receive(timeout=10)[0] == "second"
    assert tensors.bytes_held == 0
    with pytest.raises(ValueError):
        s.serve_tensors(max_bytes=0)
    tensors.close()


def test_the_tensor_budget_default_comes_from_RRPC_TENSOR_MAX_BYTES(monkeypatch):
    """The environment sets every tensor server's default budget, in C and
    in Python alike: an offer above it is refused, one below it lands."""
    monkeypatch.setenv("RRPC_TENSOR_MAX_BYTES", "4096")
    with roce_rpc.Context() as s:  # the context reads RRPC_* when it is made
        tensors = s.serve_tensors()
        monkeypatch.delenv("RRPC_TENSOR_MAX_BYTES")
        assert tensors.max_bytes == 4096
        lis = s.listen(listen_uri())
        with roce_rpc.Context() as c:
            conn = c.connect(client_uri(lis))
            with pytest.raises(RrpcError) as e:
                conn.send_tensor("big", np.zeros(8192, np.uint8))
            assert "budget of 4096 bytes" in str(e.value), str(e.value)
            conn.send_tensor("small", np.ones(1024, np.uint8))
            name, arr = tensors.receive(timeout=10)
            assert name == "small" and int(arr.sum()) == 1024
            conn.close()
        tensors.close()


def test_a_receive_pool_reuses_a_slot_only_once_the_array_and_its_views_are_gone(pair):
    """Tensors land in the pool's registered slots; a slot comes back when
    the received array and every view of it are gone, never while a view
    still reads it; what does not fit a slot gets a new array."""
    import gc
    s, lis, c = pair
    pool = s.receive_pool(1 << 16, count=1)
    assert pool.slot_bytes == 1 << 16 and pool.free == 1
    srv = s.serve_tensors(pool=pool)
    conn = c.connect(client_uri(lis))
    lo, hi = pool.region.addr, pool.region.addr + pool.region.nbytes

    def inside(a):
        return lo <= a.__array_interface__["data"][0] < hi

    a = np.arange(1000, dtype=np.float32).reshape(10, 100)
    conn.send_tensor("a", a)
    _, got = srv.receive(timeout=30)
    assert inside(got) and np.array_equal(got, a) and pool.free == 0
    view = got[2:5].T  # a view outlives the array it came from
    del got
    gc.collect()
    assert pool.free == 0
    conn.send_tensor("b", a + 1)  # the only slot is taken: a new array
    _, other = srv.receive(timeout=30)
    assert not inside(other) and np.array_equal(other, a + 1)
    assert np.array_equal(view, a[2:5].T)  # untouched by the second receive
    del view
    gc.collect()
    assert pool.free == 1
    conn.send_tensor("c", a * 2)
    _, again = srv.receive(timeout=30)
    assert inside(again) and np.array_equal(again, a * 2)
    big = np.zeros(1 << 15, np.float32)  # 128 KiB: larger than a slot
    conn.send_tensor("big", big)
    _, got_big = srv.receive(timeout=30)
    assert not inside(got_big)
    assert (pool.hits, pool.misses) == (2, 2)
    srv.close()
    del again
    pool.close()
    with pytest.raises(ValueError):
        s.serve_tensors(pool=object())


def _pages_not_in_memory(addr, nbytes):
    """How many of the pages of [addr, addr + nbytes) are not in memory
    now, from /proc/self/pagemap (bit 63 of each page's entry: present)."""
    page = mmap.PAGESIZE
    lo, hi = addr // page, (addr + nbytes + page - 1) // page
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(lo * 8)
        raw = f.read((hi - lo) * 8)
    return sum(1 for (e,) in struct.iter_unpack("<Q", raw) if not e >> 63)


def test_a_receive_pool_has_its_memory_in_place_when_it_is_made(pair):
    """Creating a pool faults every page of its slots in, so no receive,
    not even the first, pays for fresh pages (docs/python.md).  Counted in
    the page table, not timed; the slots are larger than glibc's largest
    mmap threshold (32 MiB), so their memory is always a fresh mapping."""
    if not os.path.exists("/proc/self/pagemap"):
        pytest.skip("no /proc/self/pagemap to count resident pages with")
    s, lis, c = pair
    slot = 40 << 20
    pool = s.receive_pool(slot, count=2)
    assert _pages_not_in_memory(pool.region.addr, pool.region.nbytes) == 0
    srv = s.serve_tensors(pool=pool)
    conn = c.connect(client_uri(lis))
    a = np.arange(slot // 4, dtype=np.float32)
    conn.send_tensor("a", a)
    _, got = srv.receive(timeout=60)
    assert pool.hits == 1 and np.array_equal(got, a)
    del got
    srv.close()
    pool.close()


def test_the_default_receiver_keeps_the_memory_of_dropped_arrays_for_the_next_receive(pair):
    """Without a pool, the memory of a received array of 1 MiB or more stays
    registered once the array and every view of it are gone, and the next
    tensor of a like size lands there; arrays alive never share memory;
    what is kept idle stays under keep_bytes; keep_bytes=0 keeps nothing."""
    import gc
    s, lis, c = pair
    mib = 1 << 20
    srv = s.serve_tensors(keep_bytes=3 * mib)
    assert srv.keep_bytes == 3 * mib
    conn = c.connect(client_uri(lis))

    def addr(x):
        return x.__array_interface__["data"][0]

    def move(name, x):
        conn.send_tensor(name, x)
        got_name, got = srv.receive(timeout=30)
        assert got_name == name and np.array_equal(got, x)
        return got

    a = np.arange(mib // 4, dtype=np.float32)  # 1 MiB
    got = move("a", a)
    first, view = addr(got), got[5:]
    del got
    gc.collect()
    assert srv.kept_bytes == 0  # the view still reads it
    other = move("b", a + 1)
    assert addr(other) != first and np.array_equal(view, a[5:])
    second = addr(other)
    del view, other
    gc.collect()
    assert (srv.kept_bytes, srv.reused) == (2 * mib, 0)
    again = move("c", a * 2)
    assert addr(again) in (first, second) and srv.reused == 1
    assert srv.kept_bytes == mib
    big = move("big", np.ones(mib, np.float32))  # 4 MiB: a 1 MiB buffer does not fit
    small = move("small", np.ones(1000, np.float32))  # under 1 MiB: never kept
    assert addr(big) not in (first, second) and srv.reused == 1
    del big, small
    gc.collect()
    assert srv.kept_bytes == mib  # 4 MiB idle would pass keep_bytes
    held = [move("h%d" % i, a - i) for i in range(4)]
    assert srv.reused == 2 and len({addr(h) for h in held} | {addr(again)}) == 5
    del held, again
    gc.collect()
    assert srv.kept_bytes == 3 * mib  # five came back; the oldest two were let go
    srv.close()
    assert srv.kept_bytes == 0
    none = s.serve_tensors(keep_bytes=0)
    for i in range(2):
        conn.send_tensor("n", a)
        none.receive(timeout=30)
    assert (none.reused, none.kept_bytes, none.keep_bytes) == (0, 0, 0)
    none.close()
    with pytest.raises(ValueError):
        s.serve_tensors(keep_bytes=-1)


def test_a_transposed_array_moves_in_one_piece_and_arrives_in_its_own_layout(tpair):
    """A layout contiguous in its own memory order (a transpose, a
    permutation) lands in a destination laid out the same way, so the send
    is one WRITE (docs/python.md: 2 MiB took 6 s as one WRITE per element)."""
    from roce_rpc.tensor import write_count
    s, srv, c, conn = tpair
    pool = s.receive_pool(1 << 21, count=1)
    psrv_ctx = s
    rng = np.random.default_rng(7)
    cases = [rng.standard_normal((1024, 1024)).astype(np.float16).T,
             rng.integers(0, 255, (4, 5, 6), dtype=np.uint8).transpose(2, 0, 1),
             np.asfortranarray(rng.standard_normal((33, 17, 3)))]
    for a in cases:
        assert write_count(a, np.empty(a.shape, a.dtype)) == a.size  # into C order
        conn.send_tensor("t", a)
        name, got = srv.receive(timeout=30)
        assert np.array_equal(got, a)
        assert got.strides == a.strides
        assert write_count(a, got) == 1
    srv.close()
    psrv = psrv_ctx.serve_tensors(pool=pool)  # the pool's slots take the layout too
    conn.send_tensor("p", cases[0])
    _, got = psrv.receive(timeout=30)
    assert pool.hits == 1 and got.strides == cases[0].strides
    assert np.array_equal(got, cases[0])
    del got
    psrv.close()
    # a C-contiguous array stays C-contiguous; a gappy one into C order
    b = np.arange(60, dtype=np.int32).reshape(3, 20)
    assert write_count(b, b) == 1 and write_count(b[:, ::2], np.empty((3, 10), np.int32)) == 30


def test_warm_puts_a_first_large_receive_into_memory_already_in_place(pair):
    """TensorServer.warm(n) pays for a first receive up front: a kept
    buffer whose every page is in memory (counted in the page table, not
    timed), into which the next tensor of n/2..n bytes lands."""
    if not os.path.exists("/proc/self/pagemap"):
        pytest.skip("no /proc/self/pagemap to count resident pages with")
    s, lis, c = pair
    mib = 1 << 20
    srv = s.serve_tensors(keep_bytes=64 * mib)
    assert srv.warm(40 * mib + 1) == 40 * mib + 4096  # rounded up to a page
    assert srv.kept_bytes == 40 * mib + 4096 and srv.reused == 0
    ent = srv._st.recycler._idle[0]
    assert _pages_not_in_memory(ent[1].ctypes.data, ent[0]) == 0
    conn = c.connect(client_uri(lis))
    a = np.arange(10 * mib, dtype=np.float32)  # 40 MiB
    conn.send_tensor("a", a)
    _, got = srv.receive(timeout=60)
    assert srv.reused == 1 and np.array_equal(got, a)
    assert got.__array_interface__["data"][0] == ent[1].ctypes.data
    del got
    for bad in (mib - 1, 65 * mib):  # under 1 MiB, over keep_bytes
        with pytest.raises(ValueError, match="keep_bytes"):
            srv.warm(bad)
    with pytest.raises(TypeError):
        srv.warm(2.5 * mib)
    srv.close()
    with pytest.raises(RrpcError) as ei:
        srv.warm(2 * mib)
    assert ei.value.code == roce_rpc.E_CLOSED
    none = s.serve_tensors(keep_bytes=0)
    with pytest.raises(ValueError, match="keep_bytes=0"):
        none.warm(2 * mib)
    none.close()
