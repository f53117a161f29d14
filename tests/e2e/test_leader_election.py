"""Leader election and release intents on a real kube-apiserver (``extender.kube.leader``,
``extender.kube.intents``): two replicas in this process, each with its own connection, as a service
account holding only the Role the extender needs (leases: create; get and update of its Lease).

Asserted: exactly one leads; a leader whose renewals stop is replaced only after the lease duration
counted from its last write, and stops acting (by its own clock) before that; the deposed leader's
intent write is refused by the API server (409: fenced) even though its own clock says it still leads;
the release it wrote before is found open by the new leader; a clean stop hands the Lease over at once;
a leader in another process killed with SIGKILL is replaced after the lease duration and the release
it had open is found by its successor.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import orjson
import pytest
from controlplane import ControlPlane, wait_for

from extender.errors import FencedError, IntentNotRecordedError
from extender.files.journal import JournalPod
from extender.kube.client import KubeClient
from extender.kube.intents import KEY, ReleaseIntents
from extender.kube.leader import LeaderElector
from extender.kube.lease import ElectionConfig, KubeLeaseApi
from extender.model.gang import GangKey, GroupKind, GroupRef

pytestmark = pytest.mark.e2e

NAMESPACE = "gang-lease"
CONFIG = ElectionConfig(NAMESPACE, "gang-extender", lease_duration=4, renew_deadline=2.5, retry_period=0.5)
TRAIN = GangKey(GroupRef(GroupKind.PODGROUP, "ml", "train"))
LATE = GangKey(GroupRef(GroupKind.PODGROUP, "ml", "late"))
KILLED = GangKey(GroupRef(GroupKind.PODGROUP, "ml", "killed"))
PODS = [("ml", f"worker-{i}", f"uid-{i}", f"node-{i}") for i in range(4)]


class PausableClock:
    """The monotonic clock, until ``freeze``: then it stands still, as for a process paused right after
    it checked ``is_leader()`` (the worst case the API server's fencing exists for)."""

    def __init__(self) -> None:
        self.frozen: float | None = None

    def __call__(self) -> float:
        return self.frozen if self.frozen is not None else time.monotonic()

    def freeze(self) -> None:
        self.frozen = time.monotonic()


ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
    "metadata": {"name": "gang-extender-lease", "namespace": NAMESPACE},
    "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
              {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"],
               "resourceNames": ["gang-extender"]}],
}


@pytest.fixture(scope="module")
def extender_kubeconfig(control_plane: ControlPlane) -> str:
    """A kubeconfig for service account gang-lease/gang-extender, bound to ``ROLE`` alone."""
    cp = control_plane
    cp.create_namespace(NAMESPACE)
    cp.kubectl("create", "serviceaccount", "gang-extender", "-n", NAMESPACE)
    cp.kubectl("apply", "-f", "-", input=json.dumps(ROLE))
    cp.kubectl("create", "rolebinding", "gang-extender-lease", "-n", NAMESPACE, "--role=gang-extender-lease",
               f"--serviceaccount={NAMESPACE}:gang-extender")
    return cp.service_account_kubeconfig(NAMESPACE, "gang-extender")


class Replica:
    def __init__(self, kubeconfig: str, name: str) -> None:
        self.kube = KubeClient(kubeconfig)
        self.clock = PausableClock()
        self.elector = LeaderElector(KubeLeaseApi(self.kube), CONFIG, f"{name}-{time.monotonic_ns()}",
                                     clock=self.clock)
        self.intents = ReleaseIntents(self.elector)

    def close(self) -> None:
        self.elector.stop(release=False)
        self.kube.close()


@pytest.fixture
def replicas(control_plane: ControlPlane, extender_kubeconfig: str) -> Iterator[tuple[Replica, Replica]]:
    control_plane.kubectl("delete", "lease", CONFIG.name, "-n", NAMESPACE, "--ignore-not-found")
    a, b = Replica(extender_kubeconfig, "a"), Replica(extender_kubeconfig, "b")
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def lease(cp: ControlPlane) -> dict[str, object]:
    found: dict[str, object] = cp.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{CONFIG.name}")
    return found


def open_on_server(cp: ControlPlane) -> list[int]:
    annotations = lease(cp)["metadata"].get("annotations") or {}  # type: ignore[attr-defined]
    return [entry["id"] for entry in orjson.loads(annotations.get(KEY, '{"open": []}'))["open"]]


