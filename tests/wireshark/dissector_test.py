#!/usr/bin/python3
"""The Wireshark dissector (tools/wireshark/roce_rpc.lua) against real traffic.

    dissector_test.py BUILD_DIR [SCRIPT]
    dissector_test.py --roce PCAP [SCRIPT]

Captures loopback with tshark while the examples minimal_rpc and one_sided
run over tcp on a fixed port, then reads the capture back through the
dissector and checks the field values against what those programs sent:
the methods by name (the names given in the roce_rpc.methods preference)
and the unnamed one by its FNV-1a id, every status they were answered, the
hello records' credits and max_msg, the one-sided sub-headers (lengths that
add up to the 256 KiB moved, the notify flag and value on the last WRITE).
Exit 77 (skipped) when tshark is missing or may not capture here.

With --roce it reads a RoCEv2 capture instead: the one the Soft-RoCE VM's
DSCP step leaves in BUILD_DIR/dscp-capture/capture.pcap (dscp_traffic's
"echo" calls and its one "token" call on low_latency), decoded from the
SEND payloads after Wireshark's InfiniBand dissector: every REQUEST names
one of them, every call is answered with status 0 on its class, ids match.
"""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))


def fnv1a(name):
    h = 0xCBF29CE484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def proto_version():
    """The wire protocol version the library speaks (core/frame.h)."""
    text = open(os.path.join(TOP, "libroce_rpc", "core", "frame.h")).read()
    return re.search(r"#define\s+RRPCI_PROTO_VERSION\s+(\d+)", text).group(1)


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def fields(script, cap, *names, flt="roce_rpc", prefs=()):
    cmd = ["tshark", "-X", "lua_script:" + script, "-r", cap, "-Y", flt, "-T", "fields",
           "-E", "separator=|", "-E", "occurrence=a", "-E", "aggregator=,"]
    for p in prefs:
        cmd += ["-o", p]
    for n in names:
        cmd += ["-e", n]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        fail("tshark: " + out.stderr.strip())
    return [line.split("|") for line in out.stdout.splitlines() if line.strip()]


def roce(cap, script):
    reqs = fields(script, cap, "rrpc.method", "rrpc.class", "rrpc.id", "rrpc.len",
                  flt="rrpc.type == 5", prefs=["roce_rpc.methods:echo,token"])
    resp = fields(script, cap, "rrpc.status", "rrpc.class", "rrpc.id", flt="rrpc.type == 6")
    if len(reqs) < 10:
        fail("%d REQUEST frames decoded in the RoCEv2 capture, want dscp_traffic's calls"
             % len(reqs))
    bad = [r for r in reqs if r[0] not in ("echo", "token") or r[1] != "1"]
    if bad or sum(r[0] == "token" for r in reqs) != 1:
        fail("REQUESTs %r: want echo calls and one token call, on low_latency (1)"
             % (bad or reqs))
    bad = [r for r in resp if r[0] != "0" or r[1] != "1"]
    if bad:
        fail("RESPONSEs %r: want status 0 on low_latency (1)" % bad)
    if sorted(r[2] for r in reqs) != sorted(r[2] for r in resp):
        fail("request ids and response ids differ")
    print("ok: %d requests and %d responses decoded from RoCEv2 SEND payloads"
          % (len(reqs), len(resp)))
    return 0


