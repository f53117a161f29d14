"""``kubectl gang fit`` against a real kube-scheduler v1.35, gang-extender and kwok: for each answer, the
plugin (as a kubectl plugin, as a user bound only to the shipped fit role) answers before the gang
exists, then the same file is applied and gang-extender does what fit said:

- fits now: bound whole on the nodes fit named, in the rack fit named;
- fits after preemption: the victims fit named (a whole lower-priority gang) are the ones evicted;
- fits after capacity: the extender's ``POST /fit`` says the same; once submitted, nothing binds and
  ``explain``'s smallest fix (its JSON and the published ``kubectl gang explain``) names the same nodes;
  once the nodes fit asked for are added, the gang binds;
- never: ``GangNeverFits`` on the group object with fit's reason word for word (kube-scheduler's own
  resource filter rejects the members before the extender is called);
- fits after the gangs ahead: it waits behind the gang fit named.

A user bound to nothing gets a clear refusal naming the fit role. Each test has its own namespace and
kwok pool and deletes its gangs at the end (only the head of the order preempts).
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from controlplane import ControlPlane, wait_for
from gangctl import KUBECTL_GANG, kubectl_gang, reader_kubeconfig
from identities import MANIFESTS
from kwok_harness import Kwok
from support import WAIT, Extender, bound, create, events, pod, pods, scheduling_with_extender

pytestmark = pytest.mark.e2e

RACK = "example.com/rack"
FIT_ROLE = MANIFESTS / "rbac" / "kubectl-gang-fit.yaml"
GRACE = 1
LEDGER = "gang-extender.io/ledger-state"
CAPTURED: dict[str, str] = {}
"""The plugin's text answers, printed at the end (docs/gang-semantics.md and the README show them)."""


@pytest.fixture(scope="module")
def bed(control_plane: ControlPlane, kwok: Kwok, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[dict[str, Any]]:
    workdir = tmp_path_factory.mktemp("fit")
    home = workdir / "home"
    home.mkdir()
    (workdir / "ext").mkdir()
    control_plane.kubectl("apply", "-f", str(FIT_ROLE))
    fit_role = yaml.safe_load(FIT_ROLE.read_text())["metadata"]["name"]
    for name, value in (("fit-low", 10), ("fit-high", 1000)):
        create(control_plane, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                               "metadata": {"name": name}, "value": value})
    with scheduling_with_extender(control_plane, workdir / "ext", "--explain-publish-seconds", "1") as ext:
        yield {"cp": control_plane, "kwok": kwok, "ext": ext, "home": home, "dir": workdir,
               "reader": reader_kubeconfig(control_plane, "default", role=fit_role, cluster_wide=True)}
    print("\n".join(f"\n$ kubectl gang {name if name.startswith('explain') else f'fit -f {name}.yaml'}\n{text}"
                    for name, text in CAPTURED.items()))


def pool(bed: dict[str, Any], name: str, nodes: int, **labels: str) -> tuple[str, dict[str, str], list[str]]:
    cp: ControlPlane = bed["cp"]
    kwok: Kwok = bed["kwok"]
    cp.create_namespace(name)
    selector = {"e2e-pool": name}
    return name, selector, kwok.add_nodes(nodes, prefix=f"{name}-n", cpu="4", labels={**selector, **labels})


def member_spec(cpu: str, selector: Mapping[str, str], workload: str, priority: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never", "nodeSelector": dict(selector), "terminationGracePeriodSeconds": GRACE,
        "workloadRef": {"name": workload, "podGroup": "workers"},
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]}
    if priority:
        spec["priorityClassName"] = priority
    return spec


def workload(ns: str, name: str, min_count: int, annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
            "metadata": {"name": name, "namespace": ns, **({"annotations": dict(annotations)} if annotations else {})},
            "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": min_count}}}]}}


