"""The package as a type checker and a reader of dir() and help() see it
(issue #32, point 4): mypy --strict over the examples and a typed user
script, error codes as an enum, QoS class names as a Literal, a clean dir()
for every module, docstrings in the Python convention."""
import importlib
import inspect
import os
import re
import subprocess
import sys

import pytest

import roce_rpc
from roce_rpc import ErrorCode, RrpcError

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
TYPED = os.path.join(HERE, "typed")
MODULES = ["roce_rpc", "roce_rpc.aio", "roce_rpc.broker", "roce_rpc.tensor"]


def _mypy(tmp_path, *files):
    pytest.importorskip("mypy", reason="install mypy (Debian package mypy)")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(roce_rpc.__file__)))
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-color-output",
                           "--python-executable", sys.executable,
                           "--cache-dir", str(tmp_path / "mypy-cache")] + list(files),
                          env=env, cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=300)


def test_mypy_strict_accepts_the_examples_and_a_typed_user_script_which_then_runs(tmp_path):
    examples = sorted(os.path.join(TOP, "examples", f)
                      for f in os.listdir(os.path.join(TOP, "examples")) if f.endswith(".py"))
    script = os.path.join(TYPED, "user_script.py")
    r = _mypy(tmp_path, script, *examples)
    assert r.returncode == 0, r.stdout + r.stderr
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(roce_rpc.__file__)))
    r = subprocess.run([sys.executable, "-s", script], env=env, cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "typed user script: OK" in r.stdout, r.stdout + r.stderr


def test_a_misspelt_qos_class_is_a_type_error_and_a_value_error(tmp_path, pair):
    r = _mypy(tmp_path, os.path.join(TYPED, "bad_qos.py"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert 'Argument "qos" to "call" of "Conn" has incompatible type "Literal[\'bluk\']"' \
        in r.stdout, r.stdout
    s, lis, c = pair
    s.add_handler("echo", lambda d: d)
    conn = c.connect(lis.uri)
    with pytest.raises(ValueError, match=r"unknown QoS class 'bluk' \(did you mean 'bulk'\?\): "
                                         r"use one of control, low_latency, bulk, background"):
        conn.call("echo", b"x", qos="bluk")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="qos must be a class name"):
        conn.call("echo", b"x", qos=1.5)  # type: ignore[arg-type]
    assert conn.call("echo", b"x", qos="bulk") == b"x"
    assert conn.call("echo", b"x", qos=roce_rpc.CLASS_BULK) == b"x"


def test_error_codes_are_an_enum_and_the_old_names_still_work():
    assert issubclass(ErrorCode, int)
    assert roce_rpc.E_DEADLINE is ErrorCode.DEADLINE
    assert roce_rpc.E_DEADLINE == roce_rpc.lib.RRPC_E_DEADLINE == -1007
    for e in ErrorCode:
        assert getattr(roce_rpc, "E_" + e.name) is e
        assert getattr(roce_rpc.lib, "RRPC_E_" + e.name) == e
        assert roce_rpc.err_name(e) == "RRPC_E_" + e.name
    err = RrpcError(roce_rpc.lib.RRPC_E_LIMIT, "x")
    assert err.code == ErrorCode.LIMIT and ErrorCode(err.code) is ErrorCode.LIMIT


@pytest.mark.parametrize("name", MODULES)
def test_dir_of_every_module_shows_its_public_names_only(name):
    mod = importlib.import_module(name)
    names = set(dir(mod))
    leaked = names & {"Any", "Callable", "Optional", "Union", "ffi", "lib", "logging", "log",
                      "asyncio", "collections", "threading", "np", "weakref", "errno"}
    assert not leaked, "%s: dir() lists %s" % (name, sorted(leaked))
    public = set(mod.__all__) | {"aio", "broker", "tensor"}
    assert names <= public, "%s: dir() lists %s outside __all__" % (name, sorted(names - public))
    for n in mod.__all__:
        assert hasattr(mod, n), "%s.__all__ names %s, which it lacks" % (name, n)
    if name == "roce_rpc":  # the cffi module is still there, for experts
        assert mod.ffi is not None and mod.lib is not None


_C_STYLE = re.compile(r"(?<![\w@])@[A-Za-z_]\w*(?!\w|\.\w|\()")


def _docs(mod):
    for n in mod.__all__:
        obj = getattr(mod, n)
        yield n, inspect.getdoc(obj) if (inspect.isclass(obj) or callable(obj)) else None
        if inspect.isclass(obj):
            for m, member in vars(obj).items():
                if not m.startswith("_") or m == "__init__":
                    doc = getattr(member, "__doc__", None)
                    if isinstance(member, property):
                        doc = member.fget.__doc__ if member.fget else None
                    yield "%s.%s" % (n, m), doc


def test_docstrings_name_parameters_the_python_way_not_with_at_param():
    bad = []
    for name in MODULES:
        mod = importlib.import_module(name)
        bad += ["%s: %r" % (where, _C_STYLE.findall(doc)) for where, doc in
                [("%s module" % name, mod.__doc__)] + [("%s.%s" % (name, w), d)
                                                        for w, d in _docs(mod)]
                if doc and _C_STYLE.search(doc)]
    assert not bad, "\n".join(bad)


def test_the_package_ships_py_typed_and_a_stub_for_its_extension():
    pkg = os.path.dirname(roce_rpc.__file__)
    assert os.path.isfile(os.path.join(pkg, "py.typed"))
    assert os.path.isfile(os.path.join(pkg, "_rrpc.pyi"))
