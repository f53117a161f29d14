"""Leader kills on two kube-scheduler + gang-extender pairs with leader election (the long run with the
figures: ``make ha``, hack/ha.py; scenario and figures: ha.py).

Four kills of the leading pair, two at random moments and two aimed inside a gang's release, while gangs
and plain pods keep arriving. Asserted: after each kill the other kube-scheduler and its extender take
over; no pod is answered OK for two nodes or for a node it never reached; no node is ever over-committed
(the pod watch replayed); no gang stays partly bound longer than the takeover time plus 5 s; every pod
is bound at the end.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from controlplane import ControlPlane
from ha import leader_kills, problems

pytestmark = pytest.mark.e2e


def test_the_standby_takes_over_when_the_leader_is_killed(control_plane: ControlPlane, tmp_path: Path) -> None:
    figures = leader_kills(control_plane, "ha", tmp_path, kills=4, seed=11, log=print)
    print(json.dumps(figures, indent=1))
    assert problems(figures) == [], figures
    assert figures["kills"] == 4 and figures["aimed"] == 2, figures
    assert figures["unplanned_restarts"] == [], figures