def gang_file(ns: str, name: str, size: int, cpu: str, selector: Mapping[str, str], *, priority: str = "",
              annotations: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """What a user submits: the Workload and its pods."""
    return [workload(ns, name, size, annotations),
            *(pod(ns, f"{name}-{i}", member_spec(cpu, selector, name, priority)) for i in range(size))]


def ask(bed: dict[str, Any], name: str, objects: list[dict[str, Any]], waiting: frozenset[str] = frozenset()
        ) -> dict[str, Any]:
    """``kubectl gang fit -f FILE`` as the fit-role user, once the leader's published state has caught up
    with the cluster (its busy gangs are ``waiting``): its text (kept for the docs) and JSON answers."""
    published(bed, waiting)
    path = Path(bed["dir"]) / f"{name}.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    CAPTURED[name] = kubectl_gang(bed["cp"], bed["home"], "fit", "-f", str(path), kubeconfig=bed["reader"])
    answer: dict[str, Any] = json.loads(kubectl_gang(bed["cp"], bed["home"], "fit", "-f", str(path), "-o", "json",
                                                     kubeconfig=bed["reader"]))
    return answer


def published(bed: dict[str, Any], busy: frozenset[str]) -> None:
    """Wait until the newest ledger state the leader published names exactly the gangs ``busy`` (the
    earlier tests' gangs are bound and gone: a state that still shows them is not caught up)."""
    cp: ControlPlane = bed["cp"]

    def caught_up() -> bool:
        items = cp.request("GET", "/api/v1/events?fieldSelector=reason%3DGangState")["items"]
        states = [json.loads(e["metadata"]["annotations"][LEDGER]) for e in items
                  if LEDGER in (e["metadata"].get("annotations") or {})]
        if not states:
            return False
        newest = max(states, key=lambda s: s["publishedAt"])
        named = {"/".join(v for v in (g["gang"]["namespace"], g["gang"]["name"], g["gang"]["podGroup"]) if v)
                 for g in newest["gangs"]}
        return named == set(busy)
    wait_for(caught_up, timeout=WAIT, interval=0.5, what=f"the leader to publish a state with the gangs {set(busy)}")


def delete_all(cp: ControlPlane, ns: str) -> None:
    cp.kubectl("delete", "pods", "--all", "-n", ns, "--wait=false")
    wait_for(lambda: not pods(cp, ns), timeout=WAIT, what=f"the pods of {ns} to be gone")


def running(cp: ControlPlane, ns: str, name: str, cpu: str, node: str, priority: str) -> dict[str, Any]:
    spec = {"nodeName": node, "terminationGracePeriodSeconds": GRACE, "priorityClassName": priority,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]}
    return pod(ns, name, spec)


def test_fits_now_in_a_rack_and_binds_there(bed: dict[str, Any]) -> None:
    """Rack a has 2 nodes, rack b 4 with one busy: 3 members of 3 cpu that must share a rack fit only on
    the 3 free nodes of rack b."""
    cp: ControlPlane = bed["cp"]
    ns, selector, _ = pool(bed, "fit-now", 2, **{RACK: "a"})
    rack_b = bed["kwok"].add_nodes(4, prefix=f"{ns}-b", cpu="4", labels={**selector, RACK: "b"})
    create(cp, running(cp, ns, "busy", "3", rack_b[0], "fit-high"))
    objects = gang_file(ns, "train", 3, "3", selector, annotations={"gang-extender.io/topology-required": RACK})
    answer = ask(bed, "fits-now", objects)
    assert answer["verdict"] == "FitsNow", answer
    assert answer["placement"]["domain"] == f"{RACK}=b" and answer["placement"]["nodes"] == {
        name: 1 for name in rack_b[1:]}, answer
    create(cp, *objects)
    wait_for(lambda: len(bound(cp, ns, "train-")) == 3, timeout=WAIT, what="the gang bound")
    assert Counter(bound(cp, ns, "train-").values()) == Counter(answer["placement"]["nodes"]), answer
    delete_all(cp, ns)


def test_fits_after_preemption_evicts_the_victims_fit_named(bed: dict[str, Any]) -> None:
    cp: ControlPlane = bed["cp"]
    ns, selector, _ = pool(bed, "fit-preempt", 4)
    create(cp, *gang_file(ns, "low", 4, "3", selector, priority="fit-low"))
    wait_for(lambda: len(bound(cp, ns, "low-")) == 4, timeout=WAIT, what="the low-priority gang bound")
    objects = gang_file(ns, "high", 2, "3", selector, priority="fit-high")
    answer = ask(bed, "fits-after-preemption", objects)
    assert answer["verdict"] == "FitsAfterPreemption", answer
    named = {p for v in answer["preemption"]["victims"] for p in v["pods"]}
    assert [v["unit"] for v in answer["preemption"]["victims"]] == [f"gang {ns}/low/workers"], answer
    assert answer["preemption"]["cost"] == {"pods": 4, "gangs": 1, "units": 1}
    create(cp, *objects)
    wait_for(lambda: len(bound(cp, ns, "high-")) == 2, timeout=WAIT, what="the high-priority gang bound")
    left = {f"{ns}/{p['metadata']['name']}" for p in pods(cp, ns)
            if p["metadata"]["name"].startswith("low-") and not p["metadata"].get("deletionTimestamp")}
    assert {f"{ns}/low-{i}" for i in range(4)} - left == named, (left, named)
    delete_all(cp, ns)


