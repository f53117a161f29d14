"""The alert rules and the Grafana dashboard as test subjects: where they are, promtool, scrapes.

Owns: locating (building if needed) promtool with ``hack/build-promtool.sh``; parsing a ``/metrics``
scrape into samples; naming the metrics a PromQL expression queries; turning timelines of real
scrapes into a ``promtool test rules`` file. Must not: start processes other than promtool and its
build script, or know any scenario (tests/e2e/test_monitoring.py does).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
ALERTS = ROOT / "charts" / "gang-extender" / "files" / "alerts.yaml"
DASHBOARD = ROOT / "charts" / "gang-extender" / "files" / "dashboard.json"
RUNBOOK = ROOT / "docs" / "runbook.md"
BUILD_SCRIPT = ROOT / "hack" / "build-promtool.sh"
BUILD_EXIT_NO_GO = 3
LABELS = {"job": "gang-extender", "instance": "gang-extender-0:8888"}  # what a Prometheus scrape adds

Sample = tuple[str, tuple[tuple[str, str], ...]]  # sample name, sorted labels
Scrape = dict[Sample, float]


class PromtoolUnavailableError(RuntimeError):
    """promtool is not built and ``go`` is not installed."""


def find_promtool() -> Path:
    """``hack/build-promtool.sh`` builds promtool only if it is missing and prints its directory last
    (its progress goes straight to our stderr)."""
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                          check=False)
    if proc.returncode == BUILD_EXIT_NO_GO:
        raise PromtoolUnavailableError(f"{BUILD_SCRIPT}: promtool is not built and `go` is not installed")
    lines = proc.stdout.split()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{BUILD_SCRIPT} failed with exit code {proc.returncode} (its output is above)")
    promtool = Path(lines[-1]) / "promtool"
    assert os.access(promtool, os.X_OK), promtool
    return promtool


def promtool(binary: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=300, check=False)


# ------------------------------------------------------------------------------- the files
def alert_rules() -> list[dict[str, Any]]:
    """Every rule of every group in the rules file."""
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    """Every PromQL expression of every panel of the dashboard (rows' nested panels included)."""
    board = json.loads(DASHBOARD.read_text())

    def panels(items: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for item in items:
            yield item
            yield from panels(item.get("panels", []))

    return [t["expr"] for p in panels(board["panels"]) for t in p.get("targets", []) if t.get("expr")]


# ------------------------------------------------------------------------- PromQL metric names
KEYWORDS = frozenset({
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset",
    "inf", "nan",
})
_STRINGS = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_VARIABLES = re.compile(r"\$\{?\w+\}?")  # Grafana: $__rate_interval, ${instance}
_DURATIONS = re.compile(r"\b\d+(?:ms|s|m|h|d|w|y)\b")
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def queried_metrics(expr: str) -> set[str]:
    """The metric names an expression selects: identifiers that are not a function (followed by
    ``(``), a keyword, a label inside a grouping, matchers, strings, ranges or Grafana variables."""
    text = _VARIABLES.sub(" ", _STRINGS.sub('""', expr))
    text = _RANGES.sub(" ", _MATCHERS.sub(" ", text))
    text = _DURATIONS.sub(" ", _GROUPING.sub(" ", text))
    names = set()
    for match in _IDENTIFIER.finditer(text):
        rest = text[match.end():].lstrip()
        if rest.startswith("(") or match.group().lower() in KEYWORDS:
            continue
        names.add(match.group())
    return names


# ------------------------------------------------------------------------------- scrapes
def parse_scrape(text: str) -> tuple[Scrape, set[str]]:
    """A scrape's samples (``_created`` timestamps left out) and the names of its monotonic samples
    (counters, histogram buckets, counts and sums)."""
    samples: Scrape = {}
    monotonic: set[str] = set()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith("_created") or not math.isfinite(s.value):
                continue
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
            if family.type in ("counter", "histogram"):
                monotonic.add(s.name)
    return samples, monotonic


def exported_names(scrapes: Iterable[Scrape]) -> set[str]:
    return {name for scrape in scrapes for name, _ in scrape}


def repeat(base: Scrape, step: Scrape, times: int, monotonic: set[str]) -> list[Scrape]:
    """``times`` scrapes in which the real change from ``base`` to ``step`` happens again and again:
    each monotonic sample grows by its change each time, every gauge keeps ``step``'s value."""
    out = []
    for i in range(1, times + 1):
        scrape = {}
        for key, value in step.items():
            if key[0] in monotonic:
                scrape[key] = base.get(key, 0.0) + i * (value - base.get(key, 0.0))
            else:
                scrape[key] = value
        out.append(scrape)
    return out


def changed(scrape: Scrape, name: str, delta: float, **labels: str) -> Scrape:
    """``scrape`` with ``delta`` added to the samples named ``name`` that carry ``labels``."""
    out = dict(scrape)
    matching = [k for k in scrape if k[0] == name and labels.items() <= dict(k[1]).items()]
    assert matching, f"no sample {name}{labels} in the scrape"
    for key in matching:
        out[key] = scrape[key] + delta
    return out


# ------------------------------------------------------------------------- promtool test file
def _selector(key: Sample) -> str:
    name, labels = key
    pairs = sorted({**dict(labels), **LABELS}.items())
    return name + "{" + ",".join(f"{k}={json.dumps(v)}" for k, v in pairs) + "}"


def input_series(timeline: Sequence[Scrape]) -> list[dict[str, str]]:
    """promtool ``input_series``: one value per scrape, one scrape per ``interval``; ``_`` where a
    series is absent from a scrape (a restart, or a metric only some modes export)."""
    keys = sorted({key for scrape in timeline for key in scrape})
    series = []
    for key in keys:
        values = [repr(scrape[key]) if key in scrape else "_" for scrape in timeline]
        series.append({"series": _selector(key), "values": " ".join(values)})
    return series


FIRING = 'group by (alertname) (ALERTS{alertstate="firing"})'


def rule_test(name: str, timeline: Sequence[Scrape], expect: Mapping[int, Iterable[str]]) -> dict[str, Any]:
    """A promtool test: the scrapes one minute apart; at each minute of ``expect`` exactly those
    alerts fire."""
    checks = [{"expr": FIRING, "eval_time": f"{minute}m",
               "exp_samples": [{"labels": f'{{alertname="{a}"}}', "value": 1} for a in sorted(alerts)]}
              for minute, alerts in sorted(expect.items())]
    return {"name": name, "interval": "1m", "input_series": input_series(timeline), "promql_expr_test": checks}


def write_rule_tests(path: Path, tests: Sequence[dict[str, Any]], rules: Path = ALERTS) -> Path:
    path.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": list(tests)},
                                   sort_keys=False, width=1 << 20))
    return path
