"""The alert rules file and the dashboard, without a cluster: ``promtool check rules``, a runbook entry
per alert, and the PromQL metric-name reader that tests/e2e/test_monitoring.py relies on.

Which metrics exist is checked against a live extender in tests/e2e/test_monitoring.py (with the
``promtool test rules`` runs over real scrapes).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests import monitoring
from tests.monitoring import ALERTS, RUNBOOK, alert_rules, dashboard_exprs, queried_metrics
from tests.skipping import skip_loudly

DEPLOY = monitoring.ROOT / "docs" / "deploy.md"


@pytest.fixture(scope="session")
def promtool() -> Path:
    try:
        return monitoring.find_promtool()
    except monitoring.PromtoolUnavailableError as exc:
        reason = f"PROMTOOL TESTS NOT RUN: {exc}"
        skip_loudly(reason)


def test_promtool_accepts_the_rules_file(promtool: Path) -> None:
    done = monitoring.promtool(promtool, "check", "rules", str(ALERTS))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in done.stdout, done.stdout


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    return {re.sub(r"[^a-z0-9 _-]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#{1,6} (.+)$", markdown, flags=re.MULTILINE)}


def test_every_alert_links_its_runbook_entry() -> None:
    anchors = _anchors(RUNBOOK.read_text())
    for rule in alert_rules():
        url = rule["annotations"]["runbook_url"]
        path, _, anchor = url.partition("#")
        assert path == "docs/runbook.md", url
        assert anchor == rule["alert"].lower() and anchor in anchors, (rule["alert"], url)
        assert rule["labels"]["severity"] in ("warning", "critical"), rule


def test_deploy_guide_links_the_runbook_and_the_rules_file() -> None:
    text = DEPLOY.read_text()
    assert "runbook.md" in text and "charts/gang-extender/files/alerts.yaml" in text


def test_rules_and_dashboard_query_only_gang_extender_metrics() -> None:
    """The names themselves are checked against a live scrape in tests/e2e/test_monitoring.py."""
    exprs = [rule["expr"] for rule in alert_rules()] + dashboard_exprs()
    assert len(exprs) > 20
    names = set().union(*(queried_metrics(e) for e in exprs))
    assert names and all(n.startswith("gang_extender_") for n in names), sorted(names)


@pytest.mark.parametrize(("expr", "names"), [
    ('rate(gang_extender_requests_total{outcome=~"error|not_ready"}[5m]) > 0', {"gang_extender_requests_total"}),
    ("sum without (le) (rate(a_count[5m])) - sum by (verb, le) (rate(b_bucket{le=\"30.0\"}[1h:5m])) > bool 0",
     {"a_count", "b_bucket"}),
    ('histogram_quantile(0.99, sum by (le) (rate(x_bucket{instance=~"$instance"}[$__rate_interval])))', {"x_bucket"}),
    ("x / on (instance) group_left (pod) y offset 5m", {"x", "y"}),
    ("label_replace(up, \"a\", \"$1\", \"b\", \"(by)\") unless absent(z)", {"up", "z"}),
])
def test_queried_metrics_reads_metric_names_only(expr: str, names: set[str]) -> None:
    assert queried_metrics(expr) == names


def test_dashboard_shows_what_the_issue_asks_for() -> None:
    """Gangs waiting / admitted / completed / timed out, gang latency, filter and bind latency, cache hit
    ratio, held binds, watch health: each is queried by some panel."""
    board = json.loads(monitoring.DASHBOARD.read_text())
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    queried = set().union(*(queried_metrics(e) for e in dashboard_exprs()))
    for name in ("gang_extender_waiting_gangs", "gang_extender_admitted_gangs", "gang_extender_gangs_completed_total",
                 "gang_extender_gangs_timeouts_total", "gang_extender_gang_wait_seconds_bucket",
                 "gang_extender_request_seconds_bucket", "gang_extender_filter_cache_hits_total",
                 "gang_extender_filter_cache_misses_total", "gang_extender_held_binds", "gang_extender_watch_synced"):
        assert name in queried, name
    assert 'verb=~"filter|bind"' in "\n".join(dashboard_exprs())
