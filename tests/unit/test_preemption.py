"""The preempt verb in the engine: kube-scheduler's per-pod preemption never fires for a gang member of
an incomplete gang and never evicts members of a gang; plain victims pass; the request is believed for
nothing (unknown nodes and victims not on their node drop the node)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from extender.engine.requests import PreemptArgs, PreemptResult, Victims
from tests.builders import Harness, coscheduling_podgroup, make_engine, node, pod, workload


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = make_engine()
    harness.add(*(node(name, cpu="4") for name in ("n1", "n2", "n3")))
    yield harness
    harness.close()


def uid(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["uid"])


def preempt(h: Harness, preemptor: dict[str, Any], victims: dict[str, list[dict[str, Any]]],
            pdb: int = 0) -> PreemptResult:
    args = PreemptArgs(preemptor, {name: Victims(tuple(uid(p) for p in pods), pdb) for name, pods in victims.items()})
    return h.engine.preempt(args)


def running_gang(h: Harness, name: str, nodes: list[str]) -> list[dict[str, Any]]:
    """A complete gang (minCount == members) with one bound member per listed node."""
    members = [pod(f"{name}-{i}", cpu="2", pod_group=name, node=where) for i, where in enumerate(nodes)]
    h.add(coscheduling_podgroup(name, len(nodes)), *members)
    return members


def test_member_of_a_waiting_gang_is_vetoed(h: Harness) -> None:
    h.add(coscheduling_podgroup("train", 3))
    member = pod("train-0", cpu="4", pod_group="train")
    plain = pod("web", cpu="2", node="n1")
    h.add(member, plain)
    result = preempt(h, member, {"n1": [plain]})
    assert result.kept == {}
    assert "not complete (0/3 members placed)" in result.dropped["n1"]


def test_member_of_an_unseen_group_is_vetoed(h: Harness) -> None:
    plain = pod("web", cpu="2", node="n1")
    h.add(plain)
    result = preempt(h, pod("ghost-0", pod_group="ghost"), {"n1": [plain]})
    assert result.kept == {}
    assert "not defined yet" in result.dropped["n1"]


def test_member_of_a_complete_gang_may_preempt_plain_pods(h: Harness) -> None:
    running_gang(h, "done", ["n1", "n2"])
    plain = pod("web", cpu="2", node="n3")
    h.add(plain)
    replacement = pod("done-9", cpu="2", pod_group="done")
    assert preempt(h, replacement, {"n3": [plain]}).kept == {"n3": Victims((uid(plain),), 0)}


def test_nodes_whose_victims_include_a_gang_member_are_dropped(h: Harness) -> None:
    members = running_gang(h, "job", ["n1", "n2"])
    plain1, plain3 = pod("web-1", cpu="1", node="n1"), pod("web-3", cpu="1", node="n3")
    h.add(plain1, plain3)
    result = preempt(h, pod("urgent", cpu="4"), {"n1": [plain1, members[0]], "n2": [members[1]],
                                                 "n3": [plain3]}, pdb=1)
    assert result.kept == {"n3": Victims((uid(plain3),), 1)}  # plain victims and their PDB count unchanged
    assert sorted(result.dropped) == ["n1", "n2"]
    assert "member of a gang (default/job" in result.dropped["n1"]


def test_a_whole_gang_on_one_node_is_still_not_evicted_by_kube_scheduler(h: Harness) -> None:
    members = running_gang(h, "pair", ["n1", "n1"])
    result = preempt(h, pod("urgent", cpu="4"), {"n1": members})
    assert result.kept == {}


def test_unknown_node_and_victims_not_on_their_node_drop_the_node(h: Harness) -> None:
    on_n1, on_n2 = pod("web-1", cpu="1", node="n1"), pod("web-2", cpu="1", node="n2")
    h.add(on_n1, on_n2, node("n4"))
    unseen = pod("unseen", cpu="1", node="n3")  # never added to the mirror
    result = preempt(h, pod("urgent", cpu="4"), {"n1": [on_n2], "n2": [on_n2], "n3": [unseen],
                                                 "nowhere": [on_n1], "n4": []})
    assert result.kept == {"n2": Victims((uid(on_n2),), 0)}
    assert set(result.dropped) == {"n1", "n3", "nowhere", "n4"}
    assert result.dropped["nowhere"] == "node is not known to gang-extender"
    assert "is not a pod gang-extender knows on this node" in result.dropped["n1"]
    assert "is not a pod gang-extender knows on this node" in result.dropped["n3"]
    assert result.dropped["n4"].startswith("no victims on the node")


def test_a_member_of_a_basic_group_is_a_plain_victim(h: Harness) -> None:
    h.add(workload("svc", {"web": None}))
    basic = pod("svc-0", cpu="1", workload="svc", pod_group="web", node="n1")
    h.add(basic)
    assert preempt(h, pod("urgent", cpu="4"), {"n1": [basic]}).kept == {"n1": Victims((uid(basic),), 0)}
