"""A takeover in the middle of a release (issue 26, finding 3), through the real processes: two pairs of
kube-scheduler + ``gang-extender serve --leader-election on`` (the HA topology of tests/e2e/ha.py, 4 s
Leases, ``--bind-parallelism 1``) and a ``bindtap.BindingTap``, an admission webhook on ``pods/binding``
that lets the test stop the leader's release between two of its Bindings.

A gang of 3 (3 cpu each, one per node of 4 cpu). The leader reaches the quorum, writes its release
intent on its Lease (read back by the test) and starts binding. The tap lets the first ``allow_first``
Bindings through and holds the next one; the test then SIGKILLs the leading pair (both processes) and
has the tap refuse the held Binding, so the API server holds exactly ``allow_first`` of the gang's
Bindings when the other pair takes over.

- *one Binding exists* (``test_a_takeover_finishes_a_release_that_had_bound_a_member``): the new leader
  must finish the release: every member ends bound, a ``GangReleaseResumed`` Event says so, and nothing
  else is placed on the gang's nodes meanwhile: two higher-priority 2-cpu pods (kube-scheduler tries them
  first) are created right after the kill, and none may be bound before the gang is whole (each would
  leave a member no room: the gang would stay partly bound); the new leader's recording must show it was
  asked to place them before the gang was whole, and found no node (else nothing was tested). It must be
  whole within the takeover + ``PARTIAL_GRACE`` (5 s) as ``make ha`` and the churn soak allow. Before the
  new leader kept the room of the members it let through, this failed: both competing pods were bound on
  the nodes the release had chosen, the gang left 1 of 3 bound.
- *no Binding exists* (``test_a_takeover_drops_a_release_that_had_bound_nothing``): the new leader must
  drop it (``GangReleaseAbandoned``): the gang forms again at the barrier and is bound whole by the new
  leader's own release, never partly: its three Bindings within ``WHOLE_SPREAD`` seconds of each other.

All: the intent is closed on the Lease afterwards; no Binding reaches the API server between the kill and
the new extender Lease's acquireTime (nothing the killed leader had in flight is made after its death:
no zombie); the takeover (kill -> that acquireTime) is printed. With the resume disabled
(``Binding.let_through`` returning at once) all three fail: no ``GangReleaseResumed``, the competing pods
bound in the gang's room, no ``GangReleaseAbandoned``. Timing bounds: every wait is for a condition (60 s
bounds on a loaded machine); the kill lands within ``KILL_WITHIN`` of the held Binding, well inside the
Binding's own timeout (the leader's time left, at most the 2.5 s renew deadline).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from bindtap import BindingTap, TapRecord
from controlplane import ApiError, ControlPlane, wait_for
from ha import EXTENDER_LEASE, PARTIAL_GRACE, extender_args
from observe import PodWatch
from pairs import Pair, lease, scheduler_election
from support import bound, create, events, overcommitted_nodes, pod, pod_spec, recorded, scenario

from extender.kube.intents import KEY

pytestmark = pytest.mark.e2e

MEMBERS = [f"tr-{i}" for i in range(3)]
STEAL = [f"steal-{i}" for i in range(2)]
HIGH = "e2e-takeover-high"
KILL_WITHIN = 1.0   # seconds from the held Binding's arrival at the tap to the kill
WHOLE_SPREAD = 1.0  # a release of 3 Bindings one after another takes tens of milliseconds


@dataclass
class Cut:
    """The tap's policy: let ``allow_first`` of the namespace's Bindings through, hold the next one."""

    ns: str
    allow_first: int
    seen: int = 0
    held: TapRecord | None = None
    after: list[TapRecord] = field(default_factory=list)
    holding: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, record: TapRecord) -> str:
        with self.lock:
            if record.namespace != self.ns:
                return "allow"
            self.seen += 1
            if self.seen <= self.allow_first:
                return "allow"
            if self.held is None:
                self.held = record
                self.holding.set()
                return "hold"
            self.after.append(record)
            return "allow"


@pytest.fixture
def priority_class(control_plane: ControlPlane) -> str:
    try:
        control_plane.request("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", {
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": HIGH},
            "value": 1000, "preemptionPolicy": "Never",
            "description": "e2e: scheduled before the gang's members, never preempts"})
    except ApiError as exc:
        if exc.status != 409:
            raise
    return HIGH


@pytest.fixture
def pairs(control_plane: ControlPlane, tmp_path: Path, request: pytest.FixtureRequest
          ) -> Iterator[tuple[str, list[Pair]]]:
    name = request.node.name
    ns = "to-room" if "room" in name else "to-finish" if "finishes" in name else "to-drop"
    ns, _, _ = scenario(control_plane, ns, nodes=3, cpu="4")
    made = [Pair(control_plane, label, tmp_path / label, extender_args(ns, election=True),
                 scheduler_election(4, 3, 1), print) for label in ("a", "b")]
    try:
        yield ns, made
    finally:
        for pair in made:
            pair.stop()
            print(f"[e2e] pair {pair.label}: extender log {pair.ext.log_path}, "
                  f"kube-scheduler log {control_plane.log_path(pair.scheduler)}")


def _gang(ns: str) -> list[dict[str, Any]]:
    annotations = {"gang-extender.io/group": "tr", "gang-extender.io/min-count": str(len(MEMBERS))}
    return [pod(ns, name, pod_spec(cpu="3", selector={"e2e-scenario": ns}), annotations=annotations)
            for name in MEMBERS]


def _open_releases(cp: ControlPlane, ns: str) -> list[dict[str, Any]]:
    found = cp.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{EXTENDER_LEASE}")
    value = (found["metadata"].get("annotations") or {}).get(KEY)
    return list(orjson.loads(value)["open"]) if value else []


def _cut_release(cp: ControlPlane, ns: str, pairs: list[Pair], tap: BindingTap, cut: Cut
                 ) -> tuple[Pair, Pair, float, float, list[dict[str, Any]]]:
    """Both pairs started, the gang created, the leader's release cut by the tap and the kill:
    (killed, survivor, kill time (monotonic), kill time (wall), the intent read off the Lease)."""
    for pair in pairs:
        pair.start()
    wait_for(lambda: sum(p.leads() for p in pairs) == 1, timeout=60, interval=0.05, what="one leading kube-scheduler")
    leader = next(p for p in pairs if p.leads())
    survivor = next(p for p in pairs if p is not leader)
    create(cp, *_gang(ns))
    assert cut.holding.wait(60), "no Binding of the release reached the tap"
    assert cut.held is not None
    intent = _open_releases(cp, ns)  # written before the first Binding: on the Lease now
    killed_mono, killed_wall = time.monotonic(), time.time()
    leader.kill()
    tap.decide(cut.held, False)  # the API server refuses it (if the kill has not cancelled it already)
    assert killed_mono - cut.held.received < KILL_WITHIN, "the kill came too late to cut the release"
    assert [sorted(p[1] for p in r["pods"]) for r in intent] == [MEMBERS], intent
    assert leader.extender_leads() is False
    return leader, survivor, killed_mono, killed_wall, intent


def _takeover(cp: ControlPlane, ns: str, killed: Pair, survivor: Pair, killed_wall: float) -> float:
    """Until the survivor's extender leads; then the killed pair is restarted as the standby. Returns
    kill -> the new extender Lease's acquireTime."""
    wait_for(survivor.extender_leads, timeout=60, interval=0.05, what=f"extender {survivor.label} leading")
    state = lease(cp, ns, EXTENDER_LEASE)
    assert state is not None
    killed.start()
    return round(state.acquired - killed_wall, 2)


