#!/usr/bin/env python3
"""``make compiled``: this checkout's ``extender`` with the hot-path modules compiled by mypyc, in ``build/compiled``.

The tree is a copy of ``extender/`` (every ``.py``, so the modules left uncompiled run from there too)
with, next to each module of ``COMPILED`` in extender/native.py, its ``.so`` (and one shared ``*__mypyc*.so``
at the top of the tree). Python imports a module's ``.so`` before its ``.py``, so with the tree first
on ``sys.path`` the compiled modules run; the checkout's own ``extender/`` is never touched and stays the
uncompiled build. Run the tests against the tree with ``make test-compiled`` (``GANG_EXTENDER_TREE``,
tests/conftest.py), the benchmarks with ``bench/hot_path.py --trees .,build/compiled``.

Copying only changed sources and skipping mypyc when no source changed since the last build keeps a
second run cheap; ``--force`` compiles anyway. Needs mypy (mypyc ships with it), setuptools >= 69 and
a C compiler (``cc``). docs/decisions/0005-compiled-hot-path.md says which modules and why.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import runpy
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAMP = ".sources.sha256"


def sources_digest(tree: Path, modules: list[str]) -> str:
    digest = hashlib.sha256()
    for path in sorted((tree / "extender").rglob("*.py")):
        digest.update(str(path.relative_to(tree)).encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(" ".join(modules).encode())
    digest.update((ROOT / "pyproject.toml").read_bytes())
    return digest.hexdigest()


def sync(out: Path) -> None:
    """``out/extender`` holds exactly the checkout's sources (and the compiled files of the last build)."""
    source = ROOT / "extender"
    wanted = {p.relative_to(source) for p in source.rglob("*.py")}
    target = out / "extender"
    for path in list(target.rglob("*.py")) if target.exists() else []:
        if path.relative_to(target) not in wanted:
            path.unlink()
    for rel in wanted:
        src, dst = source / rel, target / rel
        if not dst.exists() or dst.read_bytes() != src.read_bytes():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    (out / "pyproject.toml").unlink(missing_ok=True)  # (older builds copied it)


def build(out: Path, force: bool, modules: list[str]) -> None:
    if not (shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")):
        raise SystemExit("no C compiler (cc): mypyc compiles to C; install gcc (Debian: apt-get install gcc)")
    out.mkdir(parents=True, exist_ok=True)
    sync(out)
    digest = sources_digest(out, modules)
    stamp = out / STAMP
    if not force and stamp.exists() and stamp.read_text() == digest:
        print(f"{out}: up to date ({digest[:12]})")
        return
    for old in [*out.glob("*.so"), *(out / "extender").rglob("*.so")]:
        old.unlink()
    stamp.unlink(missing_ok=True)
    paths = [name.replace(".", "/") + ".py" for name in modules]
    mypyc = Path(sys.executable).with_name("mypyc")
    # mypy's settings (strict, the overrides) from the checkout's pyproject.toml; none in ``out``, where
    # mypyc's generated setup.py runs and setuptools would read it
    command = [str(mypyc) if mypyc.exists() else "mypyc", "--config-file", str(ROOT / "pyproject.toml"), *paths]
    print(f"compiling {len(paths)} modules with mypyc in {out} ...", flush=True)
    started = time.monotonic()
    env = {**os.environ, "MYPYC_OPT_LEVEL": os.environ.get("MYPYC_OPT_LEVEL", "3")}
    done = subprocess.run(command, cwd=out, env=env, capture_output=True, text=True, check=False)
    log = out / "mypyc.log"
    log.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise SystemExit(f"mypyc failed ({done.returncode}); the whole log: {log}")
    missing = [p for p in paths if not list((out / p).parent.glob(Path(p).stem + ".*.so"))]
    if missing:
        raise SystemExit(f"mypyc left no .so for {missing}; see {log}")
    shutil.rmtree(out / "build", ignore_errors=True)  # mypyc's C sources and objects
    stamp.write_text(digest)
    print(f"{out}: {len(paths)} modules compiled in {time.monotonic() - started:.0f} s ({digest[:12]})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "compiled", help="the tree [build/compiled]")
    parser.add_argument("--force", action="store_true", help="compile even if no source changed")
    parser.add_argument("--modules", help="compile these modules instead (comma-separated; an experiment: the tests "
                                          "and bench/hot_path.py check extender/native.py's COMPILED)")
    args = parser.parse_args(argv)
    listed = runpy.run_path(str(ROOT / "extender" / "native.py"))["COMPILED"]
    modules = args.modules.split(",") if args.modules else list(listed)
    build(args.out.resolve(), args.force, modules)
    return 0


if __name__ == "__main__":
    sys.exit(main())
