#!/usr/bin/env python3
"""Real kubelets on this machine, registered to a local control plane (``hack/controlplane.py``).

The real-node tier (docs/decisions/0004-real-nodes.md): two nodes (or more), each a kubelet with its
own containerd (Debian's 1.6, a private instance: its own root, state, sockets and runc root), its own
CNI bridge and subnet (bridge + host-local + firewall, Debian's containernetworking-plugins), its own
ports and cgroup root; one kube-proxy (iptables mode) for the machine, so that pods reach the API
server through the ``kubernetes`` Service as on any cluster. Images come from the local Docker engine
(``docker save`` once, ``ctr images import`` into each node's containerd); nothing is pulled.

Owns: the nodes' processes (started through :meth:`ControlPlane.start_component`, so the control plane's
watchdog SIGKILLs them if the owner dies), their files under :data:`RUN_DIR`, and every change they make
to the host, which :meth:`RealNodes.stop` (or ``realnodes.py down`` after a crash) undoes from the
state recorded in ``RUN_DIR/state.json`` *before* the first change: sysctls written back, the tier's
iptables chains deleted, mounts and network namespaces removed, bridges deleted, cgroup roots removed,
the /etc/hosts line removed, shims and pods' processes killed, paths the kubelet created by default
removed. ``tests/realnodes/test_teardown.py`` checks the machine is left as found (``hoststate.py``).

Must not: run two at once (a lock), run against a control plane that does not advertise a non-loopback
address (pods could not reach it), or change anything of the host that ``state.json`` does not name.

Settings this machine needs (docs/decisions/0004-real-nodes.md says why): containerd's CRI with
``restrict_oom_score_adj`` (root here lacks CAP_SYS_RESOURCE), kubelet with ``failCgroupV1: false``,
``cgroupDriver: cgroupfs``, ``failSwapOn: false``; the node IP is the machine's own address while the
kubelet listens on 127.0.0.1 only, the node names resolve to 127.0.0.1 (a line in /etc/hosts) so that the
API server reaches the kubelets for ``logs`` and ``exec``; kubelets allow anonymous requests and
authorize everything (a test setting: they listen on loopback only).

Library use::

    with ControlPlane(find_bin_dir(), advertise_address=node_ip()) as cp, RealNodes(cp, bin_dir) as nodes:
        nodes.import_images(["gang-extender:dev"])
        cp.kubectl("get", "nodes")

CLI::

    python hack/real-nodes/realnodes.py up     # control plane + 2 nodes; prints the kubeconfig and an
                                               # `export KUBECONFIG=... PATH=...` line; Ctrl-C stops
    python hack/real-nodes/realnodes.py down   # undo what a killed run left behind (from state.json)
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final

HERE: Final = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # hack/: controlplane
sys.path.insert(0, str(HERE))

import hoststate  # noqa: E402
from controlplane import (  # noqa: E402
    ApiError,
    ControlPlane,
    ControlPlaneError,
    run_build_script,
    tail,
    wait_for,
)

CACHE: Final = Path(os.environ.get("GANG_EXTENDER_CACHE")
                    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gang-extender")
RUN_DIR: Final = CACHE / "real-nodes" / "run"
STATE: Final = RUN_DIR / "state.json"
LOCK: Final = CACHE / "real-nodes" / "lock"
BUILD_SCRIPT: Final = HERE / "build.sh"
PAUSE_IMAGE: Final = "localhost/gang-extender-pause:1"
CNI_BIN_DIR: Final = "/usr/lib/cni"
#: Pod addresses: node i gets 10.246.<i+1>.0/24 on its bridge ``gangrn<i>``.
POD_CIDR: Final = "10.246.0.0/16"
#: Fixed ports, below the ephemeral range the e2e tier's control planes take theirs from (so both can run
#: at once): node i's kubelet 17250+10i (healthz 17248+10i); kube-proxy's healthz and metrics.
KUBELET_PORT: Final = 17250
KUBELET_HEALTHZ_PORT: Final = 17248
PROXY_HEALTHZ_PORT: Final = 17256
PROXY_METRICS_PORT: Final = 17249
HOSTS_MARKER: Final = "# gang-extender real-nodes"
CONTAINERD: Final = "/usr/bin/containerd"
CTR: Final = "/usr/bin/ctr"
DOCKER: Final = os.environ.get("GANG_DOCKER", "/usr/bin/docker")

#: Paths the kubelet or containerd use whatever they are told, removed whole at tear-down when they did
#: not exist before: the device manager's socket (/var/lib/kubelet/device-plugins/kubelet.sock, one for
#: both kubelets: the last one started owns it), libcni's cache of results, the kubelet's links to
#: containers' logs.
FIXED_PATHS: Final = ("/var/lib/kubelet", "/var/lib/cni", "/var/log/containers")

Log = Callable[[str], None]


class RealNodesError(ControlPlaneError):
    """A node did not come up, or the machine lacks what the tier needs."""


def find_bin_dir() -> Path:
    """Kubernetes binaries with kubelet and kube-proxy, and the pause image (``hack/real-nodes/build.sh``)."""
    bin_dir = run_build_script(BUILD_SCRIPT, missing="kubelet and kube-proxy are not built and `go` is not installed")
    for b in ("kubelet", "kube-proxy"):
        if not os.access(bin_dir / b, os.X_OK):
            raise RealNodesError(f"{bin_dir} lacks {b}")
    return bin_dir


def node_ip() -> str:
    """The IPv4 address of the interface of the default route (a node IP cannot be loopback)."""
    routes = json.loads(hoststate.run(["ip", "-j", "-4", "route", "show", "default"]).stdout or "[]")
    devices = [r["dev"] for r in routes if "dev" in r]
    for dev in devices:
        addrs = json.loads(hoststate.run(["ip", "-j", "-4", "addr", "show", "dev", dev]).stdout or "[]")
        for link in addrs:
            for info in link.get("addr_info", []):
                if info.get("scope") == "global":
                    return str(info["local"])
    raise RealNodesError("no IPv4 address on the default route's interface: the nodes need a non-loopback node IP")


@dataclass(frozen=True)
class Node:
    name: str
    index: int

    @property
    def subnet(self) -> str:
        return f"10.246.{self.index + 1}.0/24"

    @property
    def bridge(self) -> str:
        return f"gangrn{self.index}"

    @property
    def port(self) -> int:
        return KUBELET_PORT + 10 * self.index

    @property
    def healthz_port(self) -> int:
        return KUBELET_HEALTHZ_PORT + 10 * self.index

    @property
    def cgroup_root(self) -> str:
        return f"/{self.name}"

    @property
    def dir(self) -> Path:
        return RUN_DIR / self.name

    @property
    def socket(self) -> Path:
        return self.dir / "containerd.sock"

    @property
    def static_pod_dir(self) -> Path:
        """The kubelet's ``staticPodPath``: a manifest written here runs as a static pod on this node."""
        return self.dir / "manifests"


