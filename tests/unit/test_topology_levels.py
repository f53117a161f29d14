"""Kueue Topology objects as a level source (cluster/levels.py, wiring/kueue.py): parsing them, the rule
that picks a gang's level order, discovery of the API, and a preferred gang falling back through the
engine along a Topology's levels.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from extender.cluster.levels import KueueTopology, Rejected, TopologyLevels, parse_topology
from extender.cluster.topology_constraints import ANNOTATION_PREFERRED
from extender.errors import KubeError
from extender.labelkeys import HOSTNAME
from extender.model.gang import TopologyConstraint
from extender.wiring.kueue import TopologyWatch
from tests.builders import Harness, coscheduling_podgroup, filter_args, make_engine, node, pod

ZONE, BLOCK, RACK = "topology.kubernetes.io/zone", "example.com/block", "example.com/rack"


def topology(name: str, *keys: object, version: str = "v1beta1") -> dict[str, Any]:
    return {"apiVersion": f"kueue.x-k8s.io/{version}", "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": key} for key in keys]}}


# ------------------------------------------------------------------------------ parsing
def test_a_topology_parses_into_its_name_and_levels_widest_first() -> None:
    assert parse_topology(topology("dc", ZONE, BLOCK, RACK, HOSTNAME)) == KueueTopology(
        "dc", (ZONE, BLOCK, RACK, HOSTNAME))
    assert parse_topology(topology("old", BLOCK, version="v1alpha1")) == KueueTopology("old", (BLOCK,))


@pytest.mark.parametrize(("obj", "name", "message"), [
    ("not an object", "", "must be an object"),
    ({"spec": {"levels": [{"nodeLabel": RACK}]}}, "", "without metadata.name"),
    ({"metadata": {"name": "no-spec"}}, "no-spec", "spec.levels must be a non-empty list"),
    (topology("empty"), "empty", "spec.levels must be a non-empty list"),
    ({"metadata": {"name": "odd"}, "spec": {"levels": "rack"}}, "odd", "spec.levels must be a non-empty list"),
    ({"metadata": {"name": "nolabel"}, "spec": {"levels": [{}]}}, "nolabel", "spec.levels[0].nodeLabel"),
    (topology("badkey", BLOCK, "/rack"), "badkey", "spec.levels[1].nodeLabel: '/rack' is not a valid label key"),
    (topology("twice", RACK, RACK), "twice", "'example.com/rack' is listed twice"),
    (topology("host", HOSTNAME, RACK), "host", "may only be the last"),
    (topology("number", 7), "number", "must be a string"),
])
def test_a_malformed_topology_is_rejected_with_the_reason_never_raised(obj: object, name: str, message: str) -> None:
    rejected = parse_topology(obj)
    assert isinstance(rejected, Rejected) and rejected.name == name and message in rejected.message


def test_the_holder_skips_and_counts_bad_objects_and_follows_watch_events() -> None:
    levels = TopologyLevels()
    rejected = levels.replace([topology("a", BLOCK, RACK), topology("bad", "/x"), "junk"])
    assert [r.name for r in rejected] == ["bad", ""] and levels.rejected == 2
    assert levels.topologies() == {"a": (BLOCK, RACK)} and "bad" in levels.problems
    assert levels.apply("ADDED", topology("b", ZONE, RACK)) == [] and set(levels.topologies()) == {"a", "b"}
    assert levels.apply("MODIFIED", topology("a", "/broken"))  # an update gone bad forgets the old levels
    assert set(levels.topologies()) == {"b"} and levels.rejected == 3
    assert levels.apply("DELETED", {"metadata": {"name": "b"}}) == [] and levels.topologies() == {}
    assert levels.apply("DELETED", "junk") == []  # nothing to forget, nothing raised


# ------------------------------------------------------------------------------ the rule
def preferred(key: str) -> TopologyConstraint:
    return TopologyConstraint(preferred=key)


def test_the_static_levels_win_when_they_contain_the_key() -> None:
    levels = TopologyLevels((ZONE, RACK))
    levels.replace([topology("kueue", ZONE, BLOCK, RACK)])
    assert levels.levels_for(preferred(RACK)) == (ZONE, RACK)
    assert levels.levels_for(preferred(HOSTNAME)) == (ZONE, RACK)  # the hostname level is implied
    assert levels.levels_for(preferred(BLOCK)) == (ZONE, BLOCK, RACK)  # not in the static levels
    assert levels.levels_for(TopologyConstraint()) == (ZONE, RACK)


def test_a_kueue_topology_is_chosen_by_its_keys_then_most_levels_then_name() -> None:
    levels = TopologyLevels()
    assert levels.levels_for(preferred(RACK)) == ()
    levels.replace([topology("short", BLOCK, RACK), topology("zz-long", ZONE, BLOCK, RACK),
                    topology("aa-long", "example.com/pod", BLOCK, RACK), topology("other", "example.com/x")])
    assert levels.levels_for(preferred(RACK)) == ("example.com/pod", BLOCK, RACK)  # 3 levels; aa- before zz-
    assert levels.levels_for(preferred("example.com/x")) == ("example.com/x",)
    assert levels.levels_for(preferred("example.com/none")) == ()
    both = TopologyConstraint(required=ZONE, preferred=RACK)  # every key of the constraint must be a level
    assert levels.levels_for(both) == (ZONE, BLOCK, RACK)
    levels.apply("DELETED", topology("zz-long"))
    assert levels.levels_for(both) == ()


# ------------------------------------------------------------------------------ discovery
class FakeServer:
    def __init__(self) -> None:
        self.served: set[tuple[str, str, str]] = set()
        self.fail = False
        self.asked: list[str] = []

    def serves(self, group: str, version: str, resource: str) -> bool:
        self.asked.append(version)
        if self.fail:
            raise KubeError("discovery failed")
        return (group, version, resource) in self.served


def test_the_topology_api_is_watched_at_its_newest_served_version_and_dropped_when_gone() -> None:
    server, log = FakeServer(), []
    watch = TopologyWatch(server.serves, lambda v: log.append(f"start {v}") or v,  # type: ignore[func-returns-value]
                          lambda r: log.append(f"stop {r}"))
    assert watch.discover() == [] and server.asked == ["v1", "v1beta2", "v1beta1", "v1alpha1"]
    server.served = {("kueue.x-k8s.io", "v1alpha1", "topologies"), ("kueue.x-k8s.io", "v1beta1", "topologies")}
    assert watch.discover() == ["+topologies.kueue.x-k8s.io/v1beta1"] and watch.discover() == []
    server.fail = True
    with pytest.raises(KubeError):
        watch.discover()
    assert watch.version() == "v1beta1"  # a failed round keeps the watch
    server.fail, server.served = False, {("kueue.x-k8s.io", "v1beta2", "topologies")}
    assert watch.discover() == ["-topologies.kueue.x-k8s.io/v1beta1", "+topologies.kueue.x-k8s.io/v1beta2"]
    server.served = set()
    assert watch.discover() == ["-topologies.kueue.x-k8s.io/v1beta2"] and watch.version() is None
    assert log == ["start v1beta1", "stop v1beta1", "start v1beta2", "stop v1beta2"]


# ------------------------------------------------------------------------------ through the engine
def labels(zone: int, block: int, rack: int) -> dict[str, str]:
    return {ZONE: f"z{zone}", BLOCK: f"z{zone}b{block}", RACK: f"z{zone}b{block}r{rack}"}


NODES = {f"n-{z}{b}{r}{i}": labels(z, b, r) for z in range(2) for b in range(2) for r in range(2) for i in range(2)}


@pytest.fixture
def kueue() -> Iterator[tuple[Harness, TopologyLevels]]:
    """No --topology-levels: the only level order is what Kueue Topologies give."""
    levels = TopologyLevels()
    harness = make_engine(bind_to_mirror=True, levels_for=levels.levels_for)
    harness.add(*(node(name, cpu="4", labels=node_labels) for name, node_labels in NODES.items()))
    yield harness, levels
    harness.binder.gate.set()
    harness.close()


def place_preferred_rack_gang(h: Harness, name: str) -> str:
    """A gang of 3 x 3 cpu preferring one rack (2 nodes of 4 cpu: no rack holds it); its domain."""
    members = [pod(f"{name}-{i}", cpu="3", pod_group=name, annotations={ANNOTATION_PREFERRED: RACK})
               for i in range(3)]
    h.add(coscheduling_podgroup(name, 3), *members)
    h.engine.filter(filter_args(members[0], sorted(NODES)))
    [explained] = h.engine.explain("default", name)
    return str(explained["topology"]["domain"])


def test_a_preferred_rack_gang_falls_back_to_a_block_by_a_kueue_topology(
        kueue: tuple[Harness, TopologyLevels]) -> None:
    h, levels = kueue
    levels.replace([topology("dc", ZONE, BLOCK, RACK, HOSTNAME)])
    domain = place_preferred_rack_gang(h, "pref")
    assert domain.startswith(f"{BLOCK}=")
    key = h.mirror.pod("default", "pref-0").gang
    assert key is not None and len({NODES[n][BLOCK] for n in h.mirror.reservation(key)}) == 1
    fallback = h.events.of("GangTopologyFallback")[0][3]
    assert f"no {RACK} domain could hold it" in fallback and f"{BLOCK}=" in fallback


def test_once_the_topology_is_deleted_a_preferred_gang_goes_across_domains(
        kueue: tuple[Harness, TopologyLevels]) -> None:
    h, levels = kueue
    levels.replace([topology("dc", ZONE, BLOCK, RACK, HOSTNAME), topology("elsewhere", ZONE, "example.com/row")])
    levels.apply("DELETED", topology("dc"))
    assert place_preferred_rack_gang(h, "pref") == "across domains"
