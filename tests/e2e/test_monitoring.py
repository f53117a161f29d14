"""The alert rules and the dashboard against a live extender: the metrics they query exist, and
``promtool test rules`` over series scraped from this run fires exactly the expected alerts.

One run on the 1.35 control plane with a real kube-scheduler scrapes ``/metrics`` at these moments:
``ready``; ``bound`` (a 4-member gang bound whole); ``held`` (a 4-member gang whose fourth member
anti-affinity keeps out, admitted and held at its barrier: with ``--threads 12`` its 4 binds fill the
held-bind budget of 4); ``timed_out`` (it timed out, then a fifth node let it bind); ``before_cut`` and
``resumed`` (a release cut by a crash, ``faults.release_cut_by_crash``, finished by the restarted
extender); ``apiserver_down`` (kube-apiserver killed, a filter answered ``not_ready``, the watches
failing); and ``gated``, a second extender in ``--bind-mode filter-gated`` (the only mode exporting
``gang_extender_gangs_partially_bound_total``).

The promtool scenarios replay those scrapes one minute apart (``tests/monitoring.py``: a real change
between two scrapes repeated, ``repeat``). Two conditions the run does not produce are made by changing
one real sample (``changed``): filter requests slower than 30 s, and one partly bound gang.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from controlplane import ControlPlane, wait_for
from faults import release_cut_by_crash
from support import WAIT, Extender, all_bound, create, events, pod, pod_spec, scenario, scheduling_with_extender

from tests import monitoring
from tests.monitoring import Scrape, alert_rules, dashboard_exprs, queried_metrics, repeat, rule_test

pytestmark = pytest.mark.e2e

THREADS = 12  # held-bind budget: 12 less 8 of headroom = 4, what one 4-member gang holds
SLOW_FILTERS = 3  # the perturbation: this many filter requests of 45 s


def _scrape(ext: Extender) -> str:
    with urllib.request.urlopen(ext.url + "/metrics", timeout=5) as reply:
        return str(reply.read().decode())


def _gang(ns: str, prefix: str, selector: dict[str, str], anti: str | None = None) -> list[dict[str, Any]]:
    annotations = {"gang-extender.io/group": prefix, "gang-extender.io/min-count": "4"}
    spec = pod_spec(cpu="1", selector=selector, anti_affinity_label=anti)
    return [pod(ns, f"{prefix}{i}", spec, {"anti": anti} if anti else {}, annotations) for i in range(4)]


def _filter_answered_not_ready(ext: Extender) -> bool:
    """POST a filter (any body: readiness is decided before the body is read) and say whether the
    extender has counted a not_ready answer and a failing pod watch."""
    request = urllib.request.Request(ext.url + "/filter", data=b"{}", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            reply.read()
    except urllib.error.HTTPError:
        pass  # 400: the extender was still serving and parsed the empty body
    values = ext.metrics()
    return (values.get('gang_extender_requests_total{outcome="not_ready",verb="filter"}', 0) > 0
            and values.get('gang_extender_watch_synced{resource="pods"}') == 0)


def _gang_scenarios(cp: ControlPlane, ext: Extender, out: dict[str, str]) -> None:
    ns, labels, nodes = scenario(cp, "mon-bound", 2)
    create(cp, *_gang(ns, "g", labels))
    all_bound(cp, ns, "g", 4, nodes)
    out["bound"] = _scrape(ext)

    ns, labels, nodes = scenario(cp, "mon-timeout", 3)
    create(cp, *_gang(ns, "t", labels, anti="mon-t"))

    def budget_full() -> bool:
        values = ext.metrics()
        return (values.get("gang_extender_held_binds", 0) >= 1
                and values.get("gang_extender_held_bind_demand", 0) >= values["gang_extender_held_bind_limit"])

    wait_for(budget_full, timeout=WAIT, interval=0.2, what="the held-bind budget full")
    out["held"] = _scrape(ext)
    wait_for(lambda: events(cp, ns, "GangTimeout"), timeout=WAIT, what="a GangTimeout event")
    nodes |= set(cp.add_nodes(1, cpu="4", labels=labels, prefix=f"{ns}-extra"))
    all_bound(cp, ns, "t", 4, nodes)
    wait_for(lambda: ext.metrics().get("gang_extender_held_binds", 1) == 0, timeout=WAIT, what="no bind held")
    out["timed_out"] = _scrape(ext)


@pytest.fixture(scope="module")
def scrapes(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The raw ``/metrics`` texts, also written to ``scrapes.json`` in the run's temp directory."""
    cp = control_plane
    workdir = tmp_path_factory.mktemp("monitoring")
    out: dict[str, str] = {}
    for sub in ("extender", "gated"):
        (workdir / sub).mkdir()
    with scheduling_with_extender(cp, workdir / "extender", "--threads", str(THREADS),
                                  "--watch-stale-seconds", "2") as ext:
        out["ready"] = _scrape(ext)
        _gang_scenarios(cp, ext, out)
        out["before_cut"] = _scrape(ext)
        figures = release_cut_by_crash(cp, ext, "mon-cut", log=print)
        assert figures["resumed_metric"] == 1, figures
        out["resumed"] = _scrape(ext)

        gated = Extender(cp.kubeconfig, workdir / "gated", args=["--bind-mode", "filter-gated"], log=print)
        gated.start()
        try:
            out["gated"] = _scrape(gated)
        finally:
            gated.stop()

        cp.stop_apiserver()
        try:
            wait_for(lambda: _filter_answered_not_ready(ext), timeout=30, interval=0.5,
                     what="a filter answered not_ready with the pod watch failing")
            out["apiserver_down"] = _scrape(ext)
        finally:
            cp.start_apiserver()
    (workdir / "scrapes.json").write_text(json.dumps(out, indent=1))
    print(f"[e2e] scrapes: {workdir / 'scrapes.json'}", file=sys.stderr)
    return out