def test_fits_after_capacity_binds_once_the_named_nodes_are_added(bed: dict[str, Any]) -> None:
    cp: ControlPlane = bed["cp"]
    ns, selector, nodes = pool(bed, "fit-grow", 3)
    create(cp, *(running(cp, ns, f"hog-{i}", "4", node, "fit-high") for i, node in enumerate(nodes[:2])))
    objects = gang_file(ns, "train", 3, "3", selector)
    answer = ask(bed, "fits-after-capacity", objects)
    assert answer["verdict"] == "FitsAfterCapacity", answer
    capacity = answer["capacity"]
    assert capacity["nodes"] == 2 and capacity["shape"]["like"] in nodes, answer
    assert capacity["shape"]["labels"]["e2e-pool"] == ns
    ext: Extender = bed["ext"]
    asked = ext.fit(objects)  # the extender's own port says the same
    assert asked["verdict"] == "FitsAfterCapacity" and asked["capacity"] == capacity, asked
    create(cp, *objects)
    wait_for(lambda: ext.explain(ns, "train")["gangs"][0]["state"] == "WaitingForCapacity", timeout=WAIT,
             what="the gang to wait for capacity")
    assert bound(cp, ns, "train-") == {}
    fix = ext.explain(ns, "train")["gangs"][0]["fix"]  # explain's smallest fix: the same nodes
    assert fix["kind"] == "addNodes" and fix["nodes"] == capacity["nodes"], fix
    assert fix["shape"]["like"] == capacity["shape"]["like"], (fix, capacity)
    wait_for(lambda: "Fix:" in kubectl_gang(cp, bed["home"], "explain", f"{ns}/train"), timeout=WAIT,
             what="the published explanation with its fix")
    text = kubectl_gang(cp, bed["home"], "explain", f"{ns}/train")
    CAPTURED[f"explain {ns}/train"] = text
    assert f"add {capacity['nodes']} node(s) like {capacity['shape']['like']}" in text, text
    added = bed["kwok"].add_nodes(capacity["nodes"], prefix=f"{ns}-n", cpu="4", labels=selector)
    wait_for(lambda: len(bound(cp, ns, "train-")) == 3, timeout=WAIT, what="the gang bound on the added nodes")
    assert set(bound(cp, ns, "train-").values()) == {nodes[2], *added}
    delete_all(cp, ns)


def test_never_is_told_by_the_extender_with_the_same_reason(bed: dict[str, Any]) -> None:
    cp: ControlPlane = bed["cp"]
    ns, selector, _ = pool(bed, "fit-never", 2)
    objects = gang_file(ns, "huge", 2, "6", selector)
    answer = ask(bed, "never", objects)
    assert answer["verdict"] == "Never" and "can never fit this cluster" in answer["reason"], answer
    create(cp, *objects)
    wait_for(lambda: events(cp, ns, "GangNeverFits"), timeout=WAIT, what="GangNeverFits")
    event = events(cp, ns, "GangNeverFits")[0]
    assert event["involvedObject"]["kind"] == "Workload" and event["message"] == answer["reason"], event
    delete_all(cp, ns)


def test_fits_after_the_gangs_ahead_waits_behind_them(bed: dict[str, Any]) -> None:
    cp: ControlPlane = bed["cp"]
    ext: Extender = bed["ext"]
    ns, selector, nodes = pool(bed, "fit-ahead", 2)
    create(cp, running(cp, ns, "hog", "4", nodes[0], "fit-high"))
    create(cp, *gang_file(ns, "first", 2, "3", selector))
    wait_for(lambda: (ext.explain(ns, "first")["gangs"][0].get("order") or {}).get("position") == 1, timeout=WAIT,
             what="the first gang waiting its turn")
    objects = gang_file(ns, "second", 2, "3", selector)
    answer = ask(bed, "fits-after-gangs-ahead", objects, frozenset({f"{ns}/first/workers"}))
    assert answer["verdict"] == "FitsAfterGangsAhead", answer
    assert [a["gang"] for a in answer["order"]["ahead"]] == [f"{ns}/first/workers"], answer
    create(cp, *objects)
    wait_for(lambda: (ext.explain(ns, "second")["gangs"][0].get("order") or {}).get("position") == 2, timeout=WAIT,
             what="the second gang behind the first")
    assert bound(cp, ns, "second-") == {}
    delete_all(cp, ns)


def test_a_user_without_the_fit_role_is_told_which_role_to_ask_for(bed: dict[str, Any]) -> None:
    cp: ControlPlane = bed["cp"]
    path = Path(bed["dir"]) / "refused.yaml"
    path.write_text(yaml.safe_dump_all(gang_file("default", "g", 2, "1", {})))
    done = subprocess.run([KUBECTL_GANG, "--kubeconfig", cp.user_kubeconfig("gang-nobody-fit"), "fit", "-f", str(path)],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={"HOME": str(bed["home"]), "LANG": "C.UTF-8"})
    assert done.returncode == 2 and not done.stdout and "Traceback" not in done.stderr, done
    assert "403" in done.stderr and "gang-extender:kubectl-gang-fit" in done.stderr, done.stderr
