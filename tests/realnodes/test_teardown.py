"""The real-node tier leaves the machine as it found it (``hack/real-nodes/hoststate.py`` reads it).

Compared before and after: sysctls, iptables and ip6tables rules and chains, nf_tables tables, mounts,
network interfaces and namespaces, cgroups, /etc/hosts, the tier's processes, and the paths a kubelet
or containerd creates by default. Kernel modules loaded by the tier stay loaded (reported, not failed;
docs/decisions/0004-real-nodes.md). Two ways to end: a clean stop, and a run whose owner was killed
with SIGKILL (the control plane's watchdog kills the kubelets, containerd and kube-proxy but not the
containerd shims and the pods' processes) followed by ``realnodes.py down``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import hoststate
import pytest
import realnodes
from controlplane import ControlPlane, wait_for
from realcluster import Images, RealCluster, all_running

pytestmark = [pytest.mark.e2e, pytest.mark.realnodes]

ROOT = Path(__file__).resolve().parents[2]
PAUSE_POD = """
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: 1
  containers: [{{name: c, image: {image}, imagePullPolicy: Never}}]
"""


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _changes(before: dict[str, object], during: dict[str, object]) -> set[str]:
    """The categories the running tier changed (the test is worth something only if they are many)."""
    return {line.split()[0].split(":")[0] for line in hoststate.differences(before, during)}


def test_clean_stop_leaves_the_machine_as_found(realnode_bin_dir: Path, images: Images) -> None:
    before = hoststate.snapshot(realnodes.markers())
    with (ControlPlane(realnode_bin_dir, log=_log, advertise_address=realnodes.node_ip()) as plane,
          realnodes.RealNodes(plane, realnode_bin_dir, images=[images.extender], log=_log) as nodes):
        cluster = RealCluster(plane, nodes, images)
        for i, node in enumerate(nodes.names):  # a running pod on each node: bridges, netns, veths, rules
            cluster.kubectl("apply", "-f", "-", input=PAUSE_POD.format(name=f"p{i}", node=node,
                                                                       image=realnodes.PAUSE_IMAGE))
        wait_for(lambda: all_running(cluster.get("pods", "-n", "default")["items"], len(nodes.names)),
                 timeout=120, interval=0.5, what="a running pod on each node")
        during = hoststate.snapshot(realnodes.markers())
    changed = _changes(before, during)
    assert {"sysctl", "iptables", "mounts", "interfaces", "cgroups", "hosts", "processes"} <= changed, changed
    after = hoststate.snapshot(realnodes.markers())
    assert hoststate.differences(before, after) == []
    _log("modules the tier loaded (left loaded): "
         + ", ".join(sorted(set(after["modules"]) - set(before["modules"]))) or "none")


def test_down_after_a_killed_run_leaves_the_machine_as_found(realnode_bin_dir: Path, images: Images) -> None:
    before = hoststate.snapshot(realnodes.markers())
    up = subprocess.Popen([sys.executable, str(ROOT / "hack" / "real-nodes" / "realnodes.py"), "up"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
    try:
        assert up.stdout is not None
        kubeconfig = up.stdout.readline().strip()
        assert kubeconfig, "realnodes.py up printed no kubeconfig (it failed)"
        kubectl = [str(realnode_bin_dir / "kubectl"), f"--kubeconfig={kubeconfig}"]
        for i, node in enumerate(("gang-rn-a", "gang-rn-b")):
            subprocess.run([*kubectl, "apply", "-f", "-"], check=True, capture_output=True, text=True,
                           input=PAUSE_POD.format(name=f"p{i}", node=node, image=realnodes.PAUSE_IMAGE))

        def running() -> bool:
            out = subprocess.run([*kubectl, "get", "pods", "-o", "jsonpath={.items[*].status.phase}"],
                                 capture_output=True, text=True, check=False).stdout.split()
            return out == ["Running", "Running"]

        wait_for(running, timeout=120, interval=0.5, what="a running pod on each node")
        during = hoststate.snapshot(realnodes.markers())
    finally:
        os.kill(up.pid, signal.SIGKILL)  # no tear-down: the watchdog kills the components, nothing else
        up.wait()
        if up.stdout is not None:
            up.stdout.close()
    assert realnodes.STATE.exists(), "the killed run's state.json is gone"
    # The pods' processes and the containerd shims outlive their containerd.
    wait_for(lambda: not any("kubelet" in p for p in hoststate.snapshot(realnodes.markers())["processes"]),
             timeout=30, what="the watchdog to kill the kubelets")
    left = hoststate.differences(before, hoststate.snapshot(realnodes.markers()))
    assert any(line.startswith("processes: new") for line in left), left
    assert {"iptables", "mounts", "interfaces", "cgroups"} <= _changes(before, during)
    down = subprocess.run([sys.executable, str(ROOT / "hack" / "real-nodes" / "realnodes.py"), "down"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert down.returncode == 0, down.stderr
    assert hoststate.differences(before, hoststate.snapshot(realnodes.markers())) == [], down.stderr
