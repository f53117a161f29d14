"""The identities the shipped topologies run the extender as, read from the manifests themselves.

Owns: building a kustomization (``built``), installing the objects every topology shares (``install``:
the CRD and manifests/rbac, waiting for the token controller to fill the Secret gang-extender-token),
and ``extender_kubeconfig``: credentials equivalent to the ones the extender of a topology really
uses, found by following its manifest (the sidecar's in-cluster token mount to its Secret; the static
pod's ``--kubeconfig`` to the file ``extender-kubeconfig.sh`` writes). Must not: invent credentials the
manifests do not lead to (a TokenRequest token would pass whatever the manifests say).
"""

from __future__ import annotations

import base64
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from controlplane import ControlPlane, wait_for, write_kubeconfig
from support import ROOT

from extender.errors import KubeError

MANIFESTS = ROOT / "manifests"
NAMESPACE = "gang-scheduler"
EXTENDER_SA = "gang-extender"
EXTENDER_USER = f"system:serviceaccount:{NAMESPACE}:{EXTENDER_SA}"
TOKEN_SECRET = "gang-extender-token"
IN_CLUSTER = "/var/run/secrets/kubernetes.io/serviceaccount"  # where in-cluster clients read their token
TOPOLOGIES = ("second-scheduler", "second-scheduler-tls", "ha", "default-scheduler")
STATIC_POD = MANIFESTS / "default-scheduler" / "gang-extender-static-pod.yaml"
KUBECONFIG_SCRIPT = MANIFESTS / "default-scheduler" / "extender-kubeconfig.sh"


def built(bin_dir: Path, directory: str) -> list[dict[str, Any]]:
    """``kubectl kustomize`` output, no cluster needed (the kustomize that ``kubectl apply -k`` runs)."""
    out = subprocess.run([str(bin_dir / "kubectl"), "kustomize", str(MANIFESTS / directory)], capture_output=True,
                         text=True, check=True, timeout=60, stdin=subprocess.DEVNULL).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def static_pod() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(STATIC_POD.read_text())
    return doc


def extender_pod(bin_dir: Path, topology: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(pod spec, extender container) of a topology, as shipped."""
    if topology == "default-scheduler":
        pod = static_pod()["spec"]
    else:
        deployment = next(d for d in built(bin_dir, topology) if d["kind"] == "Deployment")
        pod = deployment["spec"]["template"]["spec"]
    container = next(c for c in pod.get("initContainers", []) + pod["containers"] if c["name"] == "gang-extender")
    return pod, container


def _flag(args: list[str], name: str) -> str | None:
    return next((a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")), None)


def install(cp: ControlPlane) -> ControlPlane:
    """The CRD (the examples need it) and manifests/rbac, applied for real; returns once the token
    controller has filled the extender's token Secret."""
    cp.kubectl("apply", "-k", str(MANIFESTS / "crds"))
    wait_for(lambda: "podgroups" in cp.kubectl("api-resources", "--api-group=scheduling.x-k8s.io").stdout,
             timeout=30, what="the PodGroup CRD to be served")
    cp.kubectl("apply", "-k", str(MANIFESTS / "rbac"))

    def filled() -> bool:
        data = cp.request("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/{TOKEN_SECRET}").get("data") or {}
        return {"token", "ca.crt", "namespace"} <= set(data)

    wait_for(filled, timeout=30, what=f"the token controller to fill {NAMESPACE}/{TOKEN_SECRET}")
    return cp


def _from_secret_mount(cp: ControlPlane, pod: dict[str, Any], container: dict[str, Any], workdir: Path) -> str:
    """What the extender's in-cluster client loads: the token and CA of the volume mounted at
    IN_CLUSTER in its container (a Secret), and the API server's address."""
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == IN_CLUSTER)
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    secret = cp.request("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/{volume['secret']['secretName']}")
    data = {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}
    ca = workdir / "in-cluster-ca.crt"
    ca.write_text(data["ca.crt"])
    path = workdir / "in-cluster.kubeconfig"
    return str(write_kubeconfig(path, cp.server, ca, user="in-cluster", token=data["token"],
                                namespace=data["namespace"]))


def _from_static_pod_kubeconfig(cp: ControlPlane, pod: dict[str, Any], container: dict[str, Any],
                                workdir: Path) -> str:
    """The file the static pod's ``--kubeconfig`` names, as extender-kubeconfig.sh writes it."""
    kubeconfig = _flag(container["args"], "kubeconfig")
    assert kubeconfig is not None, "the static pod names no --kubeconfig"
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == kubeconfig)
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["hostPath"]["path"] == kubeconfig
    path = workdir / Path(kubeconfig).name
    env = {**os.environ, "KUBECTL": str(cp.bin_dir / "kubectl"), "KUBECONFIG": cp.kubeconfig,
           "OWNER": f"{os.getuid()}:{os.getgid()}"}
    proc = subprocess.run(["sh", str(KUBECONFIG_SCRIPT), cp.server, str(path)], capture_output=True, text=True,
                          env=env, timeout=60, stdin=subprocess.DEVNULL, check=False)
    assert proc.returncode == 0, proc.stderr
    assert path.stat().st_mode & 0o777 == 0o400, oct(path.stat().st_mode)
    return str(path)


def extender_kubeconfig(cp: ControlPlane, topology: str, workdir: Path) -> str:
    """Credentials equivalent to those the extender of ``topology`` runs with (see the module doc)."""
    pod, container = extender_pod(cp.bin_dir, topology)
    workdir = workdir / f"identity-{topology}"
    workdir.mkdir(parents=True, exist_ok=True)
    if topology == "default-scheduler":
        return _from_static_pod_kubeconfig(cp, pod, container, workdir)
    return _from_secret_mount(cp, pod, container, workdir)


def whoami(cp: ControlPlane, kubeconfig: str) -> str:
    """The user name the API server authenticates ``kubeconfig`` as (``kubectl auth whoami``)."""
    proc = subprocess.run([str(cp.bin_dir / "kubectl"), f"--kubeconfig={kubeconfig}", "auth", "whoami", "-o",
                           "jsonpath={.status.userInfo.username}"], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def refused(what: str, call: Callable[[], Any]) -> KubeError:
    """The API error ``call`` raises; the test fails (``what``: allowed) if the API server allows it."""
    try:
        call()
    except KubeError as exc:
        return exc
    raise AssertionError(f"{what}: allowed")


def wait_until_in_force(policy: str, probe: Callable[[], Any], by_policy: Callable[[KubeError], bool]) -> None:
    """Until the API server's policy informer has ``policy`` (about a second after it is applied): the
    dry-run request ``probe`` is refused, and ``by_policy`` says by it (any other error is raised)."""
    def in_force() -> bool:
        try:
            probe()
        except KubeError as exc:
            if by_policy(exc):
                return True
            raise
        return False

    wait_for(in_force, timeout=30, what=f"the ValidatingAdmissionPolicy {policy} to be in force")
