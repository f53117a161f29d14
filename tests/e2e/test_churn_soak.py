"""The barrier under churn, short version (the long run with the figures: ``make churn``, hack/churn.py;
scenario and figures: churn.py).

The HA topology (two kube-scheduler + gang-extender pairs, leader election on both, tests/e2e/ha.py's 4 s
Leases) for ``SECONDS`` (55 s; ``CHURN_CI_SECONDS`` to change it): gangs of 2-6 (annotations and
PodGroups, a third with a gated last member lifted 1-6 s later) and plain pods keep arriving, members of
gangs waiting at the barrier are deleted and re-created under their names, and the leading pair is
killed (SIGKILL) 3-8 s after each takeover (3-4 kills in 55 s). Asserted (``churn.problems``): every gang
bound whole or deleted after it was whole, none partly bound beyond 2 s (or the takeover + 5 s when a
kill cut it; or, where the API server refused one of the release's Bindings because the churner had just
deleted that member, reported and repaired), no over-commit (the pod watch replayed, sampled every 2 s,
at the end), no zombie bind (a Binding the extender sent for a request kube-scheduler no longer waited
for, judged by the binding tap's time against both proxies' records), no pod deleted but by the harness
(audit log); and that the system ran: gangs completed, members replaced while held, at least two kills,
binds in every 10 s interval that no takeover reaches, no pause in bindings longer than the slowest
takeover + ``PAUSE_MARGIN``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from churn import AuditedControlPlane, churn_soak, problems, summary

pytestmark = pytest.mark.e2e

SECONDS = float(os.environ.get("CHURN_CI_SECONDS", "55"))
PAUSE_MARGIN = 10.0  # seconds without a binding allowed beyond the slowest takeover (measured gaps: <= 3 s more)


def test_the_barrier_holds_under_churn_and_leader_kills(k8s_bin_dir: Path, tmp_path: Path) -> None:
    keep = os.environ.get("GANG_E2E_KEEP", "") not in ("", "0")
    with AuditedControlPlane(k8s_bin_dir, log=print, keep=keep) as cp:
        figures = churn_soak(cp, "churn", tmp_path, seconds=SECONDS, seed=7, log=print, leases="test",
                             kill_gap=(3.0, 8.0), converge_seconds=90.0)
    print(json.dumps(figures, indent=1, default=str))
    print(f"[e2e] churn: {summary(figures)}")
    assert problems(figures) == [], problems(figures)
    assert figures["audit"] is True, "the API server's audit log was not written"
    assert figures["gangs_completed"] >= 10, figures["gangs_completed"]
    assert figures["replaced_while_held"] >= 3, figures["replaced"]
    assert figures["kills"] >= 2, figures["kills"]
    rows = figures["activity"]["per_interval"]
    # binds in every full interval that no takeover reaches (one starts in an interval with a kill and
    # ends within the next: takeovers take 4-8 s, intervals 10 s)
    quiet = [row for i, row in enumerate(rows) if row["seconds"] >= 10 and row["kills"] == 0
             and (i == 0 or rows[i - 1]["kills"] == 0)]
    assert all(row["bind_requests"] > 0 and row["bindings"] > 0 for row in quiet), rows
    slowest = figures["takeover_first_bind_s"]["max"]
    assert figures["activity"]["longest_without_binding_s"] <= slowest + PAUSE_MARGIN, figures["activity"]
