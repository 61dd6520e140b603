#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes the seed corpora of tests/fuzz/corpus/ (seed-* files; crash-*
reproducers are added by hand and never rewritten).  Standard library only:
it carries its own tiny msgpack encoder.  Run from anywhere:
    python3 tests/fuzz/gen-corpus.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def mp(o):
    """msgpack, shortest forms, enough for the seeds."""
    if o is None:
        return b'\xc0'
    if o is True:
        return b'\xc3'
    if o is False:
        return b'\xc2'
    if isinstance(o, int):
        if 0 <= o < 128:
            return bytes([o])
        if -32 <= o < 0:
            return struct.pack('b', o)
        if 0 <= o < 1 << 8:
            return b'\xcc' + struct.pack('>B', o)
        if 0 <= o < 1 << 16:
            return b'\xcd' + struct.pack('>H', o)
        if 0 <= o < 1 << 32:
            return b'\xce' + struct.pack('>I', o)
        if o >= 0:
            return b'\xcf' + struct.pack('>Q', o)
        return b'\xd3' + struct.pack('>q', o)
    if isinstance(o, float):
        return b'\xcb' + struct.pack('>d', o)
    if isinstance(o, str):
        b = o.encode()
        if len(b) < 32:
            return bytes([0xa0 | len(b)]) + b
        return b'\xd9' + bytes([len(b)]) + b
    if isinstance(o, (bytes, bytearray)):
        return b'\xc4' + bytes([len(o)]) + bytes(o)
    if isinstance(o, list):
        assert len(o) < 16
        return bytes([0x90 | len(o)]) + b''.join(mp(x) for x in o)
    if isinstance(o, dict):
        assert len(o) < 16
        return bytes([0x80 | len(o)]) + b''.join(mp(k) + mp(v) for k, v in o.items())
    raise TypeError(o)


def write(harness, name, data):
    d = os.path.join(HERE, 'corpus', harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, 'seed-' + name), 'wb') as f:
        f.write(data)


# ---- fuzz_frame: 32-byte header, then payload (os sub-header or hello) ----
MAGIC = 0x43505252


def hdr(typ, cls=0, flags=0, id_=0, arg=0, length=0, credits=0, version=1, reserved=0):
    return struct.pack('<IBBBBQQIHH', MAGIC, version, typ, cls, flags, id_, arg, length,
                       credits, reserved)


def hello(nclasses=4, credits=(64, 64, 16, 8), max_msg=1 << 20, cookie=0, rx_buf=0):
    return struct.pack('<BB4HHIQII', 1, nclasses, *credits, 0, max_msg, cookie, rx_buf, 0)


def os_hdr(addr, key, length, imm=0):
    return struct.pack('<QQII', addr, key, length, imm)


write('frame', 'hello', hdr(1, length=32) + hello())
write('frame', 'hello-ack', hdr(2, length=32) + hello(cookie=0x1122334455667788))
write('frame', 'request', hdr(5, cls=1, id_=7, arg=3, length=4, credits=2) + b'\x93\x01\x02\x03')
write('frame', 'response', hdr(6, id_=7, arg=0xffffffff, length=0))
write('frame', 'credit', hdr(7, cls=3, credits=100))
write('frame', 'os-write', hdr(8, flags=1, id_=9, length=28) + os_hdr(0x7f0000001000, 0xabcd, 4, 5)
      + b'data')
write('frame', 'os-read', hdr(9, id_=10, length=24) + os_hdr(0x7f0000002000, 0xabcd, 4096))
write('frame', 'error', hdr(11, arg=1004, length=5) + b'oops!')
write('frame', 'bad-magic', b'XXXX' + hdr(5)[4:])
write('frame', 'bad-version', hdr(5, version=2))
write('frame', 'bad-reserved', hdr(5, reserved=1))
write('frame', 'too-big', hdr(5, length=0xffffffff) + b'\x00\x00\x10\x00')
write('frame', 'short', hdr(5)[:20])

# ---- fuzz_unpack: format index, error buffer size, msgpack ----
FMTS = ['', 'i', 'u', 'd', 'b', 's', 'y', 'n', 'ui', 'usuy', 'isuyuy', 'iudbsyn', 'nnnn', 'ss',
        'yy', 'siy']


