#!/usr/bin/python3
"""check-installed.py ROOT: imports roce_rpc and checks that the package and
the libroce_rpc code it runs were loaded from under ROOT (an install prefix,
a DESTDIR or a venv), not from a source or build tree, then makes one RPC over
tcp on 127.0.0.1.  Run it from outside the source tree, with only the
installed package on the path.  Exit 0 and one "ok" line, or a message."""
import os
import sys


def main():
    root = os.path.realpath(sys.argv[1]) + os.sep
    import roce_rpc
    pkg = os.path.realpath(roce_rpc.__file__)
    if not pkg.startswith(root):
        sys.exit("check-installed: roce_rpc imported from %s, not from under %s" % (pkg, root))
    with open("/proc/self/maps") as f:
        mapped = sorted({line.split()[-1] for line in f
                         if "roce_rpc" in line and line.split()[-1].startswith("/")})
    stray = [p for p in mapped if not os.path.realpath(p).startswith(root)]
    if stray or not mapped:
        sys.exit("check-installed: roce_rpc code mapped from outside %s: %s" % (root, stray or mapped))
    with roce_rpc.Context() as server, roce_rpc.Context() as client:
        lis = server.listen("tcp://127.0.0.1:0")

        @server.handler("echo")
        def echo(data):
            return data

        conn = client.connect(lis.uri)
        got = conn.call("echo", b"installed", timeout=10)
        if got != b"installed":
            sys.exit("check-installed: echo returned %r" % got)
        # tcp maps no verbs library; rdma:// then loads the installed verbs
        # module (issue #32): whatever the host's devices say after, not
        # "needs the module", and the module mapped from under ROOT.
        with open("/proc/self/maps") as f:
            if "libibverbs" in f.read():
                sys.exit("check-installed: libibverbs mapped by a tcp-only program")
        verbs = "no verbs transport in this build"
        try:
            server.listen("rdma://127.0.0.1:0")
            verbs = "rdma:// listening"
        except Exception as e:  # no RDMA device here: the module loaded, then said so
            if "needs the module" in str(e):
                sys.exit("check-installed: the installed verbs module was not found: %s" % e)
            if "no verbs transport" not in str(e):
                verbs = "rdma:// said: %s" % str(e)[:100]
        if not verbs.startswith("no verbs"):
            with open("/proc/self/maps") as f:
                mods = {line.split()[-1] for line in f if "roce_rpc-verbs-" in line}
            if not mods or any(not os.path.realpath(m).startswith(root) for m in mods):
                sys.exit("check-installed: the verbs module mapped from %s, not under %s"
                         % (sorted(mods), root))
            verbs += " (module %s)" % ", ".join(sorted(mods))
    print("ok - roce_rpc %s from %s (%s): one echo over %s; %s" % (
        roce_rpc.__version__, os.path.dirname(pkg), ", ".join(mapped), lis.uri, verbs))


if __name__ == "__main__":
    main()
