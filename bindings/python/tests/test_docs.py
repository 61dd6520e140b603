"""Every Python snippet of docs/python.md runs, in order, as one program
(the page says the snippets after the first two continue one program).
Addresses follow the test transport; a snippet that imports torch is
skipped where python3-torch is missing, the broker's where no rrpcd was
built (it runs against the rrpcd fixture of conftest.py)."""
import contextlib
import io
import os
import re

import pytest

import roce_rpc
import conftest

DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "docs",
                   "python.md")


def _snippets():
    if not os.path.exists(DOC):
        pytest.skip("docs/python.md is not next to these tests (an installed copy)")
    return re.findall(r"^```python\n(.*?)^```", open(DOC).read(), flags=re.S | re.M)


def test_every_snippet_of_the_python_page_runs(request, monkeypatch):
    try:
        if os.environ.get("RRPC_TEST_NO_TORCH"):
            raise ImportError("RRPC_TEST_NO_TORCH")
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    snippets = _snippets()
    assert len(snippets) >= 8, "docs/python.md lost its snippets?"
    ns = {"__name__": "docs_python_md"}
    ran = 0
    for i, code in enumerate(snippets):
        if "import torch" in code and not have_torch:
            continue
        if "Broker(" in code:  # the broker snippet talks to a real rrpcd
            if not roce_rpc.HAVE_BROKER or not os.environ.get("RRPCD"):
                continue
            addr, certs = request.getfixturevalue("rrpcd")
            monkeypatch.setenv("RRPC_BROKER", addr)
            monkeypatch.setenv("RRPC_CERTS", certs)
        code = code.replace('"tcp://127.0.0.1:0"', repr(conftest.listen_uri()))
        code = re.sub(r"\blis\.uri\b", "_client_uri(lis)", code)
        ns["_client_uri"] = conftest.client_uri
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(code, "docs/python.md snippet %d" % (i + 1), "exec"), ns)
        except Exception as e:
            raise AssertionError("docs/python.md snippet %d failed: %r\n%s" % (i + 1, e, code))
        ran += 1
    assert ran >= len(snippets) - 2
    assert ns["server"].closed and ns["client"].closed
