#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes the seed corpora of tests/fuzz/corpus/ (seed-* files; crash-*
reproducers are added by hand and never rewritten).  Standard library only:
it carries its own tiny msgpack encoder.  Run from anywhere:
    python3 tests/fuzz/gen-corpus.py
"""
import hashlib
import hmac
import os
import re
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
# The library's protocol version, read from its header, so that the seeds
# speak it (seeds of an older version only explore the version refusal).
with open(os.path.join(HERE, '..', '..', 'libroce_rpc', 'core', 'frame.h')) as _f:
    VERSION = int(re.search(r'#define RRPCI_PROTO_VERSION (\d+)', _f.read()).group(1))


def hdr(typ, cls=0, flags=0, id_=0, arg=0, length=0, credits=0, version=VERSION, reserved=0):
    return struct.pack('<IBBBBQQIHH', MAGIC, version, typ, cls, flags, id_, arg, length,
                       credits, reserved)


def hello(nclasses=4, credits=(64, 64, 16, 8), max_msg=1 << 20, cookie=0, rx_buf=0):
    return struct.pack('<BB4HHIQII', VERSION, nclasses, *credits, 0, max_msg, cookie, rx_buf, 0)


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
write('frame', 'bad-version', hdr(5, version=VERSION - 1))
write('frame', 'request-ttl', hdr(5, reserved=0x4123))
write('frame', 'credit-with-ttl', hdr(7, reserved=0x0001))
write('frame', 'bad-reserved', hdr(5, reserved=1))
write('frame', 'too-big', hdr(5, length=0xffffffff) + b'\x00\x00\x10\x00')
write('frame', 'short', hdr(5)[:20])


def meta_block(entries, size=None, count=None):
    """A metadata block (docs/protocol.md section 10), bounds unchecked."""
    body = b''.join(struct.pack('<BH', len(k), len(v)) + k + v for k, v in entries)
    size = 4 + len(body) if size is None else size
    return struct.pack('<HBB', size, len(entries) if count is None else count, 0) + body


F_META = 0x02
TRACE = (b'traceparent', b'00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01')
META_OK = meta_block([TRACE, (b'tenant', b'a')])
META_BAD = {
    '17': meta_block([(b'k%d' % i, b'') for i in range(17)]),
    'long-key': meta_block([(b'k' * 65, b'v')]),
    'long-value': meta_block([(b'k', b'v' * 1025)]),
    'upper-key': meta_block([(b'Trace', b'v')]),
    'dup-key': meta_block([(b'k', b'1'), (b'k', b'2')]),
    'too-much': meta_block([(b'k%d' % i, b'v' * 1000) for i in range(5)]),
    'size-short': meta_block([TRACE], size=20),
    'size-long': meta_block([TRACE], size=200),
}
write('frame', 'request-meta', hdr(5, cls=1, flags=F_META, id_=8, arg=3,
                                   length=len(META_OK) + 4) + META_OK + b'\x93\x01\x02\x03')
write('frame', 'response-meta', hdr(6, flags=F_META, id_=8, length=len(META_OK)) + META_OK)
write('frame', 'meta-truncated', hdr(5, flags=F_META, length=len(META_OK) - 5) + META_OK[:-5])
write('frame', 'credit-with-meta-flag', hdr(7, flags=F_META))
for _name, _block in META_BAD.items():
    write('frame', 'meta-' + _name, hdr(5, flags=F_META, length=len(_block)) + _block)

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


HELLO = {'v': 2, 'id': 1, 'op': 'hello'}
REG = {'v': 2, 'id': 2, 'op': 'register', 'service': 'kv',
       'endpoints': [{'transport': 'tcp', 'host': '127.0.0.1', 'port': 7000}],
       'classes': ['control', 'bulk'], 'lease_ms': 3000}
LOOKUP = {'v': 2, 'id': 3, 'op': 'lookup', 'service': 'kv'}
broker_seed('hello-cert', [HELLO])
broker_seed('hello-token', [{'v': 2, 'id': 1, 'op': 'hello', 'token': 'fuzz-token-1'}])
broker_seed('hello-bad-token', [{'v': 2, 'id': 1, 'op': 'hello', 'token': 'nope'}])
broker_seed('register-lookup', [HELLO, REG, LOOKUP], chunk=7)
broker_seed('register-rdma', [dict(REG, endpoints=[
    {'transport': 'rdma', 'host': '10.0.0.1', 'port': 4791},
    {'transport': 'tcp', 'host': 'h', 'port': 1}], classes=[])], authed=True)
broker_seed('renew', [{'v': 2, 'id': 4, 'op': 'renew', 'reg': 12345}], authed=True)
broker_seed('unregister', [{'v': 2, 'id': 5, 'op': 'unregister', 'reg': 1}], authed=True)
broker_seed('lookup-missing', [LOOKUP], authed=True, chunk=1)
# RAND_bytes is a counter in the harness: the first registration's id is 1.
broker_seed('register-renew-unregister', [REG, {'v': 2, 'id': 4, 'op': 'renew', 'reg': 1},
                                          {'v': 2, 'id': 5, 'op': 'unregister', 'reg': 1},
                                          LOOKUP], authed=True)
broker_seed('busy', [dict(REG, id=i) for i in range(2, 8)], authed=True)
broker_seed('unknown-op', [{'v': 2, 'id': 6, 'op': 'frobnicate'}], authed=True)
broker_seed('no-hello', [LOOKUP])
broker_seed('bad-version', [{'v': 2, 'id': 1, 'op': 'hello'}])
broker_seed('not-a-map', [[1, 2, 3]])
broker_seed('bad-length', [], raw=b'\x00\x00\x00\x00')
broker_seed('deep', [], raw=struct.pack('<I', 12) + b'\x91' * 12)
# pairs, rrpc-agent's report: the harness's session is "fuzz" (in agents) from no
# address (IPv4), without a certificate, so a well-formed report is parsed in full
# and then refused for its address; malformed ones are bad_request.
PAIRS = {'v': 2, 'id': 8, 'op': 'pairs', 'local': '10.77.0.1',
         'pairs': [{'peer': '10.77.0.2', 'expires_s': 3600}, {'peer': '10.77.0.3', 'expires_s': 0}]}
broker_seed('pairs', [PAIRS], authed=True)
broker_seed('pairs-empty', [HELLO, dict(PAIRS, pairs=[])], chunk=5)
broker_seed('pairs-v6', [dict(PAIRS, local='fe80::1', pairs=[{'peer': '::ffff:10.0.0.1',
                                                               'expires_s': 604801}])],
            authed=True)
broker_seed('pairs-bad-peer', [dict(PAIRS, pairs=[{'peer': 'host-b', 'expires_s': 1}, 7])],
            authed=True)
broker_seed('register-require-esp', [dict(REG, require_esp=True), LOOKUP,
                                     dict(REG, id=9, service='kv2', require_esp=1)], authed=True)


# ---- the receive side: fuzz_tcp_rx, fuzz_core_rx, fuzz_onesided -----------------
# (fuzz_core.h: methods, target regions at fixed addresses and keys)
def method_id(name):
    """rrpc_method_id: FNV-1a, 64 bits."""
    h = 0xcbf29ce484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001b3) & (1 << 64) - 1
    return h


T_HELLO, T_JOIN, T_REQUEST, T_RESPONSE, T_CREDIT = 1, 3, 5, 6, 7
T_OS_WRITE, T_OS_READ, T_OS_ACK, T_ERROR, T_TICKET, T_TICKET_ACK, T_KEEPALIVE, T_CANCEL = \
    8, 9, 10, 11, 12, 13, 14, 15
CTL, LL, BULK, BG = 0, 1, 2, 3
REGION_BASE = 0x20000000
RW = (REGION_BASE + 1 * 4096, 0x1000, 4096)      # address, key, length
RO = (REGION_BASE + 3 * 4096, 0x1001, 4096)
WO = (REGION_BASE + 5 * 4096, 0x1002, 4096)
TINY = (REGION_BASE + 8 * 4096 - 1, 0x1003, 1)
GONE_KEY = 0x1004
TICKET_OK = b'fuzz-ticket-ok'


def fr(typ, cls, payload=b'', id_=0, arg=0, flags=0, credits=0, ttl=0):
    """A whole frame: header + payload."""
    return hdr(typ, cls=cls, flags=flags, id_=id_, arg=arg, length=len(payload),
               credits=credits, reserved=ttl) + payload


def req(cls, method, payload=b'', id_=1, credits=0, ttl=0):
    return fr(T_REQUEST, cls, payload, id_=id_, arg=method_id(method), credits=credits, ttl=ttl)


def token(addr, key, length, access=3):
    return struct.pack('<QQQII', addr, length, key, access, 0)


def os_req(method_cls, method, tok, local_off, length, remote_off, notify=0, id_=1):
    """A request to "read"/"write": the server starts a one-sided operation."""
    return req(method_cls, method, tok + struct.pack('<IIQB', local_off, length, remote_off,
                                                     notify), id_=id_)


# fuzz_tcp_rx: mode byte, then records per socket.
def rec(ch, data, nopump=False):
    """Write records of at most 255 bytes: a frame arrives in pieces."""
    out = b''
    for i in range(0, len(data), 255):
        out += bytes([ch | (16 if nopump else 0), len(data[i:i + 255])]) + data[i:i + 255]
    return out


def fill(ch, k, value):
    return bytes([ch | 4, k, value])


JOIN_OP = bytes([8])


def shut(ch):
    return bytes([ch | 12])


def tcp_mode(ticket=False, raw=False, grant=3, big=True, rst=False):
    return bytes([(1 if ticket else 0) | (2 if raw else 0) | grant << 2 | (16 if big else 0)
                  | (32 if rst else 0)])


def tcp_seed(name, body, **mode):
    write('tcp_rx', name, tcp_mode(**mode) + body)


# The same frames for fuzz_core_rx: mode byte, then (class | op << 2) records.
def core_rec(cls, data):
    out = b''
    for i in range(0, len(data), 255):
        out += bytes([cls, len(data[i:i + 255])]) + data[i:i + 255]
    return out


def core_mode(ticket=False, active=False, grant=3, big=True):
    return bytes([(1 if ticket else 0) | (2 if active else 0) | grant << 2 | (16 if big else 0)])


def core_op(cls, op):
    return bytes([cls | op << 2])


def core_seed(name, body, **mode):
    write('core_rx', name, core_mode(**mode) + body)


OSW = lambda region, off, data, notify=False, id_=1, cls=BULK: fr(  # noqa: E731
    T_OS_WRITE, cls, os_hdr(region[0] + off, region[1], len(data), 0x77) + data, id_=id_,
    flags=1 if notify else 0)
OSR = lambda region, off, n, id_=1, cls=BULK: fr(  # noqa: E731
    T_OS_READ, cls, os_hdr(region[0] + off, region[1], n), id_=id_)

# Frames both harnesses start from (class, frames).
RX_CASES = {
    'echo': [(LL, req(LL, 'echo', b'hello'))],
    'echo-two': [(LL, req(LL, 'echo', b'a', id_=1) + req(LL, 'echo', b'b', id_=2))],
    'echo-ttl': [(LL, req(LL, 'echo', b'in time', ttl=0x8010))],
    'defer-cancel': [(BG, req(BG, 'defer', b'later', id_=7, ttl=0x0001)),
                     (BG, fr(T_CANCEL, BG, id_=7))],
    'cancel-unknown': [(LL, fr(T_CANCEL, LL, id_=99))],
    'cancel-with-payload': [(LL, fr(T_CANCEL, LL, b'x', id_=1))],
    'credit-with-ttl': [(LL, fr(T_CREDIT, LL, credits=1, ttl=5))],
    'fail': [(LL, req(LL, 'fail'))],
    'no-method': [(LL, req(LL, 'nope', b'x'))],
    'defer': [(BG, req(BG, 'defer', b'later'))],
    'call-response': [(LL, req(LL, 'call', b'ping')),
                      (LL, fr(T_RESPONSE, LL, b'pong', id_=1, credits=1))],
    'call-error-response': [(LL, req(LL, 'call', b'ping')),
                            (LL, fr(T_RESPONSE, LL, b'no such', id_=1, arg=0xfffffc18))],
    'read-ack': [(LL, os_req(LL, 'read', token(0x7000, 9, 4096), 0, 16, 8)),
                 (LL, fr(T_OS_ACK, LL, os_hdr(0x7008, 9, 16) + b'R' * 16, id_=1))],
    'read-ack-outside': [(LL, os_req(LL, 'read', token(0x7000, 9, 4096), 0, 16, 8)),
                         (LL, fr(T_OS_ACK, LL, os_hdr(0x7000 + 4090, 9, 16) + b'R' * 16,
                                 id_=1))],
    'write-ack': [(LL, os_req(LL, 'write', token(0x7000, 9, 4096), 100, 32, 0, notify=1)),
                  (LL, fr(T_OS_ACK, LL, id_=1))],
    'write-ack-error': [(LL, os_req(LL, 'write', token(0x7000, 9, 4096), 0, 8, 0)),
                        (LL, fr(T_OS_ACK, LL, b'denied', id_=1, arg=0xfffffc13))],
    'os-write': [(BULK, OSW(RW, 16, b'data'))],
    'os-write-notify': [(BULK, OSW(RW, 0, b'x' * 64, notify=True))],
    'os-write-tiny': [(BULK, OSW(TINY, 0, b'!'))],
    'os-write-tiny-over': [(BULK, OSW(TINY, 0, b'!!'))],
    'os-write-readonly': [(BULK, OSW(RO, 0, b'no'))],
    'os-write-gone': [(BULK, fr(T_OS_WRITE, BULK, os_hdr(RW[0], GONE_KEY, 1) + b'g', id_=1))],
    'os-read': [(BULK, OSR(RO, 100, 64))],
    'os-read-tiny': [(BULK, OSR(TINY, 0, 1))],
    'os-read-over': [(BULK, OSR(RW, 4000, 100))],
    'os-read-writeonly': [(BULK, OSR(WO, 0, 8))],
    'os-read-before': [(BULK, OSR(RW, -8, 8))],
    'os-read-too-big': [(BULK, OSR(RW, 0, 0x7fffffff))],
    'os-read-with-data': [(BULK, fr(T_OS_READ, BULK, os_hdr(RO[0], RO[1], 4) + b'xx', id_=1))],
    'os-short': [(BULK, fr(T_OS_WRITE, BULK, b'\x00' * 10, id_=1))],
    'credit': [(LL, fr(T_CREDIT, LL, credits=1))],
    'credit-too-much': [(LL, fr(T_CREDIT, LL, credits=5000))],
    'keepalive': [(CTL, fr(T_KEEPALIVE, CTL)), (CTL, fr(T_KEEPALIVE, CTL, arg=1))],
    'keepalive-bad': [(LL, fr(T_KEEPALIVE, LL, arg=2))],
    'ticket-unneeded': [(CTL, fr(T_TICKET, CTL, TICKET_OK))],
    'error': [(CTL, fr(T_ERROR, CTL, b'bye', arg=0xfffffc18))],
    'hello-late': [(CTL, fr(T_HELLO, CTL, hello()))],
    'wrong-class': [(LL, req(BULK, 'echo', b'x'))],
    'bad-magic': [(LL, b'XXXX' + req(LL, 'echo')[4:])],
    'too-big': [(BULK, hdr(T_REQUEST, cls=BULK, id_=1, arg=method_id('echo'),
                           length=0x7fffffff))],
    'credit-overrun': [(BG, b''.join(req(BG, 'defer', b'', id_=i) for i in range(1, 11)))],
    # metadata (version 4): served, answered RRPC_E_METADATA, a bad answer's block
    'echo-meta': [(LL, fr(T_REQUEST, LL, META_OK + b'hi', id_=1, arg=method_id('echo'),
                          flags=F_META))],
    'call-response-meta': [(LL, req(LL, 'call', b'ping')),
                           (LL, fr(T_RESPONSE, LL, META_OK + b'pong', id_=1, flags=F_META))],
    'call-response-meta-bad': [(LL, req(LL, 'call', b'ping')),
                               (LL, fr(T_RESPONSE, LL, META_BAD['upper-key'], id_=1,
                                       flags=F_META))],
    'keepalive-meta-flag': [(CTL, fr(T_KEEPALIVE, CTL, flags=F_META))],
}
for _name, _block in META_BAD.items():
    RX_CASES['echo-meta-' + _name] = [
        (LL, fr(T_REQUEST, LL, _block, id_=1, arg=method_id('echo'), flags=F_META)),
        (LL, req(LL, 'echo', b'after', id_=2))]
RX_TICKET_CASES = {
    'ticket-echo': [(CTL, fr(T_TICKET, CTL, TICKET_OK)), (LL, req(LL, 'echo', b'in'))],
    'ticket-bad': [(CTL, fr(T_TICKET, CTL, b'forged'))],
    'ticket-missing': [(LL, req(LL, 'echo', b'sneak'))],
    'ticket-twice': [(CTL, fr(T_TICKET, CTL, TICKET_OK)), (CTL, fr(T_TICKET, CTL, b'again'))],
    'ticket-keepalive-first': [(CTL, fr(T_KEEPALIVE, CTL)), (CTL, fr(T_TICKET, CTL, TICKET_OK))],
}

for name, frames in RX_CASES.items():
    tcp_seed(name, b''.join(rec(c, f) for c, f in frames))
    core_seed(name, b''.join(core_rec(c, f) for c, f in frames))
for name, frames in RX_TICKET_CASES.items():
    tcp_seed(name, b''.join(rec(c, f) for c, f in frames), ticket=True)
    core_seed(name, b''.join(core_rec(c, f) for c, f in frames), ticket=True)

# tcp only: how the bytes arrive, the handshake, the large-message path.
ECHO = req(LL, 'echo', b'split me')
tcp_seed('echo-bytewise', b''.join(rec(LL, ECHO[i:i + 1]) for i in range(len(ECHO))))
tcp_seed('echo-split-header', rec(LL, ECHO[:20]) + rec(LL, ECHO[20:]))
tcp_seed('echo-coalesced', rec(LL, ECHO[:20], nopump=True) + rec(LL, ECHO[20:]))
BIG = 40000  # above half the 64 KiB read buffer: read into its own buffer
tcp_seed('echo-large', rec(BULK, hdr(T_REQUEST, cls=BULK, id_=1, arg=method_id('echo'),
                                     length=BIG)) + fill(BULK, BIG // 256, 0x41)
         + rec(BULK, b'A' * (BIG % 256)))
tcp_seed('echo-large-twice', (rec(BULK, hdr(T_REQUEST, cls=BULK, id_=1, arg=method_id('echo'),
                                            length=BIG)) + fill(BULK, BIG // 256, 0x41)
                              + rec(BULK, b'A' * (BIG % 256))) * 2)
tcp_seed('vanish-mid-message', rec(LL, ECHO[:40]) + shut(LL))
tcp_seed('vanish-mid-header', rec(LL, ECHO[:10]) + shut(LL), rst=True)
tcp_seed('small-grant', rec(LL, req(LL, 'echo', b'1', id_=1) + req(LL, 'echo', b'2', id_=2))
         + rec(LL, fr(T_CREDIT, LL, credits=1)), grant=0, big=False)
HELLO_F = fr(T_HELLO, CTL, hello(credits=(64, 64, 64, 64), max_msg=1 << 20))
tcp_seed('raw-handshake', rec(CTL, HELLO_F) + JOIN_OP + rec(LL, ECHO), raw=True)
tcp_seed('raw-hello-split', rec(CTL, HELLO_F[:7]) + rec(CTL, HELLO_F[7:40]) + rec(CTL, HELLO_F[40:])
         + JOIN_OP, raw=True)
tcp_seed('raw-request-first', rec(CTL, ECHO), raw=True)
# The first frame sets a socket's class: HELLO on socket 2, JOIN on 0, 1, 3
# (classes 1, 2, 3), so low-latency frames go to socket 0.
tcp_seed('raw-hello-on-socket-2', rec(2, HELLO_F) + JOIN_OP + rec(0, ECHO), raw=True)
tcp_seed('raw-join-unknown', rec(LL, fr(T_JOIN, LL, struct.pack('<Q', 12345))), raw=True)
tcp_seed('raw-hello-bad', rec(CTL, fr(T_HELLO, CTL, hello(credits=(0, 1, 1, 1)))), raw=True)
tcp_seed('raw-hello-on-bulk', rec(BULK, fr(T_HELLO, BULK, hello())), raw=True)
tcp_seed('raw-ticket', rec(CTL, HELLO_F) + JOIN_OP + rec(CTL, fr(T_TICKET, CTL, TICKET_OK))
         + rec(LL, ECHO), raw=True, ticket=True)

# core only: the transport's -EAGAIN, the loop, timers, the application.
core_seed('blocked-then-writable', core_op(LL, 2) + core_rec(LL, req(LL, 'echo', b'q'))
          + core_op(LL, 3))
core_seed('credit-frame', core_rec(BG, b''.join(req(BG, 'echo', b'', id_=i) for i in range(1, 5)))
          + core_op(BG, 4))
core_seed('deferred-answered', core_rec(BG, req(BG, 'defer', b'd')) + core_op(0, 6))
core_seed('app-close', core_rec(LL, req(LL, 'defer', b'd')) + core_op(0, 7) + core_op(0, 5))
core_seed('ticket-timeout', core_op(0, 5), ticket=True)
core_seed('ticket-refused-then-timer', core_rec(CTL, fr(T_TICKET, CTL, b'bad'))
          + core_op(0, 5), ticket=True)
core_seed('active-ticket-ack', core_rec(CTL, fr(T_TICKET_ACK, CTL))
          + core_rec(LL, req(LL, 'echo', b'x')), ticket=True, active=True)
core_seed('active-ticket-error', core_rec(CTL, fr(T_ERROR, CTL, b'refused', arg=0xfffffc07)),
          ticket=True, active=True)
core_seed('active-response', core_rec(LL, req(LL, 'call', b'x'))
          + core_rec(LL, fr(T_RESPONSE, LL, b'y', id_=1)), active=True)
# The peer grants 1 credit: the second answer waits for the CREDIT frame.
core_seed('small-grant', core_rec(LL, req(LL, 'echo', b'1', id_=1) + req(LL, 'echo', b'2', id_=2))
          + core_rec(LL, fr(T_CREDIT, LL, credits=1)), grant=0, big=False)
core_seed('long-record', bytes([LL | 1 << 2]) + struct.pack('<H', 300)
          + req(LL, 'echo', b'L' * 268))


# fuzz_onesided: mode byte (the reader's maximum), then 16-byte operations.
def os_op(kind, region, off, length, cls=BULK, imm=0, xor_key=False, off_by_one=False,
          cut=None):
    b0 = kind | cls << 2 | (16 if xor_key else 0) | (64 if off_by_one else 0) | \
         (128 if cut is not None else 0)
    if cut is not None:
        imm = (imm & 0xff) | (cut << 8)
    return struct.pack('<BBqIH', b0, region, off, length, imm)


READ, WRITE, WRITE_NOTIFY, REREG = 0, 1, 2, 3


def os_seed(name, ops, peer_max=3):
    write('onesided', name, bytes([peer_max]) + b''.join(ops))


os_seed('read-whole', [os_op(READ, 0, 0, 64)])
os_seed('write-then-read', [os_op(WRITE, 0, 8, 16), os_op(READ, 0, 0, 64)])
os_seed('write-notify', [os_op(WRITE_NOTIFY, 0, 0, 4, imm=0x1234)])
os_seed('tiny', [os_op(READ, 1, 0, 1), os_op(WRITE, 1, 0, 1), os_op(READ, 1, 0, 2),
                 os_op(READ, 1, 1, 0), os_op(WRITE, 1, -1, 1)])
os_seed('write-only', [os_op(WRITE, 2, 4000, 96), os_op(READ, 2, 0, 1),
                       os_op(WRITE, 2, 4000, 97)])
os_seed('no-access', [os_op(READ, 3, 0, 1), os_op(WRITE, 3, 0, 1)])
os_seed('overlap', [os_op(READ, 4, 0, 32), os_op(WRITE, 4, 0, 1), os_op(READ, 4, 16, 17),
                    os_op(WRITE, 0, 16, 8), os_op(READ, 4, 0, 8)])
os_seed('stale-key', [os_op(READ, 5, 0, 1), os_op(WRITE, 5, 0, 1), os_op(REREG, 5, 0, 0),
                      os_op(WRITE, 5, 0, 32), os_op(REREG, 0, 0, 0), os_op(READ, 0, 0, 1)])
os_seed('bounds', [os_op(READ, 0, -1, 1), os_op(READ, 0, 64, 0), os_op(READ, 0, 64, 1),
                   os_op(READ, 0, 1, 0xffffffff), os_op(READ, 0, -(1 << 63), 1),
                   os_op(WRITE, 0, (1 << 63) - 1, 2)])
os_seed('wrong-key', [os_op(READ, 0, 0, 1, xor_key=True, imm=0x40)])
os_seed('too-big', [os_op(READ, 2, 0, 4096 - 24 + 1), os_op(READ, 0, 0, 64)], peer_max=0)
os_seed('read-with-data', [os_op(READ, 0, 0, 4, off_by_one=True)])
os_seed('write-length-off', [os_op(WRITE, 0, 0, 4, off_by_one=True)])
os_seed('cut', [os_op(WRITE, 0, 0, 4, cut=10)])
os_seed('classes', [os_op(READ, 0, 0, 8, cls=c) for c in range(4)]
        + [os_op(WRITE_NOTIFY, 0, 0, 8, cls=c, imm=c) for c in range(4)])


# fuzz_ticket: mode, int32 now (s from T0), then a ticket (raw) or fields (issue).
TK_A = bytes(range(0x11, 0x31))
TK_B = bytes(range(0xb1, 0xd1))
T0 = 1700000000000


def ticket(secret, principal, service, expiry_ms, nonce):
    body = b'RTKT' + bytes([1, len(principal), len(service), 0]) + \
        struct.pack('<q', expiry_ms) + nonce + principal + service
    return body + hmac.new(secret, body, hashlib.sha256).digest()


def tk_mode(issue=False, resign=False, sign_a=True, rotated=False, no_secret=False, why=4):
    return bytes([(1 if issue else 0) | (2 if resign else 0) | (4 if sign_a else 0)
                  | (8 if rotated else 0) | (16 if no_secret else 0) | why << 5])


def tk_seed(name, mode, now_s, rest):
    write('ticket', name, mode + struct.pack('<i', now_s) + rest)


NONCE = bytes(range(16))
GOOD = ticket(TK_A, b'alice', b'fuzz-svc', T0 + 60000, NONCE)
tk_seed('raw-valid', tk_mode(), 0, GOOD)
tk_seed('raw-valid-previous-secret', tk_mode(rotated=True), 0, GOOD)
tk_seed('raw-valid-current-secret', tk_mode(rotated=True, sign_a=False), 0,
        ticket(TK_B, b'bob', b'fuzz-svc', T0 + 60000, NONCE))
tk_seed('raw-expired', tk_mode(), 120, GOOD)
tk_seed('raw-within-skew', tk_mode(), 60, GOOD)
tk_seed('raw-other-service', tk_mode(), 0, ticket(TK_A, b'alice', b'other', T0 + 60000, NONCE))
tk_seed('raw-wrong-secret', tk_mode(), 0, ticket(TK_B, b'alice', b'fuzz-svc', T0 + 60000, NONCE))
tk_seed('raw-no-secret', tk_mode(no_secret=True), 0, GOOD)
tk_seed('raw-resign-negative-expiry', tk_mode(resign=True), 0,
        ticket(b'\x00' * 32, b'p', b'fuzz-svc', -5, NONCE))
tk_seed('raw-resign-max-expiry', tk_mode(resign=True), 0,
        ticket(b'\x00' * 32, b'p', b'fuzz-svc', (1 << 63) - 1, NONCE))
tk_seed('raw-resign-nul-name', tk_mode(resign=True), 0,
        ticket(b'\x00' * 32, b'a\x00c', b'fuzz-svc', T0, NONCE))
tk_seed('raw-truncated', tk_mode(), 0, GOOD[:-1])
tk_seed('raw-long-names', tk_mode(why=7), 0,
        ticket(TK_A, b'p' * 255, b'fuzz-svc', T0 + 1, NONCE))
tk_seed('raw-why-0', tk_mode(why=0), 0, GOOD[:40])
tk_seed('raw-why-1', tk_mode(why=1), 0, GOOD[:40])
tk_seed('raw-empty', tk_mode(), 0, b'')


def issue_fields(principal, other_service=None, expiry_s=60, nonce=NONCE, flips=()):
    svc = other_service or b''
    b1 = ((len(svc) - 1) << 1 | 1) if other_service else 0
    out = bytes([len(principal), b1]) + struct.pack('<i', expiry_s) + nonce + principal + svc
    for pos, x in flips:
        out += struct.pack('<HB', pos, x)
    return out


tk_seed('issue', tk_mode(issue=True), 0, issue_fields(b'carol'))
tk_seed('issue-other-service', tk_mode(issue=True), 0, issue_fields(b'carol', b'svc2'))
tk_seed('issue-flip-expiry', tk_mode(issue=True), 0, issue_fields(b'carol', flips=[(9, 1)]))
tk_seed('issue-flip-mac', tk_mode(issue=True), 0, issue_fields(b'carol', flips=[(60, 0x80)]))
tk_seed('issue-flip-length', tk_mode(issue=True), 0, issue_fields(b'carol', flips=[(5, 3)]))
tk_seed('issue-empty-principal', tk_mode(issue=True), 0, issue_fields(b''))
tk_seed('issue-expired', tk_mode(issue=True, rotated=True), 0, issue_fields(b'dave', expiry_s=-2))


# ---- agent_wire: rrpc-agent's PAIR / OK / ERR and its query request (agent/wire.h) ----
AG_MAGIC = b'RRPA'


def ag_pair(fam=4, ai=b'\x0a\x4d\x00\x01', ar=b'\x0a\x4d\x00\x02', spi=0x1001, life=8,
            version=1, typ=1, reserved=0):
    return (AG_MAGIC + bytes([version, typ, fam, reserved]) + ai.ljust(16, b'\0') +
            ar.ljust(16, b'\0') + struct.pack('>II', spi, life))


def ag_reply(typ=2, spi=0x2002, code=0, reason=b'', reserved=0):
    return (AG_MAGIC + bytes([1, typ, reserved, 0]) + struct.pack('>Ii', spi, code) +
            reason[:128].ljust(128, b'\0'))


V6A = bytes.fromhex('fd000000000000000000000000000001')
V6B = bytes.fromhex('fd000000000000000000000000000002')
write('agent_wire', 'pair-v4', b'\x00' + ag_pair())
write('agent_wire', 'pair-v6', b'\x00' + ag_pair(6, V6A, V6B, 0xabcdef01, 0))
write('agent_wire', 'pair-v4-padding', b'\x00' + ag_pair(ai=b'\x0a\x4d\x00\x01\x01'))
write('agent_wire', 'pair-version-2', b'\x00' + ag_pair(version=2))
write('agent_wire', 'pair-family-5', b'\x00' + ag_pair(fam=5))
write('agent_wire', 'pair-reserved', b'\x00' + ag_pair(reserved=0x80))
write('agent_wire', 'pair-short', b'\x00' + ag_pair()[:20])
write('agent_wire', 'ok', b'\x01' + ag_reply())
write('agent_wire', 'ok-spi-low', b'\x01' + ag_reply(spi=0xff))
write('agent_wire', 'err', b'\x01' + ag_reply(3, 0, -13, b'the lower address initiates'))
write('agent_wire', 'err-escape', b'\x01' + ag_reply(3, 0, 5, b'\x1b[31mred\nline\xff'))
write('agent_wire', 'err-full-reason', b'\x01' + ag_reply(3, 0, -1, b'x' * 128))
write('agent_wire', 'reply-reserved', b'\x01' + ag_reply(reserved=1))
write('agent_wire', 'query-v4', b'\x02PAIR? 10.77.0.1')
write('agent_wire', 'query-v6', b'\x02PAIR? fd00::1')
write('agent_wire', 'query-newline', b'\x02PAIR? 10.77.0.1\n')
write('agent_wire', 'query-nul', b'\x02PAIR? 10.77.0.1\x00junk')
write('agent_wire', 'query-long', b'\x02PAIR? ' + b'1' * 70)
write('agent_wire', 'query-verb', b'\x02pair? 10.77.0.1')
