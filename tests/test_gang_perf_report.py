"""bench/gang_perf_report.py's arithmetic: Prometheus histogram quantiles over a scrape difference, and
upstream's gang scheduling duration (first member created -> minCount-th member bound), whole and
partial gangs."""

from __future__ import annotations

import math
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import gang_perf_report as rep  # noqa: E402
import workloads as wl  # noqa: E402


def scrape(counts: dict[str, float], total: float) -> dict[str, float]:
    values = {f'gang_extender_request_seconds_bucket{{verb="bind",le="{le}"}}': n for le, n in counts.items()}
    values['gang_extender_request_seconds_count{verb="bind"}'] = counts["+Inf"]
    values['gang_extender_request_seconds_sum{verb="bind"}'] = total
    values['gang_extender_request_seconds_count{verb="filter"}'] = 99.0  # another verb: ignored
    return values


def test_verb_latency_interpolates_within_the_bucket_of_the_difference() -> None:
    before = scrape({"0.01": 10, "0.1": 10, "1.0": 10, "+Inf": 10}, 0.05)
    after = scrape({"0.01": 10, "0.1": 60, "1.0": 110, "+Inf": 110}, 30.05)
    got = rep.verb_latency(before, after, "bind")
    assert got["bind_calls"] == 100 and math.isclose(got["bind_mean_ms"], 300.0)
    assert math.isclose(got["bind_p50_ms"], 100.0)           # rank 50 ends the (0.01, 0.1] bucket
    assert math.isclose(got["bind_p99_ms"], 100 + 900 * 49 / 50)  # rank 99: 49 of 50 into (0.1, 1]
    assert got["bind_top_ms"] == 1000.0


def test_a_quantile_beyond_the_top_bucket_is_shown_as_at_least_that() -> None:
    result = rep.Result(config="gang-extender", workload="w", nodes=1, k8s="1.37.2",
                        extender={"bind_p50_ms": 500.0, "bind_p99_ms": 30000.0, "bind_top_ms": 30000.0})
    row = rep.table([result]).splitlines()[-1]
    assert "| 500 / ≥ 30,000 (-) |" in row


def test_quantile_in_the_inf_bucket_answers_the_highest_bound_and_empty_is_nan() -> None:
    assert rep.quantile([(1.0, 1), (math.inf, 10)], 0.99) == 1.0
    assert math.isnan(rep.quantile([(1.0, 0), (math.inf, 0)], 0.5))


def test_gang_figures_use_the_first_creation_and_the_min_count_th_bind() -> None:
    gangs = [wl.Gang("ns/a", ["ns/a0", "ns/a1", "ns/a2"], 2, "identical"),
             wl.Gang("ns/b", ["ns/b0", "ns/b1"], 2, "identical"),
             wl.Gang("ns/c", ["ns/c0"], 1, "identical")]
    created = {"ns/a0": 1.0, "ns/a1": 2.0, "ns/a2": 3.0, "ns/b0": 1.0, "ns/b1": 1.0, "ns/c0": 5.0}
    bound = {"ns/a0": 4.0, "ns/a1": 6.0, "ns/a2": 9.0, "ns/b0": 2.0}
    result = rep.Result(config="gang-extender", workload="w", nodes=1, k8s="1.37.2", pods=6, bound=4, timeouts=0)
    rep.gang_figures(result, gangs, created, bound)
    assert result.gang_seconds == [5.0]  # a: created at 1, its 2nd bind at 6; b and c never reached minCount
    assert (result.whole_gangs, result.partial_gangs, result.max_bind_spread) == (1, 1, 5.0)
    assert result.problems() == ["2 of 6 pods never bound", "1 partial gangs"]