# ------------------------------------------------------------------------------------------- tear-down
def markers() -> list[str]:
    """What the tier's processes have in their command lines (its run directory)."""
    return [str(RUN_DIR)]


def teardown(log: Log = print) -> list[str]:
    """Undo every host change recorded in ``state.json`` (idempotent; nothing to do without it).

    Processes first (shims and pods' processes included), then mounts and network namespaces, bridges,
    iptables chains, cgroup roots, paths a kubelet or containerd made by default, sysctls, /etc/hosts,
    and the run directory. Returns what was done, one line per step that did something."""
    if not STATE.exists():
        return []
    state = json.loads(STATE.read_text())
    done: list[str] = []

    def note(what: str, items: Sequence[str]) -> None:
        if items:
            done.append(f"{what}: {len(items)} ({', '.join(items[:4])}{', ...' if len(items) > 4 else ''})")

    note("processes killed", hoststate.kill_processes(markers()))
    for node in state["nodes"]:
        hoststate.kill_cgroup_processes(node["cgroup_root"])
    note("unmounted", hoststate.unmount_under(str(RUN_DIR)))
    note("network namespaces removed", hoststate.remove_netns(state["netns"]))
    links = [n["bridge"] for n in state["nodes"] if Path("/sys/class/net", n["bridge"]).exists()]
    for link in links:
        hoststate.run(["ip", "link", "delete", link], check=False)
    note("bridges deleted", links)
    note("iptables chains removed", hoststate.remove_new_chains(state["iptables"]))
    note("nf_tables tables removed", hoststate.remove_new_tables(state["iptables"]))
    removed_cgroups: list[str] = []
    for node in state["nodes"]:
        removed_cgroups += hoststate.remove_cgroups(node["cgroup_root"])
    note("cgroups removed", removed_cgroups)
    containers_dir = Path("/var/log/containers")
    if containers_dir.is_dir():  # the kubelet's symbolic links to its containers' logs (path not configurable)
        links_removed = []
        for entry in containers_dir.iterdir():
            with contextlib.suppress(OSError):
                if entry.is_symlink() and os.readlink(entry).startswith(str(RUN_DIR)):
                    entry.unlink()
                    links_removed.append(entry.name)
        note("log links removed", links_removed)
    made = [p for p, existed in state["paths"].items() if not existed and os.path.isdir(p) and not os.path.islink(p)]
    removed_paths = []
    for path in sorted(made, key=lambda p: p.count("/"), reverse=True):
        if path in FIXED_PATHS:
            shutil.rmtree(path, ignore_errors=True)
            removed_paths.append(path)
            continue
        with contextlib.suppress(OSError):
            os.rmdir(path)  # only if empty: what is left in it is reported by the tear-down test
            removed_paths.append(path)
    note("paths removed", removed_paths)
    note("sysctls restored", hoststate.restore_sysctls(state["sysctls"]))
    if hoststate.remove_hosts_line(HOSTS_MARKER):
        done.append("/etc/hosts line removed")
    shutil.rmtree(RUN_DIR, ignore_errors=True)
    for line in done:
        log(f"[real-nodes] tear-down: {line}")
    return done