def _no_zombie(cut: Cut, killed_mono: float, takeover: float) -> None:
    """No Binding of the namespace reached the API server (the tap) after the held one until the new leader
    held the extender Lease: nothing the killed leader had in flight was made after its death."""
    acquired = killed_mono + takeover - 0.05  # takeover is rounded to 10 ms
    early = [(r.pod, round(r.received - killed_mono, 3)) for r in cut.after if r.received < acquired]
    assert early == [], f"Bindings between the kill and the new leader's acquireTime ({takeover} s): {early}"


def _closed(cp: ControlPlane, ns: str) -> None:
    wait_for(lambda: _open_releases(cp, ns) == [], timeout=30, interval=0.2, what="the release intent closed")


def test_a_takeover_finishes_a_release_that_had_bound_a_member(
        control_plane: ControlPlane, pairs: tuple[str, list[Pair]]) -> None:
    _finish(control_plane, pairs, competing=None)


def test_a_takeover_finishes_a_release_and_keeps_its_members_room(
        control_plane: ControlPlane, pairs: tuple[str, list[Pair]], priority_class: str) -> None:
    _finish(control_plane, pairs, competing=priority_class)


def _finish(cp: ControlPlane, pairs: tuple[str, list[Pair]], competing: str | None) -> None:
    """The release cut after its first Binding; with ``competing``, two pods of that priority class are
    created right after the kill (see the module docstring)."""
    ns, both = pairs
    cut = Cut(ns, allow_first=1)
    with BindingTap(cp, [ns], name=f"e2e-tap-{ns}", policy=cut) as tap, PodWatch(cp, ns) as watch:
        killed, survivor, killed_mono, killed_wall, intent = _cut_release(cp, ns, both, tap, cut)
        print(f"\n[e2e] {ns}: intent on the Lease at the kill: {json.dumps(intent)}")
        first = bound(cp, ns, "tr-")
        assert len(first) == 1, f"exactly the first Binding made when the pair was killed: {first}"
        if competing:  # pods that would take the members' room, tried first by the next leader
            steal = pod_spec(cpu="2", selector={"e2e-scenario": ns})
            steal["priorityClassName"] = competing
            create(cp, *(pod(ns, name, steal) for name in STEAL))
        takeover = _takeover(cp, ns, killed, survivor, killed_wall)
        # the gang whole, or a competing pod placed (then the gang can never be whole while it stays)
        watch.wait(lambda w: len(w.bound(MEMBERS)) == len(MEMBERS) or bool(w.bound(STEAL)), timeout=60,
                   what="the gang whole")
        steals = [(b.pod, b.node, round(b.seen - killed_mono, 2)) for b in watch.bound(STEAL)]
        members = [(b.pod, b.node, round(b.seen - killed_mono, 2)) for b in watch.bound(MEMBERS)]
        print(f"[e2e] {ns}: takeover (extender Lease) {takeover} s after the kill; bound (pod, node, s after the "
              f"kill): members {members}, competing pods {steals}")
        kept = {pod[1]: pod[3] for release in intent for pod in release["pods"] if pod[1] not in first}
        assert steals == [], (f"the new leader placed other pods on the nodes its release left to the gang's "
                              f"unbound members {kept}: {steals}; the gang is left partly bound {members}")
        whole = max(b.seen for b in watch.bound(MEMBERS))
        _closed(cp, ns)
    if competing:  # the race was run: the new leader was asked to place them while the room was the gang's
        unbound = set(MEMBERS) - set(first)
        wait_for(lambda: unbound <= _bound_by(survivor.record_path), timeout=30, interval=0.2,
                 what="the new leader's recording of its Bindings")
        tried = _competing_filters_before(survivor.record_path, unbound)
        print(f"[e2e] {ns}: the new leader's filters of the competing pods before the gang was whole: {tried}")
        assert tried, "kube-scheduler tried no competing pod on the new leader before the gang was whole"
        assert all(nodes == [] for _, nodes in tried), f"a competing pod was offered a node the gang needed: {tried}"
    _no_zombie(cut, killed_mono, takeover)
    assert {b.pod: b.node for b in watch.bound(MEMBERS) if b.pod in first} == first, "the bound member moved"
    assert watch.bound(STEAL) == [], "pods placed beside the gang's members (they cannot fit there)"
    assert overcommitted_nodes(cp) == []
    resumed = events(cp, ns, "GangReleaseResumed")
    assert len(resumed) == 1 and "tr" in resumed[0]["message"], resumed
    assert whole - killed_mono <= takeover + PARTIAL_GRACE, (
        f"partly bound {whole - killed_mono:.2f} s after the kill (takeover {takeover} s + {PARTIAL_GRACE} s allowed)")