@pytest.fixture(scope="module")
def promtool() -> Path:
    try:
        return monitoring.find_promtool()
    except monitoring.PromtoolUnavailableError as exc:
        pytest.fail(f"promtool unavailable in the e2e tier: {exc}")


def test_rules_and_panels_query_only_exported_metrics(scrapes: dict[str, str]) -> None:
    exported = monitoring.exported_names(monitoring.parse_scrape(text)[0] for text in scrapes.values())
    queried: dict[str, set[str]] = {}
    for where, exprs in (("rule", [r["expr"] for r in alert_rules()]), ("panel", dashboard_exprs())):
        for expr in exprs:
            for name in queried_metrics(expr):
                queried.setdefault(name, set()).add(where)
    assert {"rule", "panel"} <= set().union(*queried.values())
    missing = {name: sorted(where) for name, where in queried.items() if name not in exported}
    assert missing == {}, f"queried but not exported by a live extender: {missing}"


def _scenarios(s: dict[str, Scrape], monotonic: set[str]) -> list[dict[str, Any]]:
    """The promtool tests: (name, timeline one scrape a minute, {minute: alerts firing then})."""
    slow = monitoring.changed(s["bound"], "gang_extender_request_seconds_count", SLOW_FILTERS, verb="filter")
    slow = monitoring.changed(slow, "gang_extender_request_seconds_sum", 45 * SLOW_FILTERS, verb="filter")
    slow = monitoring.changed(slow, "gang_extender_request_seconds_bucket", SLOW_FILTERS, verb="filter", le="+Inf")
    under = monitoring.changed(slow, "gang_extender_request_seconds_bucket", SLOW_FILTERS, verb="filter", le="30.0")
    partial = monitoring.changed(s["gated"], "gang_extender_gangs_partially_bound_total", 1)
    return [
        rule_test("a gang bound every minute for an hour: nothing fires",
                  [s["ready"], *repeat(s["ready"], s["bound"], 60, monotonic)], {30: [], 60: []}),
        rule_test("a gang held at its barrier fills the held-bind budget for 15 minutes",
                  [s["bound"]] * 5 + [s["held"]] * 15, {4: [], 10: [], 19: ["GangExtenderHeldBindsNearBudget"]}),
        rule_test("one gang timed out once: no page",
                  [s["bound"]] * 5 + [s["held"], *[s["timed_out"]] * 45], {8: [], 30: [], 50: []}),
        rule_test("that timeout every minute: timeouts rising",
                  [s["bound"], *repeat(s["bound"], s["timed_out"], 40, monotonic)],
                  {10: [], 30: ["GangExtenderGangTimeoutsRising"]}),
        rule_test("a release cut by a crash, finished after the restart",
                  [s["before_cut"]] * 5 + [s["resumed"]] * 40, {4: [], 10: ["GangExtenderReleaseLeftUnfinished"],
                                                                   44: []}),
        rule_test("kube-apiserver down, kube-scheduler retrying a filter every minute",
                  [s["resumed"]] * 5 + repeat(s["resumed"], s["apiserver_down"], 12, monotonic),
                  {5: [], 16: ["GangExtenderVerbsAnsweringError", "GangExtenderWatchUnhealthy"]}),
        rule_test(f"{SLOW_FILTERS} filter requests of 45 s (changed sample)",
                  [s["bound"]] * 5 + [slow] * 15, {4: [], 7: ["GangExtenderFilterSlowerThanSchedulerTimeout"], 19: []}),
        rule_test(f"{SLOW_FILTERS} filter requests of 25 s (changed sample): under httpTimeout",
                  [s["bound"]] * 5 + [under] * 15, {7: []}),
        rule_test("filter-gated: one gang partly bound (changed sample)",
                  [s["gated"]] * 5 + [partial] * 40, {4: [], 10: ["GangExtenderGangsPartiallyBound"], 44: []}),
    ]


def test_alerts_fire_exactly_as_expected_over_scraped_series(scrapes: dict[str, str], promtool: Path,
                                                             tmp_path: Path) -> None:
    parsed = {name: monitoring.parse_scrape(text) for name, text in scrapes.items()}
    monotonic = set().union(*(m for _, m in parsed.values()))
    tests = _scenarios({name: samples for name, (samples, _) in parsed.items()}, monotonic)
    firing = {a["labels"] for t in tests for check in t["promql_expr_test"] for a in check["exp_samples"]}
    assert firing == {f'{{alertname="{r["alert"]}"}}' for r in alert_rules()}  # each alert fires somewhere
    path = monitoring.write_rule_tests(tmp_path / "alerts.test.yaml", tests)
    done = monitoring.promtool(promtool, "test", "rules", str(path))
    assert done.returncode == 0, f"{path}\n{done.stdout}\n{done.stderr}"
    assert done.stdout.count("SUCCESS") >= 1, done.stdout
