"""Fixtures of the Python binding tests.  Like tests/conformance, the
transport comes from the environment:
  RRPC_TEST_TRANSPORT   tcp (default) | verbs
  RRPC_TEST_SERVER      the server's address (default 127.0.0.1)
  RRPC_TEST_CLIENT_SRC  the client's source address (optional)
  RRPC_TEST_PACKAGE_UNDER  fail unless roce_rpc is imported from under it
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

try:
    import roce_rpc  # noqa: F401  (PYTHONPATH given: a build directory's copy)
except ImportError:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        import roce_rpc  # noqa: F401
    except ImportError as e:
        raise ImportError("%s\nbuild the package first: ninja -C build, then "
                          "PYTHONPATH=build/bindings/python (docs/python.md)" % e)

# test-install.sh runs this suite against an installed package: make sure
# that is the one imported.
_UNDER = os.environ.get("RRPC_TEST_PACKAGE_UNDER")
if _UNDER and not os.path.realpath(roce_rpc.__file__).startswith(
        os.path.realpath(_UNDER) + os.sep):
    raise ImportError("roce_rpc imported from %s, not from the installed package under %s"
                      % (roce_rpc.__file__, _UNDER))

TRANSPORT = os.environ.get("RRPC_TEST_TRANSPORT", "tcp")
SCHEME = "rdma" if TRANSPORT == "verbs" else "tcp"
SERVER = os.environ.get("RRPC_TEST_SERVER", "127.0.0.1")
CLIENT_SRC = os.environ.get("RRPC_TEST_CLIENT_SRC")


def listen_uri():
    return "%s://%s:0" % (SCHEME, SERVER)


def client_uri(listener):
    return listener.client_uri(CLIENT_SRC)


@pytest.fixture
def pair():
    """(server Context, its Listener, client Context); closed afterwards."""
    with roce_rpc.Context() as s, roce_rpc.Context() as c:
        lis = s.listen(listen_uri())
        yield s, lis, c


@pytest.fixture
def conn(pair):
    s, lis, c = pair
    cn = c.connect(client_uri(lis))
    assert cn.transport == TRANSPORT
    yield cn
    cn.close()


@pytest.fixture(scope="session")
def rrpcd():
    """A real rrpcd over TLS on a free loopback port, with development
    certificates for kv-server, kv-client and nobody: ("HOST:PORT", DIR)."""
    if not os.environ.get("RRPCD") or not os.environ.get("MAKE_CERTS"):
        pytest.skip("RRPCD / MAKE_CERTS unset (meson test sets them)")
    d = tempfile.mkdtemp(prefix="rrpc-py-broker-")
    subprocess.run([os.environ["MAKE_CERTS"], d, "kv-server", "kv-client", "nobody"],
                   check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(d, "rrpcd.conf"), "w") as f:
        f.write("listen = 127.0.0.1:0\ncert = {d}/rrpcd.crt\nkey = {d}/rrpcd.key\n"
                "ca = {d}/ca.crt\nport_file = {d}/port\nlease_ms = 2000\n"
                "ticket_lifetime_ms = 5000\n"
                "allow = register * kv-server\nallow = lookup * kv-client\n".format(d=d))
    log = open(os.path.join(d, "log"), "w")
    p = subprocess.Popen([os.environ["RRPCD"], "-c", os.path.join(d, "rrpcd.conf")],
                         stdout=log, stderr=log)
    port = None
    for _ in range(1000):
        try:
            port = int(open(os.path.join(d, "port")).read())
            break
        except (OSError, ValueError):
            if p.poll() is not None:
                raise RuntimeError("rrpcd exited: " + open(os.path.join(d, "log")).read())
            time.sleep(0.01)
    assert port, "rrpcd never wrote its port"
    yield "127.0.0.1:%d" % port, d
    p.terminate()
    p.wait(10)
    log.close()
    shutil.rmtree(d, ignore_errors=True)
