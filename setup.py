"""The build's one optional step: the hot-path modules compiled to C extensions by mypyc (docs/decisions/0005).

Everything else about the package is in pyproject.toml. Without ``GANG_EXTENDER_COMPILE=1`` this adds
nothing: the wheel is pure Python, as before. With it, the modules in ``COMPILED`` (extender/native.py) are compiled by
mypyc (which ships with mypy) and the wheel carries each one's ``.so`` next to its ``.py``; Python
imports the ``.so`` when there is one and the ``.py`` otherwise, so the same source runs either way.
Compiling needs mypy, setuptools and a C compiler in the build environment, hence
``--no-build-isolation`` from a venv that has them:

    GANG_EXTENDER_COMPILE=1 .venv/bin/pip wheel --no-build-isolation --no-deps -w dist .

``make compiled`` (hack/compiled.py) builds the same modules into ``build/compiled`` for the tests and
the benchmarks instead.
"""

from __future__ import annotations

import os
import runpy
from pathlib import Path

COMPILED: tuple[str, ...] = runpy.run_path(str(Path(__file__).parent / "extender" / "native.py"))["COMPILED"]
"""Modules compiled by ``GANG_EXTENDER_COMPILE=1``, in one mypyc group: extender/native.py lists them."""


def compiled_paths() -> list[str]:
    return [name.replace(".", "/") + ".py" for name in COMPILED]


if __name__ == "__main__":
    from setuptools import setup

    if os.environ.get("GANG_EXTENDER_COMPILE") == "1":
        from mypyc.build import mypycify

        setup(ext_modules=mypycify(compiled_paths(), opt_level="3", debug_level="0"))  # no -g: a shipped build
    else:
        setup()
