"""The hot-path modules the compiled build compiles, and which of them this process runs as native code.

Owns: ``COMPILED``, the one list of modules that mypyc compiles (setup.py, hack/compiled.py, the tests'
and benchmarks' checks read it from here; docs/decisions/0005-compiled-hot-path.md says why these), and
``hot_path()``, which says for each whether the interpreter would load it from a C extension or from
its ``.py`` (``gang-extender --version``, the ``gang_extender_build_info`` metric, the serve log's first line,
the image's check), and the installed package's version.
Must not: import anything of ``extender`` at import time (``hot_path()`` imports the listed modules when
called: a compiled module that cannot load must fail there, at start, not at the first request), nor run
at import time anything beyond defining these; setup.py reads this file with ``runpy`` before the
package is installed.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.metadata
from dataclasses import dataclass

COMPILED: tuple[str, ...] = (
    # the mirror's records and their parsing
    "extender.model.quantity",
    "extender.model.cluster",
    "extender.model.gang",
    "extender.cluster.records",
    "extender.cluster.groups",
    # the signature
    "extender.cluster.signature",
    # per-node verdicts and what they read
    "extender.cluster.fit",
    "extender.cluster.verdicts",
    "extender.cluster.capacity",
    "extender.cluster.reservations",
    "extender.cluster.cpu_order",
    "extender.cluster.mirror",
    "extender.cluster.cache",
    "extender.engine.requests",
    "extender.engine.filtering",
    # admission and the barrier's bookkeeping
    "extender.gangs.record",
    "extender.gangs.placement",
    "extender.gangs.registry",
    "extender.gangs.admission",
    "extender.gangs.barrier",
    # request reading
    "extender.http.protocol",
)
"""Modules compiled by ``GANG_EXTENDER_COMPILE=1`` (setup.py) and ``make compiled``, in one mypyc group."""


@dataclass(frozen=True)
class HotPath:
    """Which modules of ``COMPILED`` load as native code here (``native``) and which as Python (``interpreted``)."""

    native: tuple[str, ...]
    interpreted: tuple[str, ...]

    @property
    def build(self) -> str:
        """``compiled`` (every module native), ``interpreted`` (none) or ``partial`` (a broken install)."""
        if not self.interpreted:
            return "compiled"
        return "interpreted" if not self.native else "partial"

    def summary(self) -> str:
        """One line for a person: ``hot path: compiled (21 of 21 modules native)``."""
        return f"hot path: {self.build} ({len(self.native)} of {len(COMPILED)} modules native)"


def package_version() -> str:
    """The installed distribution's version, ``unknown`` when this source runs without being installed."""
    try:
        return importlib.metadata.version("gang-extender")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _is_native(module: str) -> bool:
    origin = importlib.import_module(module).__file__ or ""
    return origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def hot_path() -> HotPath:
    """Where each module of ``COMPILED`` was loaded from, importing it first: a compiled module that cannot
    load (its shared library missing, built for another Python) raises ImportError here."""
    flags = [(module, _is_native(module)) for module in COMPILED]
    return HotPath(native=tuple(m for m, native in flags if native),
                   interpreted=tuple(m for m, native in flags if not native))