def one_leader(pair: tuple[Replica, Replica], seconds: float) -> tuple[Replica, Replica]:
    """Sample both for ``seconds``: never two leaders; then (leader, standby)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert not (pair[0].elector.is_leader() and pair[1].elector.is_leader()), "two leaders at once"
        time.sleep(0.02)
    leaders = [r for r in pair if r.elector.is_leader()]
    assert len(leaders) == 1, f"{len(leaders)} leaders"
    return leaders[0], pair[1] if leaders[0] is pair[0] else pair[0]


def test_takeover_after_the_lease_duration_fences_the_deposed_leader(
        control_plane: ControlPlane, replicas: tuple[Replica, Replica]) -> None:
    cp = control_plane
    for replica in replicas:
        replica.elector.start()
    wait_for(lambda: any(r.elector.is_leader() for r in replicas), timeout=10, what="a leader")
    leader, standby = one_leader(replicas, 3.0)
    assert lease(cp)["spec"]["holderIdentity"] == leader.elector.identity  # type: ignore[index]

    release = leader.intents.opened(TRAIN, PODS)
    assert open_on_server(cp) == [release], "the intent is on the Lease before opened() returns"

    leader.clock.freeze()  # the leader is paused: no more renewals, and its clock says it still leads
    leader.elector.stop(release=False)
    last_write = leader.elector.renewed_at
    wait_for(standby.elector.is_leader, timeout=CONFIG.lease_duration + 10, interval=0.02, what="the takeover")
    took_over = standby.elector.renewed_at  # when the takeover was sent (one monotonic clock for both)
    assert took_over - last_write >= CONFIG.lease_duration, "taken over before the lease duration had passed"
    assert took_over - last_write <= CONFIG.lease_duration + 2 * CONFIG.retry_period + 1.5
    assert last_write + CONFIG.renew_deadline < took_over, "by a real clock, the old leader had stopped acting"

    assert leader.elector.is_leader(), "the paused leader's own clock still says it leads"
    with pytest.raises(IntentNotRecordedError) as refused:
        leader.intents.opened(LATE, PODS[:1])
    assert isinstance(refused.value.__cause__, FencedError), refused.value
    assert "409" in str(refused.value)
    assert not leader.elector.is_leader()

    assert lease(cp)["spec"]["holderIdentity"] == standby.elector.identity  # type: ignore[index]
    assert [(r.id, r.gang, r.pods) for r in standby.intents.unfinished] == [
        (release, TRAIN, tuple(JournalPod(*p) for p in PODS))]
    assert open_on_server(cp) == [release], "the deposed leader's last intent never reached the Lease"
    standby.intents.closed(release)
    assert open_on_server(cp) == []
    assert standby.intents.unfinished == []


def test_a_clean_stop_hands_the_lease_over_at_once(control_plane: ControlPlane,
                                                   replicas: tuple[Replica, Replica]) -> None:
    for replica in replicas:
        replica.elector.start()
    wait_for(lambda: any(r.elector.is_leader() for r in replicas), timeout=10, what="a leader")
    leader, standby = one_leader(replicas, 1.0)
    stopped = time.monotonic()
    leader.elector.stop(release=True)
    assert not leader.elector.is_leader()
    # released: empty, unless the standby's next try came first (it retries every 0.2 s)
    assert lease(control_plane)["spec"]["holderIdentity"] in (None, "", standby.elector.identity)  # type: ignore[index]
    wait_for(standby.elector.is_leader, timeout=10, interval=0.02, what="the takeover")
    # at the standby's next try (within retry_period x 1.2), not after any duration (the released
    # Lease says 1 s; ours is 4 s)
    assert standby.elector.renewed_at - stopped < 1.0, "a released Lease is taken at once"


LEADER_PROCESS = """
import sys, time
from extender.kube.intents import ReleaseIntents
from extender.kube.client import KubeClient
from extender.kube.leader import LeaderElector
from extender.kube.lease import ElectionConfig, KubeLeaseApi
from extender.model.gang import GangKey, GroupKind, GroupRef
config = ElectionConfig(sys.argv[2], sys.argv[3], lease_duration=4, renew_deadline=2.5, retry_period=0.5)
elector = LeaderElector(KubeLeaseApi(KubeClient(sys.argv[1])), config)
intents = ReleaseIntents(elector)
elector.start()
while not elector.is_leader():
    time.sleep(0.05)
killed = GangKey(GroupRef(GroupKind.PODGROUP, "ml", "killed"))
release = intents.opened(killed, [("ml", "worker-0", "uid-0", "node-0"), ("ml", "worker-1", "uid-1", "node-1")])
print("LEADING", elector.identity, release, flush=True)
time.sleep(3600)
"""


def test_a_leader_killed_by_sigkill_is_replaced_and_its_release_is_found(
        control_plane: ControlPlane, extender_kubeconfig: str) -> None:
    import signal
    import subprocess
    import sys
    from pathlib import Path

    control_plane.kubectl("delete", "lease", CONFIG.name, "-n", NAMESPACE, "--ignore-not-found")
    proc = subprocess.Popen([sys.executable, "-c", LEADER_PROCESS, extender_kubeconfig, NAMESPACE, CONFIG.name],
                            stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
    standby = Replica(extender_kubeconfig, "standby")
    try:
        assert proc.stdout is not None
        _, _, release = proc.stdout.readline().split()  # the other process leads, its release is open
        standby.elector.start()
        time.sleep(1.0)
        assert not standby.elector.is_leader()
        killed = time.monotonic()
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        wait_for(standby.elector.is_leader, timeout=CONFIG.lease_duration + 10, interval=0.02, what="the takeover")
        took = standby.elector.renewed_at - killed
        assert CONFIG.lease_duration - CONFIG.retry_period <= took <= CONFIG.lease_duration + 2 * CONFIG.retry_period
        assert lease(control_plane)["spec"]["holderIdentity"] == standby.elector.identity  # type: ignore[index]
        assert lease(control_plane)["spec"]["leaseTransitions"] == 1  # type: ignore[index]
        assert [(r.id, r.gang, len(r.pods)) for r in standby.intents.unfinished] == [(int(release), KILLED, 2)]
    finally:
        proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
        standby.close()
