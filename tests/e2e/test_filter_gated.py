"""The filter-gated mode end to end: a real kube-scheduler v1.35, gang-extender as a filter only
(``--bind-mode filter-gated``), and a second real HTTP extender that is the binder (``binder.py``).

The extenders list is the shipped ``manifests/scheduler-config-filter-gated.yaml`` with the binder's
entry after gang-extender's, as docs/deploy.md says. Checked after every scenario: no node
over-committed, every member placed on a node gang-extender's last filter reply offered it.

What the mode claims, and what it does not: a gang's members are let through filter only once the gang
is admitted, each to one reserved place, so the binder binds a whole gang unless one of its binds fails
(then the gang is partly bound: reported, and the rest planned again). With no bind-time barrier the
members bind one scheduling cycle after another, so a gang is briefly part-bound on its way to whole:
``MAX_SPREAD`` bounds that.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from binder import BinderExtender, binder_extender
from controlplane import ControlPlane, wait_for
from support import (
    E2E_GANG_TIMEOUT,
    ROOT,
    WAIT,
    Extender,
    Sampler,
    all_bound,
    bound,
    create,
    events,
    overcommitted_nodes,
    placements_outside_filter_replies,
    pod,
    pod_spec,
    scenario,
    stays_unbound,
)

pytestmark = pytest.mark.e2e

MAX_SPREAD = 5.0  # seconds from a gang's first bind to its last (members bind cycle by cycle)


def gated_config(extender_url: str, *binders: dict[str, Any]) -> dict[str, Any]:
    """The shipped filter-gated configuration pointed at ``extender_url``, then ``binders``' entries."""
    config: dict[str, Any] = yaml.safe_load((ROOT / "manifests" / "scheduler-config-filter-gated.yaml").read_text())
    (entry,) = config["extenders"]
    assert "bindVerb" not in entry
    entry["urlPrefix"] = extender_url
    config["extenders"] = [entry, *binders]
    return config


@pytest.fixture(scope="module")
def gated(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    cp = control_plane
    ext = Extender(cp.kubeconfig, tmp_path_factory.mktemp("gated"), log=print,
                   args=["--bind-mode", "filter-gated", "--gang-timeout-seconds", str(E2E_GANG_TIMEOUT),
                         "--gang-backoff-seconds", "2", "--log-level", "INFO"])
    ext.start()
    with binder_extender(cp) as binder:
        cp.start_scheduler(gated_config(ext.url, binder.config_entry()))
        try:
            yield {"cp": cp, "ext": ext, "binder": binder}
        finally:
            cp.stop_scheduler()
            ext.stop()
            print(f"[e2e] extender log: {ext.log_path}")


@pytest.fixture(autouse=True)
def invariants(gated: dict[str, Any]) -> Iterator[None]:
    yield
    cp: ControlPlane = gated["cp"]
    assert overcommitted_nodes(cp) == []
    placed = {(p["metadata"]["namespace"], p["metadata"]["name"]): p["spec"]["nodeName"]
              for p in cp.request("GET", "/api/v1/pods")["items"] if p["spec"].get("nodeName")}
    assert placements_outside_filter_replies(gated["ext"].record_path, placed) == []


def gang(ns: str, name: str, count: int, selector: dict[str, str], *, cpu: str, min_count: int | None = None
         ) -> list[dict[str, Any]]:
    annotations = {"gang-extender.io/group": name, "gang-extender.io/min-count": str(min_count or count)}
    return [pod(ns, f"{name}-{i}", pod_spec(cpu=cpu, selector=selector), annotations=annotations)
            for i in range(count)]


def spread(sampler: Sampler, prefix: str, count: int) -> float:
    """Seconds from the first sample with a member of ``prefix`` bound to the first with ``count``."""
    times = [(at, sum(1 for n in s if n.startswith(prefix))) for at, s in sampler.samples]
    first = next(at for at, n in times if n > 0)
    whole = next(at for at, n in times if n >= count)
    seconds = whole - first
    print(f"[e2e] gang {prefix}*: first bind to whole in {seconds:.2f}s")
    return seconds


def test_the_binder_binds_a_gang_whole_on_the_places_gang_extender_chose(gated: dict[str, Any]) -> None:
    cp: ControlPlane = gated["cp"]
    binder: BinderExtender = gated["binder"]
    ns, labels, nodes = scenario(cp, "g1-whole", 2)
    with Sampler(cp, ns) as sampler:
        create(cp, *gang(ns, "a", 4, labels, cpu="2"))
        placed = all_bound(cp, ns, "a-", 4, nodes)
    assert {k for k in binder.bound if k.startswith(f"{ns}/")} == {f"{ns}/a-{i}" for i in range(4)}
    # gang-extender stands before the binder: the binder saw only the one place reserved for the member
    for name, node in placed.items():
        assert binder.offered[f"{ns}/{name}"][-1] == [node], binder.offered[f"{ns}/{name}"]
    assert spread(sampler, "a-", 4) < MAX_SPREAD
    wait_for(lambda: len(events(cp, ns, "GangBound")) >= 1, timeout=10, what="the GangBound Event")
    assert events(cp, ns, "GangPartiallyBound") == []


def test_an_incomplete_gang_reaches_no_binder_until_its_quorum_exists(gated: dict[str, Any]) -> None:
    cp: ControlPlane = gated["cp"]
    binder: BinderExtender = gated["binder"]
    ns, labels, nodes = scenario(cp, "g2-quorum", 2)
    members = gang(ns, "b", 4, labels, cpu="1")
    create(cp, *members[:3])
    stays_unbound(cp, ns, "b-", 5)
    assert not [k for k in binder.offered if k.startswith(f"{ns}/")]  # filtered out before the binder
    with Sampler(cp, ns) as sampler:
        create(cp, members[3])
        all_bound(cp, ns, "b-", 4, nodes)
    assert spread(sampler, "b-", 4) < MAX_SPREAD


def test_two_gangs_that_do_not_fit_together_take_turns_whole(gated: dict[str, Any]) -> None:
    cp: ControlPlane = gated["cp"]
    ns, labels, nodes = scenario(cp, "g3-turns", 4)
    with Sampler(cp, ns) as sampler:
        create(cp, *gang(ns, "c", 4, labels, cpu="3"), *gang(ns, "d", 4, labels, cpu="3"))
        wait_for(lambda: len(bound(cp, ns)) == 4, timeout=WAIT, what="one gang bound")
        first = "c-" if "c-0" in bound(cp, ns) else "d-"
        second = "d-" if first == "c-" else "c-"
        stays_unbound(cp, ns, second, 3)
        for name in bound(cp, ns, first):  # the first job finished
            cp.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}?gracePeriodSeconds=0")
        all_bound(cp, ns, second, 4, nodes)
    assert spread(sampler, first, 4) < MAX_SPREAD and spread(sampler, second, 4) < MAX_SPREAD
    assert sampler.max_bound(first) == 4 and sampler.max_bound(second) == 4


