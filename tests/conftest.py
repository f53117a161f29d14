"""Which build of ``extender`` every tier imports: this checkout's source (the default), or a compiled tree.

``GANG_EXTENDER_TREE=build/compiled`` (``make test-compiled``; ``make compiled`` builds the tree: the
same source with the hot-path modules compiled by mypyc next to it, docs/decisions/0005) puts that
directory first on ``sys.path`` before any test imports ``extender``, and on ``PYTHONPATH`` for the
servers the tests start. The session then refuses to run unless every module the build compiles
imports as a ``.so`` from that tree and the tree's sources are this checkout's (a stale build would
test old code). pytest's header says which build ran.
"""

from __future__ import annotations

import filecmp
import importlib
import os
import runpy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TREE = os.environ.get("GANG_EXTENDER_TREE", "")
TREE_PATH = (Path(TREE) if Path(TREE).is_absolute() else ROOT / TREE).resolve() if TREE else None

if TREE_PATH is not None:
    sys.path.insert(0, str(TREE_PATH))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(TREE_PATH), os.environ.get("PYTHONPATH", "")) if p)


def compiled_modules() -> list[str]:
    """The modules the compiled build compiles (``COMPILED`` in extender/native.py)."""
    return list(runpy.run_path(str(ROOT / "extender" / "native.py"))["COMPILED"])


def _stale(tree: Path) -> list[str]:
    """Source files of the checkout that differ from (or are missing in) the tree's copy."""
    out = []
    for source in sorted((ROOT / "extender").rglob("*.py")):
        copy = tree / source.relative_to(ROOT)
        if not copy.exists() or not filecmp.cmp(source, copy, shallow=False):
            out.append(str(source.relative_to(ROOT)))
    return out


def pytest_configure(config: pytest.Config) -> None:
    if TREE_PATH is None:
        return
    tree = TREE_PATH
    stale = _stale(tree)
    if stale:
        raise pytest.UsageError(f"{tree} was built from other sources than this checkout's ({', '.join(stale[:5])}"
                                f"{', ...' if len(stale) > 5 else ''}): run `make compiled` again")
    wrong = []
    for name in compiled_modules():
        file = importlib.import_module(name).__file__ or ""
        if not (file.endswith(".so") and Path(file).is_relative_to(tree)):
            wrong.append(f"{name} from {file}")
    if wrong:
        raise pytest.UsageError(f"GANG_EXTENDER_TREE={TREE}: not compiled there: {'; '.join(wrong)}")


def pytest_report_header(config: pytest.Config) -> str:
    import extender

    if not TREE:
        return f"extender: the source, {Path(extender.__file__ or '').parent}"
    return f"extender: compiled, {len(compiled_modules())} modules as .so from {Path(extender.__file__ or '').parent}"