def _bound_by(record_path: Path) -> set[str]:
    """The pods the extender recorded at ``record_path`` answered OK at bind."""
    return {e["request"]["PodName"] for e in recorded(record_path) if e["verb"] == "bind" and not e["reply"]["Error"]}


def _competing_filters_before(record_path: Path, unbound: set[str]) -> list[tuple[str, list[str]]]:
    """The competing pods' filters the extender at ``record_path`` answered as the leader (no error) before
    it had bound all of ``unbound``, with the nodes it found feasible for each."""
    tried: list[tuple[str, list[str]]] = []
    left = set(unbound)
    for entry in recorded(record_path):
        request, reply = entry["request"], entry["reply"]
        if entry["verb"] == "bind" and not reply["Error"]:
            left.discard(request["PodName"])
            if not left:
                break
        elif entry["verb"] == "filter" and not reply.get("Error") and request["Pod"]["metadata"]["name"] in STEAL:
            tried.append((request["Pod"]["metadata"]["name"], list(reply.get("NodeNames") or [])))
    return tried


def test_a_takeover_drops_a_release_that_had_bound_nothing(
        control_plane: ControlPlane, pairs: tuple[str, list[Pair]]) -> None:
    cp = control_plane
    ns, both = pairs
    cut = Cut(ns, allow_first=0)
    with BindingTap(cp, [ns], name=f"e2e-tap-{ns}", policy=cut) as tap, PodWatch(cp, ns) as watch:
        killed, survivor, killed_mono, killed_wall, intent = _cut_release(cp, ns, both, tap, cut)
        assert bound(cp, ns, "tr-") == {}, "no Binding made when the pair was killed"
        takeover = _takeover(cp, ns, killed, survivor, killed_wall)
        watch.wait(lambda w: len(w.bound(MEMBERS)) == len(MEMBERS), timeout=60, what="the gang whole")
        _closed(cp, ns)
    times = sorted(b.seen for b in watch.bound(MEMBERS))
    print(f"\n[e2e] takeover-drop: intent {json.dumps(intent)}; takeover (extender Lease) {takeover} s; whole "
          f"{times[-1] - killed_mono:.2f} s after the kill; Bindings within {times[-1] - times[0]:.3f} s")
    assert times[0] > killed_mono, "bound before the kill"
    _no_zombie(cut, killed_mono, takeover)
    assert times[-1] - times[0] <= WHOLE_SPREAD, f"partly bound for {times[-1] - times[0]:.2f} s"
    assert [r.allowed for r in cut.after] == [True] * len(MEMBERS), "the new leader's release: three Bindings"
    abandoned = events(cp, ns, "GangReleaseAbandoned")
    assert len(abandoned) == 1, abandoned
    assert events(cp, ns, "GangReleaseResumed") == []
