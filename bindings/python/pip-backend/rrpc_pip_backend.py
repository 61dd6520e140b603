"""pip's build backend for roce-rpc (pyproject.toml: build-backend).

It is meson-python (mesonpy), reached through this module so that a
missing build dependency ends pip's run with a few lines saying what to
install, instead of pip's traceback of the failed import ("No module named
'mesonpy'", about 40 lines).  Every hook is mesonpy's own; the check runs
in the first hook pip calls.
"""
import importlib
import sys
from typing import Any, List

_NEEDED = (("mesonpy", "meson-python", "python3-mesonpy"),
           ("cffi", "cffi", "python3-cffi"))


def _missing_message(missing: List[Any]) -> str:
    mods = ", ".join("%s (pip: %s)" % (m, pipname) for m, pipname, _ in missing)
    debs = " ".join(deb for _, _, deb in missing)
    return "\n".join([
        "roce-rpc: cannot build the package: the Python that runs pip (%s) cannot import %s."
        % (sys.executable, mods),
        "  Debian/Ubuntu, offline: apt-get install %s patchelf python3-dev, then build in a venv"
        % debs,
        "    that sees them: /usr/bin/python3 -m venv --system-site-packages VENV;"
        " VENV/bin/pip install --no-build-isolation .",
        "  With an index: run pip without --no-build-isolation (pip then installs %s"
        % " and ".join(p for _, p, _ in _NEEDED),
        "    into a build environment of its own), or install them into this Python first.",
        "  See docs/python.md, \"Build, install and test\".",
    ])


def _backend() -> Any:
    missing = []
    for mod, pipname, deb in _NEEDED:
        try:
            importlib.import_module(mod)
        except ImportError:
            missing.append((mod, pipname, deb))
    if missing:
        print(_missing_message(missing), file=sys.stderr, flush=True)
        # SystemExit, not an exception: pip shows what was printed, no traceback
        raise SystemExit(1)
    return importlib.import_module("mesonpy")


def get_requires_for_build_wheel(config_settings: Any = None) -> Any:
    return _backend().get_requires_for_build_wheel(config_settings)


def get_requires_for_build_sdist(config_settings: Any = None) -> Any:
    return _backend().get_requires_for_build_sdist(config_settings)


def build_wheel(wheel_directory: str, config_settings: Any = None,
                metadata_directory: Any = None) -> Any:
    return _backend().build_wheel(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory: str, config_settings: Any = None) -> Any:
    return _backend().build_sdist(sdist_directory, config_settings)


def __getattr__(name: str) -> Any:
    # the optional hooks (prepare_metadata_for_build_wheel, build_editable,
    # ...) that this meson-python has; pip falls back when one is missing
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(_backend(), name)