# ----------------------------------------------------------------------------------------------- nodes
class RealNodes:
    """``count`` kubelets (``gang-rn-a``, ``gang-rn-b``, ...) and one kube-proxy against ``plane``.

    ``bin_dir`` holds kubelet and kube-proxy (:func:`find_bin_dir`). ``images`` are imported into every
    node's containerd at start (:meth:`import_images` imports more later). The components' logs are the
    control plane's (``<workdir>/kubelet-gang-rn-a.log``, ...: ``keep=True`` on the control plane keeps them).
    """

    def __init__(self, plane: ControlPlane, bin_dir: Path, *, count: int = 2, images: Sequence[str] = (),
                 log: Log = print, start_timeout: float = 120.0) -> None:
        if not plane.advertise_address:
            raise RealNodesError("the control plane must advertise a non-loopback address (advertise_address=)")
        self.plane = plane
        self.bin_dir = Path(bin_dir)
        self.nodes = [Node(f"gang-rn-{chr(ord('a') + i)}", i) for i in range(count)]
        self.images = list(images)
        self.log = log
        self.start_timeout = start_timeout
        self.node_ip = plane.advertise_address
        self._lock: IO[str] | None = None
        self._started = False
        self._stopped = False

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def __enter__(self) -> RealNodes:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # ---- start -------------------------------------------------------------------------------------
    def start(self) -> None:
        if os.geteuid() != 0:
            raise RealNodesError("the real-node tier runs kubelets and containerd: it needs root")
        for path in (CONTAINERD, CTR, "/usr/sbin/runc", f"{CNI_BIN_DIR}/bridge", f"{CNI_BIN_DIR}/firewall",
                     "/usr/sbin/iptables"):
            if not os.path.exists(path):
                raise RealNodesError(f"{path} is missing: run hack/real-nodes/build.sh (it installs it)")
        LOCK.parent.mkdir(parents=True, exist_ok=True)
        self._lock = LOCK.open("w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise RealNodesError(f"another real-node cluster runs on this machine (lock {LOCK})") from exc
        if STATE.exists():
            self.log("[real-nodes] a previous run left its state: tearing it down first")
            teardown(self.log)
        t0 = time.monotonic()
        self._started = True
        try:
            self._record_state()
            self._prepare_host()
            for node in self.nodes:
                self._start_containerd(node)
            self.import_images([PAUSE_IMAGE, *self.images])
            self._grant_node_rbac()
            for node in self.nodes:
                self._start_kubelet(node)
            self._start_kube_proxy()
            for node in self.nodes:
                self._wait_node_ready(node)
        except BaseException:
            self.stop()
            raise
        self.log(f"[real-nodes] {len(self.nodes)} nodes Ready in {time.monotonic() - t0:.1f}s: {', '.join(self.names)}")

    def _record_state(self) -> None:
        """Everything the tear-down needs, written before the first change to the host."""
        RUN_DIR.mkdir(parents=True, exist_ok=True)
        before = hoststate.snapshot(markers())
        state = {
            "sysctls": {name: hoststate.read_sysctl(name) for name in hoststate.RESTORED_SYSCTLS},
            "iptables": {"iptables": before["iptables"], "ip6tables": before["ip6tables"]},
            "netns": before["netns"],
            "paths": before["paths"],
            "nodes": [{"name": n.name, "bridge": n.bridge, "cgroup_root": n.cgroup_root} for n in self.nodes],
        }
        for node in self.nodes:
            if Path("/sys/class/net", node.bridge).exists():
                raise RealNodesError(f"interface {node.bridge} already exists: not ours, not touched")
            if any(d.exists() for d in hoststate.cgroup_dirs(node.cgroup_root)):
                raise RealNodesError(f"cgroup {node.cgroup_root} already exists: not ours, not touched")
        tmp = STATE.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(STATE)

    def _prepare_host(self) -> None:
        hoststate.add_hosts_line(f"127.0.0.1 {' '.join(self.names)} {HOSTS_MARKER}")
        for node in self.nodes:
            for d in hoststate.cgroup_dirs(node.cgroup_root):
                d.mkdir()
                if (d.parent / "cpuset.cpus").exists():  # a new cpuset cgroup starts with no CPU and no memory node
                    for key in ("cpuset.cpus", "cpuset.mems"):
                        (d / key).write_text((d.parent / key).read_text())

    # ---- containerd ----------------------------------------------------------------------------------
    def _start_containerd(self, node: Node) -> None:
        d = node.dir
        for sub in ("root", "state", "runc", "opt", "net.d", "ipam"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        config = d / "containerd.toml"
        config.write_text(CONTAINERD_CONFIG.format(dir=d, pause=PAUSE_IMAGE, cni_bin=CNI_BIN_DIR))
        (d / "net.d" / "10-gang-rn.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0",
            "name": node.name,
            "plugins": [
                {"type": "bridge", "bridge": node.bridge, "isGateway": True, "isDefaultGateway": True,
                 "ipMasq": False, "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": node.subnet}]], "dataDir": str(d / "ipam")}},
                # Docker's FORWARD policy is DROP: without these rules pods on two bridges cannot talk.
                {"type": "firewall", "backend": "iptables"},
            ],
        }, indent=1))  # fmt: skip

        def ready() -> bool:
            return self.ctr(node, "version", check=False).returncode == 0

        self.plane.start_component(f"containerd-{node.name}", [CONTAINERD, "--config", str(config)], ready,
                                   timeout=self.start_timeout)

    def ctr(self, node: Node, *args: str, check: bool = True, stdin: IO[bytes] | None = None
            ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([CTR, "--address", str(node.socket), "--namespace", "k8s.io", *args],
                              stdin=stdin if stdin is not None else subprocess.DEVNULL, capture_output=True,
                              timeout=600, check=False)
        out = subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(errors="replace"),
                                          proc.stderr.decode(errors="replace"))
        if check and proc.returncode != 0:
            raise RealNodesError(f"ctr {' '.join(args)} on {node.name} exited {proc.returncode}: {out.stderr}")
        return out

    def import_images(self, images: Iterable[str]) -> None:
        """``docker save`` the images into one archive and import it into every node's containerd."""
        names = list(dict.fromkeys(images))
        if not names:
            return
        archive = RUN_DIR / "images.tar"
        t0 = time.monotonic()
        proc = subprocess.run([DOCKER, "save", "-o", str(archive), *names], capture_output=True, text=True,
                              check=False)
        if proc.returncode != 0:
            raise RealNodesError(f"docker save {' '.join(names)} failed (build them: make image; "
                                 f"hack/real-nodes/build.sh): {proc.stderr.strip()}")
        saved = time.monotonic() - t0
        for node in self.nodes:
            with archive.open("rb") as f:
                self.ctr(node, "images", "import", "-", stdin=f)
        archive.unlink()
        self.log(f"[real-nodes] images {', '.join(names)}: docker save {saved:.1f}s, imported into "
                 f"{len(self.nodes)} containerd in {time.monotonic() - t0 - saved:.1f}s")

    def tag_images(self, aliases: Mapping[str, str]) -> None:
        """In every node's containerd, tag each image of ``aliases``' values with its key (``{new: existing}``):
        pods naming an image that cannot be pulled here then find one (``IfNotPresent``)."""
        for node in self.nodes:
            for new, existing in aliases.items():
                self.ctr(node, "images", "tag", "--force", _qualified(existing), _qualified(new))

    # ---- kubelet ------------------------------------------------------------------------------------
    def _grant_node_rbac(self) -> None:
        """The control plane authorizes with RBAC alone (no Node authorizer): the bootstrap ClusterRole
        ``system:node`` is bound to the group ``system:nodes``, as clusters did before the Node authorizer."""
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "gang-extender:real-nodes"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}],
        }  # fmt: skip
        try:
            self.plane.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
        except ApiError as exc:
            if exc.status != 409:
                raise

    def _start_kubelet(self, node: Node) -> None:
        d = node.dir
        for sub in ("kubelet", "pod-logs", "volume-plugins", "pki", "manifests"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        kubeconfig = self.plane.user_kubeconfig(f"system:node:{node.name}", ["system:nodes"],
                                                name=f"kubelet-{node.name}")
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": "127.0.0.1",
            "port": node.port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": node.healthz_port,
            # A test setting, not a production one: the kubelet listens on 127.0.0.1 only.
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": f"unix://{node.socket}",
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": node.cgroup_root,
            "failCgroupV1": False,
            "failSwapOn": False,
            "podLogsDir": str(d / "pod-logs"),
            "staticPodPath": str(node.static_pod_dir),
            "volumePluginDir": str(d / "volume-plugins"),
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            # Images cannot be pulled again here: never collect them.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "resolvConf": "/etc/resolv.conf",
            "nodeStatusReportFrequency": "10s",
            "syncFrequency": "10s",
            "fileCheckFrequency": "10s",
        }  # fmt: skip
        (d / "kubelet.yaml").write_text(json.dumps(config, indent=1))

        def healthy() -> bool:
            return _http_ok(f"http://127.0.0.1:{node.healthz_port}/healthz")

        self.plane.start_component(f"kubelet-{node.name}", [
            str(self.bin_dir / "kubelet"),
            f"--config={d / 'kubelet.yaml'}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={d / 'kubelet'}",
            f"--cert-dir={d / 'pki'}",
            f"--hostname-override={node.name}",
            f"--node-ip={self.node_ip}",
            "--v=1",
        ], healthy, timeout=self.start_timeout)  # fmt: skip

    def _wait_node_ready(self, node: Node) -> None:
        def ready() -> bool:
            try:
                obj = self.plane.request("GET", f"/api/v1/nodes/{node.name}")
            except ApiError:
                return False
            return any(c["type"] == "Ready" and c["status"] == "True" for c in obj["status"].get("conditions", []))

        try:
            wait_for(ready, timeout=self.start_timeout, what=f"node {node.name} Ready")
        except TimeoutError as exc:
            raise RealNodesError(f"{exc}; last lines of the kubelet's log:\n"
                                 + tail(self.plane.log_path(f"kubelet-{node.name}"))) from exc

    # ---- kube-proxy ---------------------------------------------------------------------------------
    def _start_kube_proxy(self) -> None:
        """One kube-proxy for the machine: the nodes share its network namespace, so one set of rules
        serves both (a second kube-proxy would fight the first over the same chains)."""
        kubeconfig = self.plane.user_kubeconfig("system:kube-proxy", name="kube-proxy")
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": kubeconfig},
            "hostnameOverride": self.nodes[0].name,
            "mode": "iptables",
            "clusterCIDR": POD_CIDR,
            "healthzBindAddress": f"127.0.0.1:{PROXY_HEALTHZ_PORT}",
            "metricsBindAddress": f"127.0.0.1:{PROXY_METRICS_PORT}",
            # Leave the host's conntrack limits and timeouts alone, and 127.0.0.1 out of NodePorts (which
            # would need net.ipv4.conf.all.route_localnet=1).
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s",
                          "udpTimeout": "0s", "udpStreamTimeout": "0s"},
            "iptables": {"localhostNodePorts": False, "syncPeriod": "30s", "minSyncPeriod": "1s"},
            "nodePortAddresses": [f"{self.node_ip}/32"],
        }  # fmt: skip
        path = RUN_DIR / "kube-proxy.yaml"
        path.write_text(json.dumps(config, indent=1))
        self.plane.start_component("kube-proxy", [str(self.bin_dir / "kube-proxy"), f"--config={path}", "--v=1"],
                                   lambda: _http_ok(f"http://127.0.0.1:{PROXY_HEALTHZ_PORT}/healthz"),
                                   timeout=self.start_timeout)

    # ---- stop ---------------------------------------------------------------------------------------
    def drain(self, timeout: float = 90.0) -> None:
        """Cordon the nodes and delete their pods, waiting until the kubelets have stopped them (their
        sandboxes' network namespaces and CNI addresses go with them)."""
        for node in self.nodes:
            with contextlib.suppress(ApiError):
                self.plane.request("PATCH", f"/api/v1/nodes/{node.name}", {"spec": {"unschedulable": True}},
                                   content_type="application/merge-patch+json")

        def pods_left() -> list[dict[str, Any]]:
            found = []
            for node in self.nodes:
                found += self.plane.request("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node.name}")["items"]
            return found

        for pod in pods_left():
            meta = pod["metadata"]
            with contextlib.suppress(ApiError):
                self.plane.request("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                                   {"gracePeriodSeconds": 2})
        wait_for(lambda: not pods_left(), timeout=timeout, interval=0.5, what="the nodes' pods to be gone")

    def stop(self) -> None:
        """Drain (if the API server answers), stop kube-proxy, the kubelets and containerd, then undo
        every host change (:func:`teardown`). Idempotent."""
        if self._stopped or not self._started:
            return
        self._stopped = True
        t0 = time.monotonic()
        for node in self.nodes:  # static pods first: the kubelets would re-create their mirror pods
            for manifest in node.static_pod_dir.glob("*"):
                manifest.unlink()
        try:
            if self.plane.is_running("kube-apiserver") and all(
                    self.plane.is_running(f"kubelet-{n.name}") for n in self.nodes):
                try:
                    self.drain()
                except (TimeoutError, ControlPlaneError, OSError) as exc:
                    self.log(f"[real-nodes] drain failed, tearing down regardless: {exc}")
            self.plane.stop_component("kube-proxy")
            for node in self.nodes:
                self.plane.stop_component(f"kubelet-{node.name}")
            for node in self.nodes:
                self.plane.stop_component(f"containerd-{node.name}")
            teardown(self.log)
        finally:
            if self._lock is not None:
                self._lock.close()
                self._lock = None
        self.log(f"[real-nodes] stopped and cleaned up in {time.monotonic() - t0:.1f}s")


def _qualified(image: str) -> str:
    """The name containerd's CRI knows an image by (``docker save`` keeps Docker's short names, which CRI
    normalizes: ``gang-extender:dev`` is ``docker.io/library/gang-extender:dev``)."""
    first = image.split("/", 1)[0]
    if "/" not in image:
        return f"docker.io/library/{image}"
    if "." not in first and ":" not in first and first != "localhost":
        return f"docker.io/{image}"
    return image


def _http_ok(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


CONTAINERD_CONFIG: Final = """\
# A private containerd for one real node (hack/real-nodes/realnodes.py): its own root, state, sockets,
# runc root and opt directory; nothing shared with Docker's containerd.
version = 2
root = "{dir}/root"
state = "{dir}/state"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing",
]

[grpc]
  address = "{dir}/containerd.sock"

[ttrpc]
  address = "{dir}/containerd.sock.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{dir}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  # root here lacks CAP_SYS_RESOURCE: asking runc for a lower oom_score_adj than containerd's own makes
  # every sandbox fail ("can't get final child's PID from pipe: EOF").
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  # Pods' network namespaces under the state directory, not in /run/netns.
  netns_mounts_under_state_dir = true

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{dir}/runc"

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{dir}/net.d"
    max_conf_num = 1
"""


# -------------------------------------------------------------------------------------------------- CLI
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="control plane + real nodes until Ctrl-C/SIGTERM")
    up.add_argument("--nodes", type=int, default=2)
    up.add_argument("--image", action="append", default=[], help="a Docker image to import (repeatable)")
    up.add_argument("--keep", action="store_true", help="keep the control plane's work directory")
    up.add_argument("--path", action="append", default=[], metavar="DIR",
                    help="a directory the printed environment line puts first on PATH (repeatable; "
                         "kubectl's is always there)")
    sub.add_parser("down", help="undo what a killed run left on the machine (from its state.json)")
    args = parser.parse_args(argv)

    def err(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    if args.command == "down":
        LOCK.parent.mkdir(parents=True, exist_ok=True)
        with LOCK.open("w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                err(f"a real-node cluster is running (lock {LOCK}): stop it instead")
                return 1
            done = teardown(err)
        err("[real-nodes] nothing to undo" if not done else "[real-nodes] done")
        return 0

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: stop.set())
    bin_dir = find_bin_dir()
    with ControlPlane(bin_dir, log=err, keep=args.keep, advertise_address=node_ip()) as plane:
        plane.start_scheduler()
        with RealNodes(plane, bin_dir, count=args.nodes, images=args.image, log=err):
            print(plane.kubeconfig, flush=True)
            path = ":".join(dict.fromkeys([str(bin_dir), *(str(Path(d).resolve()) for d in args.path)]))
            err("[real-nodes] ready. In another terminal (Ctrl-C here stops the cluster and cleans up):")
            err(f"export KUBECONFIG={plane.kubeconfig} PATH={path}:$PATH")
            while not stop.wait(1.0):
                pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
