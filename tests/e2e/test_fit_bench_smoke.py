"""The fit benchmarks in miniature, so CI keeps them runnable (figures come from ``make bench-fit``):
bench/fit_latency.py on 300 nodes (three racks of 100, 2 cpu free on each node) with a gang of 250, each
case once, the installed ``kubectl-gang`` against a real kube-apiserver; bench/fit_beside_filters.py on
200 nodes with a gang of 50, two seconds a phase, against a live ``gang-extender serve``. Checked: every
answer is the kind its case must get (fits now; after capacity; after capacity in a rack: 250 members of
1 cpu need more than a rack's 200 free), every filter was answered, and the asker's questions were
answered."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import fit_beside_filters  # noqa: E402
import fit_latency  # noqa: E402


def test_fit_latency_in_miniature(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "fit.json"
    code = fit_latency.main(["--nodes", "300", "--members", "250", "--runs", "1", "--floor", "120",
                             "--json", str(out)])
    results = json.loads(out.read_text())
    assert {case: r["verdicts"] for case, r in results["cases"].items()} == {
        "fits-now": ["FitsNow"], "capacity": ["FitsAfterCapacity"], "rack": ["FitsAfterCapacity"]}, results
    assert code == 0, results


def test_fit_beside_filters_in_miniature(tmp_path: Path) -> None:
    out = tmp_path / "beside.json"
    code = fit_beside_filters.main(["--nodes", "200", "--members", "50", "--seconds", "2", "--json", str(out)])
    results = json.loads(out.read_text())
    assert code == 0 and results["filter_errors"] == 0, results
    asking = results["phases"]["asking"]
    assert asking["verdicts"].get("FitsNow", 0) >= 1 and asking["filters"] > 0, asking
    assert set(asking["verdicts"]) == {"FitsNow"}, asking  # spaced as the extender asks: never refused
