"""mypy --strict must refuse this (tests/test_typing.py): a misspelt class."""
import roce_rpc


def f(conn: roce_rpc.Conn) -> bytes:
    return conn.call("echo", b"x", qos="bluk")
