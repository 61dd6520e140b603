"""The error hierarchy: every RrpcError keeps .code/.name/.message, and the
ones Python has a built-in for are also that built-in."""
import errno
import pickle
import socket
import time

import numpy as np
import pytest

import roce_rpc
from roce_rpc import RrpcError, Token

from conftest import client_uri


def closed_tcp_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_missed_call_deadline_is_a_timeout_error(pair):
    s, lis, c = pair

    @s.handler("slow", request=True)
    def slow(req, data):
        req.defer()  # never answered: the caller's deadline decides

    conn = c.connect(client_uri(lis))
    with pytest.raises(TimeoutError) as ei:
        conn.call("slow", timeout=0.1)
    e = ei.value
    assert isinstance(e, RrpcError) and isinstance(e, roce_rpc.RrpcTimeoutError)
    assert (e.code, e.name) == (roce_rpc.E_DEADLINE, "RRPC_E_DEADLINE")
    assert e.errno == errno.ETIMEDOUT
    assert 'call "slow" failed' in e.message and "100 ms" in e.message


def test_wait_notify_and_receive_time_out_with_the_same_timeout_error(pair):
    s, lis, c = pair
    with pytest.raises(roce_rpc.RrpcTimeoutError) as ei:
        s.wait_notify(timeout=0.05)
    assert isinstance(ei.value, TimeoutError) and ei.value.code == roce_rpc.E_DEADLINE
    if roce_rpc.HAVE_TENSOR:
        tensors = s.serve_tensors()
        with pytest.raises(roce_rpc.RrpcTimeoutError) as ei:
            tensors.receive(timeout=0.05)
        assert isinstance(ei.value, TimeoutError) and ei.value.code == roce_rpc.E_DEADLINE


def test_a_refused_connection_is_a_connection_refused_error(pair):
    s, lis, c = pair
    uri = "tcp://127.0.0.1:%d" % closed_tcp_port()
    with pytest.raises(ConnectionRefusedError) as ei:
        c.connect(uri, timeout=5)
    e = ei.value
    assert isinstance(e, RrpcError) and isinstance(e, roce_rpc.RrpcConnectionError)
    assert e.code == -errno.ECONNREFUSED and e.errno == errno.ECONNREFUSED
    assert uri in e.message


def test_a_call_on_a_lost_connection_fails_with_a_connection_error(pair):
    s, lis, c = pair

    @s.handler("hold", request=True)
    def hold(req, data):
        req.defer()

    conn = c.connect(client_uri(lis))
    fut = conn.call_async("hold", timeout=10)
    time.sleep(0.1)  # the request is at the server
    s.close()
    e = fut.exception(10)
    assert isinstance(e, ConnectionError) and isinstance(e, RrpcError), repr(e)
    assert e.code == roce_rpc.E_CONN_LOST and 'call "hold" failed' in e.message


def test_denied_remote_memory_access_is_a_permission_error(pair):
    s, lis, c = pair
    target = np.zeros(4096, np.uint8)
    region = s.register(target, access="r")

    @s.handler("token", request=True)
    def token(req, data):
        return region.token(req.conn).to_bytes()

    conn = c.connect(client_uri(lis))
    tok = Token.from_bytes(conn.call("token"))
    src = c.register(np.ones(4096, np.uint8), access="")
    with pytest.raises(PermissionError) as ei:
        conn.write(src, 0, tok, 0, 4096)
    assert isinstance(ei.value, RrpcError) and ei.value.code == roce_rpc.E_ACCESS


def test_a_refused_ticket_code_is_a_permission_error():
    # No Python server can refuse a ticket yet (rrpc_ctx_require_ticket is
    # not bound): the mapping itself, as every library path builds it.
    e = RrpcError(roce_rpc.E_TICKET, "ticket expired")
    assert isinstance(e, PermissionError) and isinstance(e, roce_rpc.RrpcPermissionError)
    assert (e.code, e.message, e.errno) == (roce_rpc.E_TICKET, "ticket expired", errno.EACCES)


def test_bad_arguments_are_value_errors(pair):
    s, lis, c = pair
    with pytest.raises(ValueError) as ei:
        c.connect("bogus://nowhere", timeout=1)
    assert isinstance(ei.value, RrpcError) and ei.value.code == roce_rpc.E_URI
    conn = c.connect(client_uri(lis))
    with pytest.raises(ValueError) as ei:
        conn.call("x", qos="no-such-class")
    assert isinstance(ei.value, RrpcError) and ei.value.code == roce_rpc.E_BAD_CLASS
    with pytest.raises(ValueError) as ei:
        conn.call("m" * 300)  # a method name has 1..255 bytes
    assert isinstance(ei.value, RrpcError) and ei.value.code == -errno.EINVAL


def test_no_method_message_names_the_method(pair):
    s, lis, c = pair
    conn = c.connect(client_uri(lis))
    with pytest.raises(RrpcError) as ei:
        conn.call("no_such_method")
    e = ei.value
    assert e.code == roce_rpc.E_NO_METHOD
    assert 'call "no_such_method" failed' in e.message, e.message
    assert "no_such_method" in str(e)


def test_application_errors_stay_plain_rrpc_errors_with_their_message(pair):
    s, lis, c = pair

    @s.handler("refuse")
    def refuse(data):
        raise RrpcError(42, "the handler refuses politely")

    conn = c.connect(client_uri(lis))
    with pytest.raises(RrpcError) as ei:
        conn.call("refuse")
    assert type(ei.value) is RrpcError
    assert (ei.value.code, ei.value.message) == (42, "the handler refuses politely")


def test_errors_survive_pickling_with_their_class_and_code():
    for code in (roce_rpc.E_DEADLINE, roce_rpc.E_CONN_LOST, -errno.ECONNREFUSED,
                 roce_rpc.E_TICKET, roce_rpc.E_ARGS, roce_rpc.E_NO_METHOD, 42):
        e = RrpcError(code, "detail")
        e2 = pickle.loads(pickle.dumps(e))
        assert type(e2) is type(e)
        assert (e2.code, e2.message, e2.args, str(e2)) == (e.code, e.message, e.args, str(e))
