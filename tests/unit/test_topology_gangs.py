"""Topology constraints through the engine: admission by domain, members kept in it, fail fast,
fallback, bad constraints, and what explain shows.

The cluster: 2 zones x 2 blocks x 2 racks x 2 nodes of 4 cpu (16 nodes), labelled
``topology.kubernetes.io/zone``, ``example.com/block``, ``example.com/rack``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from extender.cluster.topology_constraints import ANNOTATION_PREFERRED, ANNOTATION_REQUIRED
from tests.builders import Harness, bind_args, coscheduling_podgroup, filter_args, make_engine, node, pod

ZONE, BLOCK, RACK = "topology.kubernetes.io/zone", "example.com/block", "example.com/rack"
LEVELS = (ZONE, BLOCK, RACK)


def labels(zone: int, block: int, rack: int) -> dict[str, str]:
    return {ZONE: f"z{zone}", BLOCK: f"z{zone}b{block}", RACK: f"z{zone}b{block}r{rack}"}


NODES = {f"n-{z}{b}{r}{i}": labels(z, b, r) for z in range(2) for b in range(2) for r in range(2) for i in range(2)}
NAMES = sorted(NODES)


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = make_engine(timeout_seconds=30.0, backoff_seconds=10.0, bind_to_mirror=True, topology_levels=LEVELS)
    harness.add(*(node(name, cpu="4", labels=node_labels) for name, node_labels in NODES.items()))
    yield harness
    harness.binder.gate.set()
    harness.close()


def gang(h: Harness, name: str, count: int, min_count: int, cpu: str = "3", **annotations: str) -> list[dict[str, Any]]:
    members = [pod(f"{name}-{i}", cpu=cpu, pod_group=name, annotations=annotations or None) for i in range(count)]
    h.add(coscheduling_podgroup(name, min_count), *members)
    return members


def rack_of(name: str) -> str:
    return NODES[name][RACK]


def bind_all(h: Harness, members: list[dict[str, Any]], nodes: list[str]) -> dict[str, str]:
    """Bind each member to its node from its own thread (held binds wait for their quorum)."""
    results: dict[str, str] = {}

    def run(raw: dict[str, Any], target: str) -> None:
        results[raw["metadata"]["name"]] = h.engine.bind(bind_args(raw, target))

    threads = [threading.Thread(target=run, args=(m, n)) for m, n in zip(members, nodes, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    return results


def test_a_required_rack_gang_is_reserved_in_one_rack_and_steered_there(h: Harness) -> None:
    members = gang(h, "rack", 2, 2, **{ANNOTATION_REQUIRED: RACK})
    result = h.engine.filter(filter_args(members[0], NAMES))
    reserved = sorted(h.mirror.reservation(h.mirror.pod("default", "rack-0").gang))  # type: ignore[arg-type]
    assert len(reserved) == 2 and len({rack_of(n) for n in reserved}) == 1
    assert set(result.feasible) <= set(reserved) and result.feasible


def test_members_beyond_min_count_stay_in_the_gang_domain(h: Harness) -> None:
    members = gang(h, "beyond", 3, 2, cpu="2", **{ANNOTATION_REQUIRED: RACK})
    first = h.engine.filter(filter_args(members[0], NAMES)).feasible
    second = h.engine.filter(filter_args(members[1], NAMES)).feasible
    assert bind_all(h, members[:2], [first[0], second[0]]) == {"beyond-0": "", "beyond-1": ""}
    rack = rack_of(first[0])
    # The gang is complete. Its third member (2 cpu) fits on every node of the other racks, and on its
    # own rack's: only those may take it.
    result = h.engine.filter(filter_args(members[2], NAMES))
    assert result.feasible and all(rack_of(n) == rack for n in result.feasible)
    outside = [n for n in NAMES if rack_of(n) != rack]
    assert not set(outside) & (set(result.feasible) | set(result.failed))  # left out, like steering
    error = bind_all(h, [members[2]], [outside[0]])["beyond-2"]
    assert f"is outside gang default/beyond's topology domain {RACK}={rack}" in error
    # With its own rack full, every other node says why it is not feasible.
    inside = [n for n in NAMES if rack_of(n) == rack]
    h.add(*(pod(f"filler-{n}", cpu="4", node=n) for n in inside))
    full = h.engine.filter(filter_args(members[2], NAMES))
    assert not full.feasible
    assert all(full.failed[n] == f"outside the topology domain {RACK}={rack} of gang default/beyond" for n in outside)


def test_a_required_rack_no_rack_can_hold_fails_fast_naming_the_largest(h: Harness) -> None:
    members = gang(h, "big", 3, 3, **{ANNOTATION_REQUIRED: RACK})  # 3 x 3 cpu: a rack has 2 nodes of 4
    result = h.engine.filter(filter_args(members[0], NAMES))
    assert not result.feasible
    message = next(iter(result.failed_unresolvable.values()))
    assert "can never fit" in message and f"no {RACK} domain can hold all 3 members even when empty" in message
    assert "GangNeverFits" in h.events.reasons()


def test_a_preferred_rack_that_no_rack_holds_falls_back_to_one_block(h: Harness) -> None:
    members = gang(h, "pref", 3, 3, **{ANNOTATION_PREFERRED: RACK})
    h.engine.filter(filter_args(members[0], NAMES))
    reserved = sorted(h.mirror.reservation(h.mirror.pod("default", "pref-0").gang))  # type: ignore[arg-type]
    assert len(reserved) == 3 and len({NODES[n][BLOCK] for n in reserved}) == 1
    assert "GangTopologyFallback" in h.events.reasons()
    fallback = h.events.of("GangTopologyFallback")[0][3]
    assert f"no {RACK} domain could hold it" in fallback and f"{BLOCK}=" in fallback


@pytest.mark.parametrize(("annotations", "problem"), [
    ({ANNOTATION_REQUIRED: "not a key!"}, "annotation gang-extender.io/topology-required"),
    ({ANNOTATION_REQUIRED: RACK, "kueue.x-k8s.io/podset-required-topology": BLOCK}, "two different required"),
])
def test_an_unusable_constraint_makes_the_gang_wait_and_says_why(h: Harness, annotations: dict[str, str],
                                                                 problem: str) -> None:
    members = gang(h, "bad", 2, 2, **annotations)
    result = h.engine.filter(filter_args(members[0], NAMES))
    assert not result.feasible and not h.mirror.reservation(h.mirror.pod("default", "bad-0").gang)  # type: ignore[arg-type]
    message = next(iter(result.failed_unresolvable.values()))
    assert "topology constraint is unusable" in message and problem in message


def test_members_that_disagree_make_the_gang_wait(h: Harness) -> None:
    first = pod("mixed-0", cpu="1", pod_group="mixed", annotations={ANNOTATION_REQUIRED: RACK})
    second = pod("mixed-1", cpu="1", pod_group="mixed", annotations={ANNOTATION_REQUIRED: BLOCK})
    h.add(coscheduling_podgroup("mixed", 2), first, second)
    message = next(iter(h.engine.filter(filter_args(first, NAMES)).failed_unresolvable.values()))
    assert "members disagree on the required topology key" in message


def test_explain_shows_the_constraint_and_the_domain(h: Harness) -> None:
    members = gang(h, "shown", 2, 2, **{ANNOTATION_REQUIRED: RACK})
    h.engine.filter(filter_args(members[0], NAMES))
    [explained] = h.engine.explain("default", "shown")
    topology = explained["topology"]
    assert topology["constraint"] == f"required {RACK} (gang-extender annotation on the pods)"
    assert topology["domain"].startswith(f"{RACK}=") and topology["level"] == RACK
    assert topology["otherDomains"] and all(o["domain"].startswith(f"{RACK}=") for o in topology["otherDomains"])


def test_a_bind_with_no_filter_before_it_is_still_kept_in_the_domain(h: Harness) -> None:
    """After a restart or a takeover the first request for a gang may be a bind: the domain its bound
    members pin is read from the mirror, not from state this process never built."""
    rack_nodes = [n for n in NAMES if rack_of(n) == "z0b0r0"]
    placed = [pod(f"done-{i}", cpu="1", pod_group="done", node=rack_nodes[i],
                  annotations={ANNOTATION_REQUIRED: RACK}) for i in range(2)]
    late = pod("done-2", cpu="1", pod_group="done", annotations={ANNOTATION_REQUIRED: RACK})
    h.add(coscheduling_podgroup("done", 2), *placed, late)
    elsewhere = next(n for n in NAMES if rack_of(n) != "z0b0r0")
    assert "outside gang default/done's topology domain" in bind_all(h, [late], [elsewhere])["done-2"]
    assert bind_all(h, [late], [rack_nodes[1]]) == {"done-2": ""}


def test_a_preferred_level_under_the_required_key_steers_but_never_excludes(h: Harness) -> None:
    members = gang(h, "zoned", 2, 2, cpu="2", **{ANNOTATION_REQUIRED: ZONE, ANNOTATION_PREFERRED: RACK})
    h.engine.filter(filter_args(members[0], NAMES))
    key = h.mirror.pod("default", "zoned-0").gang
    assert key is not None
    reserved = sorted(h.mirror.reservation(key))
    assert len({rack_of(n) for n in reserved}) == 1  # the preferred rack holds the reservation
    domain = h.ledger.domain_of(key)
    assert domain is not None and domain.keys == (ZONE,) and domain.values == (NODES[reserved[0]][ZONE],)


def test_a_preferred_level_is_chosen_for_every_member_that_exists_not_only_the_quorum(h: Harness) -> None:
    """minCount 2 of 4 members of 3 cpu: a rack (2 nodes of 4 cpu) holds the quorum, not the gang; the
    narrowest level that holds all four is a block, and the quorum is reserved there."""
    members = gang(h, "whole", 4, 2, **{ANNOTATION_PREFERRED: RACK})
    h.engine.filter(filter_args(members[0], NAMES))
    key = h.mirror.pod("default", "whole-0").gang
    assert key is not None
    reserved = sorted(h.mirror.reservation(key))
    assert len(reserved) == 2 and len({NODES[n][BLOCK] for n in reserved}) == 1
    [explained] = h.engine.explain("default", "whole")
    assert explained["topology"]["domain"].startswith(f"{BLOCK}=")
    assert "GangTopologyFallback" in h.events.reasons()


def test_a_held_member_whose_node_left_the_domain_aborts_the_release(h: Harness) -> None:
    """The re-check before a release: a node relabelled out of the gang's rack while a member is held on
    it means nothing of the gang is bound, and it is planned again."""
    members = gang(h, "moved", 2, 2, cpu="3", **{ANNOTATION_REQUIRED: RACK})  # one member per node of a rack
    first = h.engine.filter(filter_args(members[0], NAMES)).feasible[0]
    results: dict[str, str] = {}
    held = threading.Thread(target=lambda: results.update(zero=h.engine.bind(bind_args(members[0], first))),
                            daemon=True)
    held.start()
    deadline = time.monotonic() + 2
    while h.ledger.view.held_count() < 1 and time.monotonic() < deadline:
        time.sleep(0.005)
    h.add(node(first, cpu="4", labels={**NODES[first], RACK: "elsewhere"}))
    second = h.engine.filter(filter_args(members[1], NAMES)).feasible[0]
    results["one"] = h.engine.bind(bind_args(members[1], second))
    held.join(5)
    assert "was not released" in results["zero"] and "outside gang default/moved's topology domain" in results["zero"]
    assert results["one"] == results["zero"]
    assert h.binder.bound_names == []
    assert "GangReleaseAborted" in h.events.reasons()


def test_a_domain_kube_scheduler_never_offers_is_planned_away_after_a_timeout(h: Harness) -> None:
    """kube-scheduler sends only nodes its own filters passed. A required-rack gang reserved where it
    is never offered (its filters reject what the plan does not model) would wait there forever; after
    the attempt times out, the next plan avoids those nodes and finds another rack."""
    members = gang(h, "shunned", 2, 2, cpu="3", **{ANNOTATION_REQUIRED: RACK})
    offered = [n for n in NAMES if rack_of(n) != "z0b0r0"]  # kube-scheduler's own filters reject rack z0b0r0
    h.engine.filter(filter_args(members[0], offered))
    key = h.mirror.pod("default", "shunned-0").gang
    assert key is not None
    first = set(h.mirror.reservation(key))
    assert {rack_of(n) for n in first} == {"z0b0r0"}  # the tightest rack (all are empty: by name)
    for member in members:  # kube-scheduler keeps offering every node but the reserved ones
        result = h.engine.filter(filter_args(member, offered))
        assert not result.feasible  # outside the reserved rack: not allowed
    h.clock.advance(31)
    h.engine.sweep()
    [timeout] = [e[3] for e in h.events.of("GangTimeout")]
    assert "kube-scheduler never offered its reserved node(s)" in timeout and sorted(first)[0] in timeout
    h.clock.advance(11)  # the back-off
    h.engine.filter(filter_args(members[0], offered))
    again = set(h.mirror.reservation(key))
    assert again and not again & first and len({rack_of(n) for n in again}) == 1


def test_one_request_is_not_evidence_enough_to_avoid_a_node(h: Harness) -> None:
    members = gang(h, "once", 2, 2, cpu="3", **{ANNOTATION_REQUIRED: RACK})
    h.engine.filter(filter_args(members[0], [n for n in NAMES if rack_of(n) != "z0b0r0"]))  # one request only
    key = h.mirror.pod("default", "once-0").gang
    assert key is not None
    first = set(h.mirror.reservation(key))
    h.clock.advance(31)
    h.engine.sweep()
    assert "never offered" not in h.events.of("GangTimeout")[0][3]
    h.clock.advance(11)
    h.engine.filter(filter_args(members[0], NAMES))
    assert set(h.mirror.reservation(key)) == first  # the same (tightest) rack again


def test_nodes_never_offered_accumulate_over_timeouts_until_a_good_domain_is_found(h: Harness) -> None:
    """Two racks kube-scheduler rejects: the second plan avoids the first, the third avoids both (the
    avoided nodes add up until an attempt succeeds) rather than going back and forth between them."""
    members = gang(h, "picky", 2, 2, cpu="3", **{ANNOTATION_REQUIRED: RACK})
    offered = [n for n in NAMES if rack_of(n) not in ("z0b0r0", "z0b0r1")]
    key = None
    racks_planned = []
    for _ in range(3):
        for member in members:
            h.engine.filter(filter_args(member, offered))
        key = key or h.mirror.pod("default", "picky-0").gang
        assert key is not None
        racks_planned.append({rack_of(n) for n in h.mirror.reservation(key)})
        h.clock.advance(31)
        h.engine.sweep()
        h.clock.advance(300)  # past any back-off
    assert racks_planned[:2] == [{"z0b0r0"}, {"z0b0r1"}]
    assert racks_planned[2] and racks_planned[2].isdisjoint({"z0b0r0", "z0b0r1"})


def test_avoiding_is_a_preference_a_gang_that_fits_only_there_is_still_planned_there(h: Harness) -> None:
    """When every rack but the avoided one is full, the plan takes the avoided one rather than wait."""
    members = gang(h, "only", 2, 2, cpu="3", **{ANNOTATION_REQUIRED: RACK})
    others = [n for n in NAMES if rack_of(n) != "z0b0r0"]
    for member in members:
        h.engine.filter(filter_args(member, others))
    key = h.mirror.pod("default", "only-0").gang
    assert key is not None and {rack_of(n) for n in h.mirror.reservation(key)} == {"z0b0r0"}
    h.clock.advance(31)
    h.engine.sweep()
    h.add(*(pod(f"full-{n}", cpu="4", node=n) for n in others))  # every other rack fills up
    h.clock.advance(300)
    h.engine.filter(filter_args(members[0], NAMES))
    assert {rack_of(n) for n in h.mirror.reservation(key)} == {"z0b0r0"}


def test_pods_kueue_placed_keep_the_rack_its_node_selector_names(h: Harness) -> None:
    """Kueue's own topology scheduling injects a nodeSelector for the domain it chose: gang-extender
    honours it like any selector and plans inside that rack, not the tightest one it would pick."""
    chosen = "z1b1r1"
    members = [pod(f"kq-{i}", cpu="3", pod_group="kq", node_selector={RACK: chosen},
                   annotations={"kueue.x-k8s.io/podset-required-topology": RACK}) for i in range(2)]
    h.add(coscheduling_podgroup("kq", 2), *members)
    result = h.engine.filter(filter_args(members[0], NAMES))
    key = h.mirror.pod("default", "kq-0").gang
    assert key is not None and {rack_of(n) for n in h.mirror.reservation(key)} == {chosen}
    assert result.feasible and all(rack_of(n) == chosen for n in result.feasible)
