"""extender/native.py: which build of the hot path this process runs, as ``--version`` and the serve log say it.

The whole session runs one build: the source (``make test``) or build/compiled (``make test-compiled``,
tests/conftest.py), so ``hot_path()`` must say exactly that one; and a build where only some modules
load compiled (a wheel for another Python beside its ``.py``) must say ``partial``, not ``compiled``.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import runpy
from pathlib import Path

import pytest

from extender import cli, native

ROOT = Path(__file__).resolve().parents[2]
SESSION_BUILD = "compiled" if os.environ.get("GANG_EXTENDER_TREE") else "interpreted"


def test_the_session_runs_the_build_it_says() -> None:
    hot_path = native.hot_path()
    assert hot_path.build == SESSION_BUILD
    assert set(hot_path.native) | set(hot_path.interpreted) == set(native.COMPILED)
    for module in native.COMPILED:  # the lookup agrees with where the module was really loaded from
        compiled = (importlib.import_module(module).__file__ or "").endswith(".so")
        assert compiled == (module in hot_path.native), module


EVERY = len(native.COMPILED)


@pytest.mark.parametrize(("native_count", "build"), [(EVERY, "compiled"), (0, "interpreted"), (EVERY - 1, "partial"),
                                                     (1, "partial")])
def test_build_names_every_mix(native_count: int, build: str) -> None:
    modules = native.COMPILED
    hot_path = native.HotPath(native=modules[:native_count], interpreted=modules[native_count:])
    assert hot_path.build == build
    assert hot_path.summary() == f"hot path: {build} ({native_count} of {EVERY} modules native)"


def test_setup_py_compiles_exactly_the_listed_modules() -> None:
    setup = runpy.run_path(str(ROOT / "setup.py"))
    assert setup["COMPILED"] == native.COMPILED
    paths = setup["compiled_paths"]()
    assert paths == [m.replace(".", "/") + ".py" for m in native.COMPILED]
    assert all((ROOT / p).is_file() for p in paths)


def test_version_says_the_package_and_the_hot_path(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out.strip()
    expected = EVERY if SESSION_BUILD == "compiled" else 0
    assert out == (f"gang-extender {native.package_version()} "
                   f"(hot path: {SESSION_BUILD} ({expected} of {EVERY} modules native))")
    assert native.package_version() != "unknown"  # the test environment installs the package (pip -e)


def test_a_compiled_module_that_cannot_load_fails_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken install (a shared library missing or built for another Python) must fail where the build
    and the start ask, not read as compiled and fail at the first request."""
    package = tmp_path / "brokenbuild"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "hot.py").write_text("VALUE = 1\n")
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    (package / f"hot{suffix}").write_bytes(b"not an ELF object")  # preferred over hot.py, and cannot load
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(native, "COMPILED", ("brokenbuild.hot",))
    with pytest.raises(ImportError):
        native.hot_path()