def test_a_bind_the_binder_refuses_leaves_a_partial_gang_that_is_reported_then_finished(
        gated: dict[str, Any]) -> None:
    """The binder refuses one member: the gang stays partly bound (no barrier in this mode); at its
    timeout it is told (Warning GangPartiallyBound, counter); once the binder accepts again, the missing
    member is planned again around the bound ones and the gang completes."""
    cp: ControlPlane = gated["cp"]
    ext: Extender = gated["ext"]
    binder: BinderExtender = gated["binder"]
    ns, labels, nodes = scenario(cp, "g4-partial", 3)
    binder.refuse.add(f"{ns}/e-2")
    before = ext.metrics().get("gang_extender_gangs_partially_bound_total", 0.0)
    create(cp, *gang(ns, "e", 3, labels, cpu="3"))
    wait_for(lambda: len(bound(cp, ns, "e-")) == 2, timeout=WAIT, what="two of three bound")
    wait_for(lambda: events(cp, ns, "GangPartiallyBound") != [], timeout=E2E_GANG_TIMEOUT + WAIT,
             what="the GangPartiallyBound Event")
    (message,) = {e["message"] for e in events(cp, ns, "GangPartiallyBound")}
    assert "2 of 3 members are bound" in message, message
    assert binder.refused[f"{ns}/e-2"] >= 1 and len(bound(cp, ns, "e-")) == 2
    assert ext.metrics()["gang_extender_gangs_partially_bound_total"] == before + 1
    binder.refuse.clear()
    all_bound(cp, ns, "e-", 3, nodes)
    wait_for(lambda: events(cp, ns, "GangBound") != [], timeout=10, what="the GangBound Event")


def test_kube_schedulers_own_binder_with_the_shipped_configuration(gated: dict[str, Any], tmp_path: Path) -> None:
    """No binding extender at all: kube-scheduler's DefaultBinder binds what gang-extender lets through."""
    cp: ControlPlane = gated["cp"]
    binder: BinderExtender = gated["binder"]
    cp.stop_scheduler()
    cp.start_scheduler(gated_config(gated["ext"].url))
    ns, labels, nodes = scenario(cp, "g5-default-binder", 2)
    members = gang(ns, "f", 3, labels, cpu="2")
    create(cp, *members[:2])
    stays_unbound(cp, ns, "f-", 3)
    with Sampler(cp, ns) as sampler:
        create(cp, members[2])
        all_bound(cp, ns, "f-", 3, nodes)
    assert spread(sampler, "f-", 3) < MAX_SPREAD
    assert not [k for k in binder.bound if k.startswith(f"{ns}/")]