def unpack_seed(name, fmt, args, errlen=64):
    write('unpack', name, bytes([FMTS.index(fmt), errlen]) + mp(args))


unpack_seed('empty', '', [])
unpack_seed('int', 'i', [-5])
unpack_seed('uint', 'u', [1 << 40])
unpack_seed('double', 'd', [3.5])
write('unpack', 'float32', bytes([FMTS.index('d'), 64]) + b'\x91\xca' + struct.pack('>f', 1.5))
unpack_seed('bool', 'b', [True])
unpack_seed('str', 's', ['hello'])
unpack_seed('bin', 'y', [b'\x00\x01\x02'])
unpack_seed('nil', 'n', [None])
unpack_seed('tensor-ack', 'ui', [42, -1])
unpack_seed('tensor-open', 'usuy', [1, 'weights', 3, b'\x00' * 8])
unpack_seed('tensor-res', 'isuyuy', [0, '', 7, b'tok', 2, b'\x01\x02'])
unpack_seed('all', 'iudbsyn', [-1, 2, 0.25, False, 'x', b'y', None])
unpack_seed('wrong-count', 'ss', ['a'])
unpack_seed('wrong-type', 'i', ['1'])
unpack_seed('int-above-max', 'i', [1 << 63], errlen=10)
write('unpack', 'trailing', bytes([FMTS.index('u'), 64]) + mp([1]) + b'\x00')
write('unpack', 'truncated', bytes([FMTS.index('usuy'), 64]) + mp([1, 'abc', 3, b'1234'])[:-2])

# ---- fuzz_broker_msg: mode byte, then u32-LE-length-prefixed msgpack maps ----
def frame(m):
    b = mp(m)
    return struct.pack('<I', len(b)) + b


def broker_seed(name, reqs, chunk=128, authed=False, raw=b''):
    mode = (chunk - 1) | (0x80 if authed else 0)
    write('broker_msg', name, bytes([mode]) + b''.join(frame(r) for r in reqs) + raw)


HELLO = {'v': 1, 'id': 1, 'op': 'hello'}
REG = {'v': 1, 'id': 2, 'op': 'register', 'service': 'kv',
       'endpoints': [{'transport': 'tcp', 'host': '127.0.0.1', 'port': 7000}],
       'classes': ['control', 'bulk'], 'lease_ms': 3000}
LOOKUP = {'v': 1, 'id': 3, 'op': 'lookup', 'service': 'kv'}
broker_seed('hello-cert', [HELLO])
broker_seed('hello-token', [{'v': 1, 'id': 1, 'op': 'hello', 'token': 'fuzz-token-1'}])
broker_seed('hello-bad-token', [{'v': 1, 'id': 1, 'op': 'hello', 'token': 'nope'}])
broker_seed('register-lookup', [HELLO, REG, LOOKUP], chunk=7)
broker_seed('register-rdma', [dict(REG, endpoints=[
    {'transport': 'rdma', 'host': '10.0.0.1', 'port': 4791},
    {'transport': 'tcp', 'host': 'h', 'port': 1}], classes=[])], authed=True)
broker_seed('renew', [{'v': 1, 'id': 4, 'op': 'renew', 'reg': 12345}], authed=True)
broker_seed('unregister', [{'v': 1, 'id': 5, 'op': 'unregister', 'reg': 1}], authed=True)
broker_seed('lookup-missing', [LOOKUP], authed=True, chunk=1)
# RAND_bytes is a counter in the harness: the first registration's id is 1.
broker_seed('register-renew-unregister', [REG, {'v': 1, 'id': 4, 'op': 'renew', 'reg': 1},
                                          {'v': 1, 'id': 5, 'op': 'unregister', 'reg': 1},
                                          LOOKUP], authed=True)
broker_seed('busy', [dict(REG, id=i) for i in range(2, 8)], authed=True)
broker_seed('unknown-op', [{'v': 1, 'id': 6, 'op': 'frobnicate'}], authed=True)
broker_seed('no-hello', [LOOKUP])
broker_seed('bad-version', [{'v': 2, 'id': 1, 'op': 'hello'}])
broker_seed('not-a-map', [[1, 2, 3]])
broker_seed('bad-length', [], raw=b'\x00\x00\x00\x00')
broker_seed('deep', [], raw=struct.pack('<I', 12) + b'\x91' * 12)