def main():
    if sys.argv[1] == "--roce":
        if not shutil.which("tshark"):
            print("skipped: tshark is not installed (apt-get install tshark)")
            return 77
        return roce(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else
                    os.path.join(TOP, "tools/wireshark/roce_rpc.lua"))
    build = os.path.abspath(sys.argv[1])
    script = sys.argv[2] if len(sys.argv) > 2 else os.path.join(TOP, "tools/wireshark/roce_rpc.lua")
    if not shutil.which("tshark"):
        print("skipped: tshark is not installed (apt-get install tshark)")
        return 77
    port = 24000 + os.getpid() % 4000
    tmp = tempfile.mkdtemp(prefix="rrpc-ws-")
    cap = os.path.join(tmp, "cap.pcapng")
    ts = subprocess.Popen(["tshark", "-q", "-i", "lo", "-f", "tcp port %d" % port, "-w", cap],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # tshark says "Capturing on 'Loopback: lo'" once it listens
    deadline = time.time() + 30
    line = ""
    while time.time() < deadline:
        line = ts.stderr.readline()
        if "Capturing on" in line or not line:
            break
    if "Capturing on" not in line:
        ts.kill()
        err = line + ts.stderr.read()
        print("skipped: tshark cannot capture on lo here: " + err.strip()[-300:])
        return 77
    # The message comes a moment before the filter is in place: knock on the
    # port (refused, but captured) until the capture file has a packet.
    empty = os.path.getsize(cap) if os.path.exists(cap) else 0
    while time.time() < deadline:
        with socket.socket() as s:
            s.connect_ex(("127.0.0.1", port))
        time.sleep(0.2)
        if os.path.exists(cap) and os.path.getsize(cap) > max(empty, 360):
            break
    else:
        ts.kill()
        fail("tshark captured nothing on lo within 30 s")
    uri = "tcp://127.0.0.1:%d" % port
    for prog in ("minimal_rpc", "one_sided"):
        r = subprocess.run([os.path.join(build, "examples", prog), uri], capture_output=True,
                           text=True, timeout=60)
        if r.returncode != 0:
            ts.kill()
            fail("%s: %s%s" % (prog, r.stdout, r.stderr))
    time.sleep(1)
    ts.send_signal(2)  # SIGINT: tshark writes out what it holds and ends
    ts.wait(timeout=30)

    prefs = ["roce_rpc.methods:add,fail,buf.token"]
    # RPC: methods by name, the unnamed one by id; the statuses answered
    reqs = fields(script, cap, "rrpc.method", "rrpc.method_id", "rrpc.class",
                  flt="rrpc.type == 5", prefs=prefs)
    named = [r[0] for r in reqs]
    if named.count("add") != 2 or named.count("fail") != 1 or named.count("buf.token") != 1:
        fail("REQUEST method names %r, want add x2, fail, buf.token" % named)
    ids = {int(r[1], 16) for r in reqs}
    if fnv1a("nope") not in ids or fnv1a("add") not in ids:
        fail("REQUEST method ids %r lack FNV-1a('nope') or ('add')" % sorted(ids))
    if {r[2] for r in reqs} != {"1"}:
        fail("REQUEST classes %r, want low_latency (1) for every call" % reqs)
    # Both adds carry a traceparent as metadata (flag 0x02, version 4)
    meta = fields(script, cap, "rrpc.method", "rrpc.meta.count", "rrpc.meta.key",
                  "rrpc.meta.value", flt="rrpc.flags.meta == 1", prefs=prefs)
    trace = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".hex()
    if len(meta) != 2 or any(m[:3] != ["add", "1", "traceparent"] or
                             m[3].replace(":", "") != trace for m in meta):
        fail("metadata %r, want the two adds with traceparent %s" % (meta, trace))
    st = sorted(int(r[0]) for r in fields(script, cap, "rrpc.status", flt="rrpc.type == 6"))
    if st != sorted([0, 3, 42, -1002, 0]):
        fail("RESPONSE statuses %r, want 0 (add), 3 (add overflow), 42 (fail), "
             "-1002 (RRPC_E_NO_METHOD), 0 (buf.token)" % st)
    # Hello records: the first grants (RRPC_CREDIT_BASE, 4, lending being on
    # by default; the rest is lent in LEND frames) and the maximum message
    hellos = fields(script, cap, "rrpc.hello.version", "rrpc.hello.credits",
                    "rrpc.hello.max_msg", flt="rrpc.type == 1 || rrpc.type == 2")
    if len(hellos) != 4:
        fail("%d hello records, want 4 (two connections)" % len(hellos))
    ver = proto_version()
    for h in hellos:
        if h[0] != ver or h[1] != "4,4,4,4" or h[2] != str(64 << 20):
            fail("hello record %r, want version %s, credits 4,4,4,4, max_msg %d"
                 % (h, ver, 64 << 20))
    # One-sided: the WRITE's chunks add up to 256 KiB, the last one notifies
    w = fields(script, cap, "rrpc.os.len", "rrpc.flags.notify", "rrpc.os.imm", "rrpc.class",
               flt="rrpc.type == 8")
    total = sum(int(r[0]) for r in w)
    if total != 256 << 10:
        fail("OS_WRITE lengths add up to %d, want %d" % (total, 256 << 10))
    if w[-1][1] not in ("1", "True") or int(w[-1][2], 16) != 0xC0FFEE:
        fail("the last OS_WRITE %r must notify 0xc0ffee" % w[-1])
    if any(r[3] != "2" for r in w):
        fail("OS_WRITE classes %r, want bulk (2)" % w)
    rd = fields(script, cap, "rrpc.os.len", flt="rrpc.type == 9")
    if sum(int(r[0]) for r in rd) != 256 << 10:
        fail("OS_READ lengths %r, want 256 KiB in all" % rd)
    acks = fields(script, cap, "rrpc.status", flt="rrpc.type == 10")
    if not acks or any(a[0] != "0" for a in acks):
        fail("OS_ACK statuses %r, want all 0" % acks)
    shutil.rmtree(tmp, ignore_errors=True)
    print("ok: %d requests, %d responses, %d hellos, %d WRITE and %d READ frames decoded"
          % (len(reqs), len(st), len(hellos), len(w), len(rd)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
