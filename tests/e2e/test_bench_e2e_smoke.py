"""bench/e2e_scheduling.py on v1.37.2 in miniature, so CI keeps ``make bench-e2e-gate`` runnable: 30 nodes,
6 gangs of 8 created at a fixed pace, under gang-extender with the chart's quorum gate and under the in-tree
plugin, through the benchmark's own entry point. Every gang binds whole, none partly; with the gate every
member's gate is seen lifted and no member has an unschedulable attempt (the gate's promise); the in-tree
plugin is shown to be on (it parks members at PreEnqueue)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import e2e_scheduling  # noqa: E402


def test_bench_e2e_with_the_quorum_gate_in_miniature(k8s_137_bin_dir: Path, helm_bin: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    assert e2e_scheduling.main(["--release", "1.37", "--configs", "gang-extender:quorum-gate;in-tree",
                                "--phases", "paced", "--gangs", "6", "--general-nodes", "30", "--paced-rate", "24",
                                "--json", str(out)]) == 0
    results = {r["kind"]: r for r in json.loads(out.read_text())["results"]}
    assert sorted(results) == ["gang-extender", "in-tree"]
    for kind, r in results.items():
        paced = r["paced"]
        assert paced["bound"] == paced["pods"] == 48 and paced["completed_gangs"] == 6, (kind, paced)
        assert paced["partial_gangs"] == 0, (kind, paced["max_partial_seconds"])
    gated = results["gang-extender"]["paced"]
    assert "quorum gate" in results["gang-extender"]["config"]
    assert len(gated["gate_lifted"]) == 6 and all(s > 0 for s in gated["gate_lifted"]), gated["gate_lifted"]
    assert gated["scheduler"]["attempts"] > 0, gated["scheduler"]  # kube-scheduler's metrics were read
    assert gated["scheduler"].get("attempts unschedulable", 0) == 0, gated["scheduler"]
    assert gated["extender_writes"]["quorum gates removed"] >= 48, gated["extender_writes"]
    assert results["in-tree"]["paced"]["gate_lifted"] == []
    # the in-tree gang plugin was on: it parked members at PreEnqueue (kube-scheduler alone would not)
    assert results["in-tree"]["paced"]["scheduler"].get("moves gated", 0) > 0, results["in-tree"]["paced"]["scheduler"]
