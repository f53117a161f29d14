"""The deployment artefacts under manifests/, validated against a real kube-apiserver and kube-scheduler.

- Every file under manifests/ is accounted for: API objects go through ``kubectl apply --dry-run=server``
  (kustomize directories with ``-k``), KubeSchedulerConfigurations start a real kube-scheduler, the kind
  configuration is checked for what hack/kind-e2e.sh relies on.
- gang-extender runs, becomes ready and binds a gang with nothing but its ServiceAccount (what it may
  do, and what it may not, is tests/e2e/test_least_privilege.py).
- Both topologies run as shipped, each process with the credentials its manifest gives it: the second
  scheduler with the ServiceAccount gang-scheduler, leader election and sidecar configuration, its
  extender with the token Secret of the ServiceAccount gang-extender; the default scheduler's
  configuration with kube-scheduler's own identity (which gains nothing) and the extender with the
  kubeconfig extender-kubeconfig.sh writes (as the static pod does).
- Why the default-scheduler topology uses a static pod: with the extender down, kube-scheduler schedules
  no pod at all, a DaemonSet's included.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import json
import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from controlplane import ControlPlane, ControlPlaneError, free_ports, tail, wait_for
from identities import EXTENDER_SA, EXTENDER_USER, MANIFESTS, NAMESPACE, extender_kubeconfig, install, whoami
from identities import built as _built
from support import (
    ROOT,
    Extender,
    Sampler,
    bound,
    events,
    https_ok,
    metrics_here,
    metrics_only,
    scheduler_config,
    spawn_scheduler_as_pod,
    stop_process_group,
)

from extender import config
from extender.config import Settings

pytestmark = pytest.mark.e2e

SCHEDULER_SA = "gang-scheduler"
WAIT = 60.0

# ---------------------------------------------------------------------------------- inventory
def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _kustomization_inputs(directory: Path) -> set[Path]:
    """Files a kustomization.yaml reads itself (resources that are files, configMapGenerator files)."""
    kust = yaml.safe_load((directory / "kustomization.yaml").read_text())
    inputs = {(directory / r).resolve() for r in kust.get("resources", []) if (directory / r).is_file()}
    for generator in kust.get("configMapGenerator", []):
        inputs |= {(directory / f.rpartition("=")[2]).resolve() for f in generator.get("files", [])}
    inputs |= {(directory / p["path"]).resolve() for p in kust.get("patches", []) if "path" in p}
    return inputs


def _inventory() -> dict[str, list[Path]]:
    """Every YAML file under manifests/, by what it is and how it is checked."""
    found: dict[str, list[Path]] = {"kustomize_dirs": [], "scheduler_configs": [], "kind_configs": [],
                                     "kustomized": [], "loose_api_objects": []}
    yamls = sorted(p for p in MANIFESTS.rglob("*.yaml") if p.name != "kustomization.yaml")
    found["kustomize_dirs"] = sorted(p.parent for p in MANIFESTS.rglob("kustomization.yaml"))
    kustomized = set().union(*(_kustomization_inputs(d) for d in found["kustomize_dirs"]))
    for path in yamls:
        api_versions = {str(d.get("apiVersion", "")) for d in _docs(path) if isinstance(d, dict)}  # not patches
        if any(v.startswith("kubescheduler.config.k8s.io/") for v in api_versions):
            found["scheduler_configs"].append(path)
        elif any(v.startswith("kind.x-k8s.io/") for v in api_versions):
            found["kind_configs"].append(path)
        elif path.resolve() in kustomized:
            found["kustomized"].append(path)
        else:
            found["loose_api_objects"].append(path)
    return found


INVENTORY = _inventory()


def _rel(path: Path) -> str:
    return str(path.relative_to(MANIFESTS)) or "."


def _extenders(config: dict[str, Any]) -> list[dict[str, Any]]:
    return list(config.get("extenders") or [])


TLS_FILES = {"caFile", "certFile", "keyFile"}


def _without_tls(extender: dict[str, Any]) -> dict[str, Any]:
    """An HTTPS extender entry as its plain-HTTP equivalent (the TLS variant must differ in nothing else)."""
    if not extender.get("enableHTTPS"):
        return extender
    assert set(extender["tlsConfig"]) == TLS_FILES, extender["tlsConfig"]
    assert extender["urlPrefix"].startswith("https://127.0.0.1:")
    plain = {k: v for k, v in extender.items() if k not in ("enableHTTPS", "tlsConfig")}
    return {**plain, "urlPrefix": "http://" + extender["urlPrefix"].removeprefix("https://")}


def _seconds(duration: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)", duration)
    assert match, duration
    return float(match[1]) * {"ms": 0.001, "s": 1.0, "m": 60.0}[match[2]]


def _flag(args: list[str], name: str) -> str | None:
    for arg in args:
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
    return None


# ------------------------------------------------------------------------------ static checks
def test_every_manifest_is_accounted_for() -> None:
    inv = INVENTORY
    assert inv["loose_api_objects"] == [MANIFESTS / "default-scheduler" / "gang-extender-static-pod.yaml"], inv
    assert sorted(_rel(p) for p in inv["scheduler_configs"]) == [
        "default-scheduler/kube-scheduler-config.yaml", "scheduler-config-filter-gated.yaml", "scheduler-config.yaml",
        "second-scheduler-tls/kube-scheduler-config.yaml", "second-scheduler/kube-scheduler-config.yaml"]
    assert [_rel(p) for p in inv["kind_configs"]] == ["kind/kind-config.yaml"]
    assert sorted(_rel(d) for d in inv["kustomize_dirs"]) == [
        "crds", "default-scheduler", "examples", "ha", "rbac", "second-scheduler", "second-scheduler-tls"]
    # Every directory that holds API objects is a kustomization.
    for path in inv["kustomized"] + inv["loose_api_objects"]:
        assert (path.parent / "kustomization.yaml").is_file(), path
    for directory in inv["kustomize_dirs"]:
        kust = yaml.safe_load((directory / "kustomization.yaml").read_text())
        for resource in kust.get("resources", []):
            assert (directory / resource).exists(), f"{directory}/kustomization.yaml: missing {resource}"


def test_scheduler_configurations_agree(k8s_bin_dir: Path) -> None:
    """One extender entry everywhere; every shipped extender knows kube-scheduler's httpTimeout (its held
    binds are answered before it), and every scheduler's pod back-off is shorter than a hold."""
    reference = _extenders(_docs(MANIFESTS / "scheduler-config.yaml")[0])
    assert len(reference) == 1 and reference[0]["bindVerb"] == "bind" and reference[0]["ignorable"] is False
    # The filter-gated configuration differs in one thing: another binder binds (no bindVerb).
    gated = [{k: v for k, v in e.items() if k != "bindVerb"} for e in reference]
    for path in INVENTORY["scheduler_configs"]:
        (config,) = _docs(path)
        assert config["kind"] == "KubeSchedulerConfiguration"
        expected = gated if path.name == "scheduler-config-filter-gated.yaml" else reference
        assert [_without_tls(e) for e in _extenders(config)] == expected, \
            f"{path}: extenders differ from manifests/scheduler-config.yaml"
        hold = _seconds(reference[0]["httpTimeout"]) - Settings().bind_answer_margin_seconds
        assert config.get("podMaxBackoffSeconds", 10) < hold, f"{path}: recycled members would miss their siblings"
    http_timeout = _seconds(reference[0]["httpTimeout"])
    assert Settings().scheduler_http_timeout_seconds == http_timeout

    second = {d["kind"]: d for d in _built(k8s_bin_dir, "second-scheduler")}
    pod = second["Deployment"]["spec"]["template"]["spec"]
    (sidecar,) = pod["initContainers"]
    (scheduler,) = pod["containers"]
    static_pod = _docs(MANIFESTS / "default-scheduler" / "gang-extender-static-pod.yaml")[0]["spec"]["containers"][0]
    static_volumes = _docs(MANIFESTS / "default-scheduler" / "gang-extender-static-pod.yaml")[0]["spec"]["volumes"]
    for container, volumes in ((sidecar, pod["volumes"]), (static_pod, static_volumes)):
        assert float(_flag(container["args"], "scheduler-http-timeout-seconds")
                     or Settings().scheduler_http_timeout_seconds) == http_timeout, container["name"]
        assert _flag(container["args"], "host") == "127.0.0.1"
        assert reference[0]["urlPrefix"] == f"http://127.0.0.1:{_flag(container['args'], 'port')}"
        if container is static_pod:  # one per control-plane node: only the called one leads, releases on its Lease
            assert _flag(container["args"], "leader-election") == "on"
            assert _flag(container["args"], "release-journal") is None
            continue
        # The release journal must outlive the container (a crash restarts the container, not the pod):
        # it sits on an emptyDir volume, the root filesystem being read-only.
        journal = _flag(container["args"], "release-journal")
        assert journal is not None, container["name"]
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        mount = next(path for path in mounts if journal.startswith(path.rstrip("/") + "/"))
        assert "emptyDir" in next(v for v in volumes if v["name"] == mounts[mount]), container["name"]
    # The scheduler reads the generated ConfigMap where --config points.
    mount = next(m for m in scheduler["volumeMounts"] if m["name"] == "config")
    assert _flag(scheduler["command"], "config") == mount["mountPath"] + "/config.yaml"
    volume = next(v for v in pod["volumes"] if v["name"] == "config")
    assert volume["configMap"]["name"] == second["ConfigMap"]["metadata"]["name"]
    assert pod["serviceAccountName"] == SCHEDULER_SA
    configured = yaml.safe_load(second["ConfigMap"]["data"]["config.yaml"])
    assert configured["profiles"] == [{"schedulerName": "gang-scheduler"}]
    assert configured["leaderElection"]["resourceName"] == "gang-scheduler"
    assert configured["leaderElection"]["resourceNamespace"] == NAMESPACE


def _settings(args: list[str]) -> Settings:
    """The extender's settings from a container's args, validated as ``gang-extender serve`` does."""
    parser = argparse.ArgumentParser()
    config.add_arguments(parser)
    return config.load(vars(parser.parse_args(args)), environ={})


def test_ha_overlay_runs_two_electing_replicas_spread_over_nodes(k8s_bin_dir: Path) -> None:
    """manifests/ha: the second scheduler's pod twice, never two on one node, one replica replaced at a
    time and kept through voluntary disruptions; both processes elect a leader, each on its own Lease,
    and the extender's Lease is the one its Role lets it read and update."""
    built = _built(k8s_bin_dir, "ha")
    kinds = {d["kind"]: d for d in built}
    deployment, pdb = kinds["Deployment"], kinds["PodDisruptionBudget"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    (spread,) = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["labelSelector"]["matchLabels"].items() <= labels.items()
    assert pdb["metadata"]["namespace"] == deployment["metadata"]["namespace"] == NAMESPACE
    assert pdb["spec"]["minAvailable"] == 1 and pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()

    pod = deployment["spec"]["template"]["spec"]
    (sidecar,) = pod["initContainers"]
    settings = _settings(sidecar["args"])
    assert settings.leader_election == "on" and settings.release_journal is None, sidecar["args"]
    assert settings.lease_namespace == NAMESPACE
    scheduler_config_ = yaml.safe_load(kinds["ConfigMap"]["data"]["config.yaml"])
    election = scheduler_config_["leaderElection"]
    assert election["leaderElect"] is True and election["resourceNamespace"] == NAMESPACE
    assert election["resourceName"] != settings.lease_name, "kube-scheduler and the extender share a Lease"
    # Everything but replicas, strategy, affinity and the extender's flags is the single replica's.
    base = {d["kind"]: d for d in _built(k8s_bin_dir, "second-scheduler")}
    assert kinds["ConfigMap"] == base["ConfigMap"]
    assert {k: v for k, v in kinds.items() if k not in ("Deployment", "PodDisruptionBudget")} == {
        k: v for k, v in base.items() if k != "Deployment"}
    base_pod = base["Deployment"]["spec"]["template"]["spec"]
    assert {k: v for k, v in pod.items() if k not in ("affinity", "initContainers")} == {
        k: v for k, v in base_pod.items() if k != "initContainers"}
    (base_sidecar,) = base_pod["initContainers"]
    assert {k: v for k, v in sidecar.items() if k != "args"} == {k: v for k, v in base_sidecar.items() if k != "args"}
    assert [a for a in sidecar["args"] if not a.startswith("--lease")] == [
        *(a for a in base_sidecar["args"] if not a.startswith("--release-journal")), "--leader-election=on"]
    # The Role of manifests/rbac: get and update of exactly the extender's Lease, create (unnamed).
    (role,) = [d for d in built if d["kind"] == "Role" and d["metadata"]["name"] == "gang-extender:leases"]
    assert role["metadata"]["namespace"] == settings.lease_namespace
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [settings.lease_name],
         "verbs": ["get", "update"]}]


def test_tls_overlay_wires_the_secret_into_both_containers(k8s_bin_dir: Path) -> None:
    built = {d["kind"]: d for d in _built(k8s_bin_dir, "second-scheduler-tls")}
    pod = built["Deployment"]["spec"]["template"]["spec"]
    (sidecar,) = pod["initContainers"]
    (scheduler,) = pod["containers"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert volume["secret"]["secretName"] == "gang-extender-tls"
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]  # 0440 files readable
    mounts = {c["name"]: next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == "tls")
              for c in (sidecar, scheduler)}
    directory = mounts["gang-extender"]
    assert mounts["kube-scheduler"] == directory
    assert {_flag(sidecar["args"], f) for f in ("tls-cert-file", "tls-key-file", "tls-client-ca-file")} == {
        f"{directory}/tls.crt", f"{directory}/tls.key", f"{directory}/ca.crt"}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        command = " ".join(sidecar[probe]["exec"]["command"])
        assert "https://127.0.0.1:8888/" in command and "client.crt" in command, probe
    config = yaml.safe_load(built["ConfigMap"]["data"]["config.yaml"])
    (extender,) = config["extenders"]
    assert extender["urlPrefix"] == "https://127.0.0.1:8888" and extender["enableHTTPS"] is True
    assert extender["tlsConfig"] == {"caFile": f"{directory}/ca.crt", "certFile": f"{directory}/client.crt",
                                     "keyFile": f"{directory}/client.key"}
    # everything but TLS is the base's
    base = {d["kind"]: d for d in _built(k8s_bin_dir, "second-scheduler")}
    base_config = yaml.safe_load(base["ConfigMap"]["data"]["config.yaml"])
    assert {k: v for k, v in config.items() if k != "extenders"} == {
        k: v for k, v in base_config.items() if k != "extenders"}
    assert _without_tls(extender) == base_config["extenders"][0]


def test_containers_are_locked_down(k8s_bin_dir: Path) -> None:
    """Every shipped container: read-only root file system, no privilege escalation, no capabilities,
    non-root (65532; the static pod's kubeconfig is its own file, owned by 65532); the image's default
    user is 65532."""
    pods = {directory: next(d for d in _built(k8s_bin_dir, directory) if d["kind"] == "Deployment")
            ["spec"]["template"]["spec"] for directory in ("second-scheduler", "second-scheduler-tls")}
    pods["static"] = _docs(MANIFESTS / "default-scheduler" / "gang-extender-static-pod.yaml")[0]["spec"]
    for where, pod in pods.items():
        for container in pod.get("initContainers", []) + pod["containers"]:
            context = {**pod.get("securityContext", {}), **container["securityContext"]}
            name = f"{where}/{container['name']}"
            assert context["readOnlyRootFilesystem"] is True, name
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["capabilities"] == {"drop": ["ALL"]}, name
            assert context.get("privileged", False) is False, name
            assert context["runAsNonRoot"] is True and context["runAsUser"] == 65532, name
            writable = {m["mountPath"] for m in container.get("volumeMounts", []) if not m.get("readOnly")}
            assert writable <= {"/tmp"}, (name, writable)  # the emptyDir gunicorn needs, nothing else
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^USER 65532(:65532)?$", dockerfile, re.MULTILINE), "the image must not default to root"


def test_kind_configuration() -> None:
    (config,) = _docs(MANIFESTS / "kind" / "kind-config.yaml")
    assert config["featureGates"]["GenericWorkload"] is True
    assert config["runtimeConfig"]["scheduling.k8s.io/v1alpha1"] == "true"
    (control_plane,) = [n for n in config["nodes"] if n["role"] == "control-plane"]
    assert all(re.fullmatch(r"kindest/node:v1\.35\.\d+(@sha256:[0-9a-f]{64})?", n["image"]) for n in config["nodes"])
    mounts = {m["containerPath"]: m["hostPath"] for m in control_plane["extraMounts"]}
    assert (ROOT / mounts["/etc/kubernetes/scheduler-config.yaml"]).is_file()
    (patch,) = [yaml.safe_load(p) for p in control_plane["kubeadmConfigPatches"]]
    assert patch["apiVersion"] == "kubeadm.k8s.io/v1beta3"  # what kind generates below Kubernetes 1.36
    scheduler = patch["scheduler"]
    assert scheduler["extraArgs"]["config"] == "/etc/kubernetes/scheduler-config.yaml"
    assert scheduler["extraVolumes"][0]["hostPath"] == "/etc/kubernetes/scheduler-config.yaml"
    # The configuration kind mounts points kube-scheduler at kubeadm's kubeconfig.
    (scheduler_cfg,) = _docs(ROOT / mounts["/etc/kubernetes/scheduler-config.yaml"])
    assert scheduler_cfg["clientConnection"]["kubeconfig"] == "/etc/kubernetes/scheduler.conf"


# ------------------------------------------------------------------------------ cluster checks
@pytest.fixture(scope="module")
def installed(control_plane: ControlPlane) -> ControlPlane:
    """The CRD (the examples need it) and manifests/rbac, applied for real (the token Secret filled)."""
    return install(control_plane)


def _assert_clean_dry_run(proc: subprocess.CompletedProcess[str], what: str) -> None:
    assert proc.returncode == 0, f"{what}: {proc.stderr}"
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines and all(line.endswith("(server dry run)") for line in lines), proc.stdout
    assert "warning" not in proc.stderr.lower(), f"{what}: {proc.stderr}"  # e.g. Pod Security warnings


@pytest.mark.parametrize("directory", INVENTORY["kustomize_dirs"], ids=_rel)
def test_server_dry_run_kustomization(installed: ControlPlane, directory: Path) -> None:
    proc = installed.kubectl("apply", "-k", str(directory), "--dry-run=server", "--validate=strict", check=False)
    _assert_clean_dry_run(proc, _rel(directory))


@pytest.mark.parametrize("path", INVENTORY["loose_api_objects"], ids=_rel)
def test_server_dry_run_loose_manifest(installed: ControlPlane, path: Path) -> None:
    proc = installed.kubectl("apply", "-f", str(path), "--dry-run=server", "--validate=strict", check=False)
    _assert_clean_dry_run(proc, _rel(path))


@pytest.mark.parametrize("directory", ["second-scheduler", "second-scheduler-tls", "ha"])
def test_second_scheduler_pod_passes_restricted_pod_security(installed: ControlPlane, directory: str) -> None:
    """Dry-run warnings only hint at Pod Security for a Deployment; creating its Pod enforces it."""
    cp = installed
    labels = cp.request("GET", f"/api/v1/namespaces/{NAMESPACE}")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    deployment = next(d for d in _built(cp.bin_dir, directory) if d["kind"] == "Deployment")
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "pod-security-probe", "namespace": NAMESPACE,
                        "labels": deployment["spec"]["template"]["metadata"]["labels"]},
           "spec": {**deployment["spec"]["template"]["spec"], "serviceAccountName": "default"}}  # not created yet
    proc = cp.kubectl("create", "-f", "-", "--dry-run=server", input=json.dumps(pod), check=False)
    assert proc.returncode == 0 and "warning" not in proc.stderr.lower(), proc.stderr
    # The check has teeth: the same pod without its hardening is refused.
    loose = copy.deepcopy(pod)
    del loose["spec"]["initContainers"][0]["securityContext"]["capabilities"]
    proc = cp.kubectl("create", "-f", "-", "--dry-run=server", input=json.dumps(loose), check=False)
    assert proc.returncode != 0 and 'violates PodSecurity "restricted' in proc.stderr, proc.stderr


@pytest.mark.parametrize("path", INVENTORY["scheduler_configs"], ids=_rel)
def test_kube_scheduler_starts_with_configuration(installed: ControlPlane, path: Path) -> None:
    (config,) = _docs(path)
    for extender in _extenders(config):
        if extender.get("enableHTTPS"):  # the Secret's files, as the pod mounts them
            assert installed.pki is not None
            pair = installed.pki.issue("tls-config-client", "system:kube-scheduler")
            extender["tlsConfig"] = {"caFile": str(installed.pki.ca.cert), "certFile": str(pair.cert),
                                     "keyFile": str(pair.key)}
    config.pop("clientConnection", None)  # start_scheduler points it at the test scheduler's kubeconfig
    # That identity may not take the Lease gang-scheduler (the shipped RBAC gives it to the ServiceAccount
    # gang-scheduler: see test_second_scheduler_topology_runs_as_shipped).
    config.setdefault("leaderElection", {})["leaderElect"] = False
    installed.start_scheduler(config)
    try:
        assert installed.is_running("kube-scheduler")
    finally:
        installed.stop_scheduler()


def test_kube_scheduler_refuses_a_misspelled_field(installed: ControlPlane) -> None:
    """The start-up check above is strict: an unknown field is an error, not ignored."""
    (config,) = _docs(MANIFESTS / "scheduler-config.yaml")
    config["extenders"][0]["httpTimout"] = config["extenders"][0].pop("httpTimeout")
    with pytest.raises(ControlPlaneError, match="unknown field"):
        installed.start_scheduler(config, timeout=30)
    installed.stop_scheduler()


# ------------------------------------------------------------------------------- running for real
def _readyz(ext: Extender) -> dict[str, Any]:
    with urllib.request.urlopen(ext.url + "/readyz", timeout=5) as reply:
        return dict(json.load(reply))


def _assert_all_watches_synced(ext: Extender) -> None:
    ready = _readyz(ext)
    assert ready["ready"] is True and ready["mode"] == "api", ready
    assert "discovery_error" not in ready, ready
    watches = ready["watches"]
    assert set(watches) == {"nodes", "pods", "poddisruptionbudgets", "workloads.scheduling.k8s.io",
                            "podgroups.scheduling.x-k8s.io"}, ready
    assert ready["groupApis"] == {"workloads.scheduling.k8s.io": "v1alpha1",
                                  "podgroups.scheduling.x-k8s.io": "v1alpha1"}, ready
    for name, state in watches.items():
        assert state["synced"] and state["healthy"] and not state["error"], (name, state)


def _assert_writes_succeeded(ext: Extender) -> None:
    """Binds, Events and wake-up patches went through: none was refused. (A gang whose group exists before its
    pods needs no wake-up: a member is woken only after it was turned away; test_least_privilege shows the
    identity may patch one.)"""
    metrics = ext.metrics()
    assert metrics.get('gang_extender_events_total{outcome="sent"}', 0) >= 1, metrics
    assert metrics.get('gang_extender_events_total{outcome="failed"}', 0) == 0, metrics
    assert metrics.get('gang_extender_pod_wakes_total{outcome="failed"}', 0) == 0, metrics
    errors = {k: v for k, v in metrics.items() if k.startswith("gang_extender_watch_errors") and v}
    assert errors == {}, errors
    log = ext.log_path.read_text()
    assert " 403" not in log and "forbidden" not in log.lower(), tail(ext.log_path)


def _secrets_in(kubeconfig: str) -> list[str]:
    """The credentials of a kubeconfig as they could leak into a log: the token (and its signature part),
    the base64 key data, and the lines of the decoded PEM key."""
    user = yaml.safe_load(Path(kubeconfig).read_text())["users"][0]["user"]
    secrets = []
    if user.get("token"):
        secrets += [user["token"], user["token"].rsplit(".", 1)[-1]]
    if user.get("client-key-data"):
        pem = base64.b64decode(user["client-key-data"]).decode()
        secrets += [user["client-key-data"][:64], *(line for line in pem.splitlines() if "-----" not in line)]
    return [s for s in secrets if len(s) >= 16]


def _assert_no_credentials_logged(ext: Extender, kubeconfig: str) -> None:
    secrets = _secrets_in(kubeconfig)
    assert secrets, "the kubeconfig has no credentials to look for"
    for path in (ext.log_path, ext.record_path):
        text = path.read_text(errors="replace") if path.exists() else ""
        leaked = [s[:8] + "..." for s in secrets if s in text]
        assert leaked == [], f"{path}: credentials in the log: {leaked}"


def _apply_example(cp: ControlPlane, example: str, namespace: str) -> None:
    cp.kubectl("apply", "-n", namespace, "-f", str(MANIFESTS / "examples" / example))


def _gang_binds_whole(cp: ControlPlane, namespace: str, example: str, prefix: str) -> None:
    """The example's 4 workers get bound, never some without the others (the examples select no nodes)."""
    with Sampler(cp, namespace) as sampler:
        _apply_example(cp, example, namespace)
        wait_for(lambda: len(bound(cp, namespace, prefix)) == 4, timeout=WAIT, what=f"4 pods {prefix}* bound")
    assert sampler.partial(prefix, 4) == []


@pytest.fixture
def extender_factory() -> Iterator[list[Extender]]:
    started: list[Extender] = []
    yield started
    for ext in started:
        ext.stop()


def _start_extender(started: list[Extender], kubeconfig: str, workdir: Path) -> Extender:
    ext = Extender(kubeconfig, workdir, log=print, args=["--gang-timeout-seconds", "12", "--log-level", "DEBUG"])
    started.append(ext)
    ext.start()
    return ext


def test_extender_works_with_only_its_service_account(installed: ControlPlane, tmp_path: Path,
                                                      extender_factory: list[Extender]) -> None:
    cp = installed
    ext = _start_extender(extender_factory, cp.service_account_kubeconfig(NAMESPACE, EXTENDER_SA), tmp_path)
    _assert_all_watches_synced(ext)
    cp.create_namespace("m-sa")
    cp.add_nodes(2, prefix="m-sa-")
    cp.start_scheduler(scheduler_config(ext.url))
    try:
        _gang_binds_whole(cp, "m-sa", "workload-job.yaml", "training-")
    finally:
        cp.stop_scheduler()
    _assert_writes_succeeded(ext)
    _assert_no_credentials_logged(ext, ext.kubeconfig)  # a token kubeconfig, at --log-level DEBUG


def test_rejected_credentials_are_not_logged(installed: ControlPlane, tmp_path: Path) -> None:
    """A kubeconfig whose token the API server refuses: every call fails with 401 and is logged at DEBUG,
    the token never is."""
    cp = installed
    doc = yaml.safe_load(Path(cp.service_account_kubeconfig(NAMESPACE, EXTENDER_SA)).read_text())
    token = "gx-" + "".join(f"{b:02x}" for b in os.urandom(24))
    doc["users"][0]["user"]["token"] = token
    kubeconfig = tmp_path / "bad-token.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(doc))
    ext = Extender(str(kubeconfig), tmp_path, log=print, args=["--log-level", "DEBUG"])
    try:
        with contextlib.suppress(RuntimeError):  # never ready: discovery is refused
            ext.start(timeout=6)
        log = ext.log_path.read_text()
        assert "401" in log or "Unauthorized" in log, tail(ext.log_path)
        assert token not in log and token[3:19] not in log
    finally:
        ext.stop()


def test_second_scheduler_topology_runs_as_shipped(installed: ControlPlane, tmp_path: Path,
                                                   extender_factory: list[Extender]) -> None:
    """kube-scheduler with the ServiceAccount gang-scheduler and the extender with the token its container
    mounts (ServiceAccount gang-extender), nothing else: the RBAC of manifests/second-scheduler is enough
    for delegated auth, leader election, scheduling and binding, and neither needs the other's rights."""
    cp = installed
    cp.kubectl("apply", "-k", str(MANIFESTS / "second-scheduler"))
    wait_for(lambda: any(p["metadata"]["name"].startswith("gang-scheduler-")
                         for p in cp.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]),
             timeout=WAIT, what="the Deployment's pod (admitted under Pod Security 'restricted')")
    kubeconfig = cp.service_account_kubeconfig(NAMESPACE, SCHEDULER_SA)
    extender = extender_kubeconfig(cp, "second-scheduler", tmp_path)
    assert (whoami(cp, kubeconfig), whoami(cp, extender)) == (
        f"system:serviceaccount:{NAMESPACE}:{SCHEDULER_SA}", EXTENDER_USER)
    ext = _start_extender(extender_factory, extender, tmp_path)
    _assert_all_watches_synced(ext)

    (config,) = _docs(MANIFESTS / "second-scheduler" / "kube-scheduler-config.yaml")
    config["clientConnection"] = {"kubeconfig": kubeconfig}
    config["extenders"][0]["urlPrefix"] = ext.url
    proc, port, log_path = spawn_scheduler_as_pod(cp, config, kubeconfig, tmp_path)
    try:
        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"kube-scheduler exited with {proc.returncode}:\n{tail(log_path)}")
            return https_ok(port, "/readyz") and https_ok(port, "/healthz")

        wait_for(ready, timeout=WAIT, what="gang-scheduler /readyz and /healthz without credentials")

        def leader() -> bool:
            lease = cp.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/gang-scheduler")
            return bool(lease["spec"].get("holderIdentity"))

        with contextlib.suppress(TimeoutError):
            wait_for(leader, timeout=WAIT, what="the Lease gang-scheduler/gang-scheduler")
        assert leader(), tail(log_path)

        cp.create_namespace("m-second")
        cp.add_nodes(2, prefix="m-second-")
        _gang_binds_whole(cp, "m-second", "podgroup-job.yaml", "training-pg-")
        scheduled = events(cp, "m-second", "Scheduled")
        assert scheduled and all(
            (e.get("reportingComponent") or e["source"].get("component")) == "gang-scheduler" for e in scheduled)
        log = log_path.read_text()
        assert "forbidden" not in log.lower(), tail(log_path)
        assert list((tmp_path / "cwd").iterdir()) == []  # nothing written: read-only root file system is fine
    finally:
        stop_process_group(proc)
    _assert_writes_succeeded(ext)


def test_ha_topology_runs_as_shipped(installed: ControlPlane, tmp_path: Path) -> None:
    """manifests/ha's processes with their shipped credentials and flags: kube-scheduler as the
    ServiceAccount gang-scheduler electing on the Lease gang-scheduler, the extender as gang-extender with
    the sidecar's own args (leader election on the Lease its Role names). It takes its Lease once its
    kube-scheduler calls it, binds a gang, and nothing is refused."""
    cp = installed
    cp.kubectl("apply", "-k", str(MANIFESTS / "ha"))
    kubeconfig = cp.service_account_kubeconfig(NAMESPACE, SCHEDULER_SA)
    extender = extender_kubeconfig(cp, "ha", tmp_path)
    built = {d["kind"]: d for d in _built(cp.bin_dir, "ha")}
    (sidecar,) = built["Deployment"]["spec"]["template"]["spec"]["initContainers"]
    shipped = [a for a in sidecar["args"] if not a.startswith(("--host=", "--port=", "--threads="))]
    shipped, metrics_port = metrics_here(shipped)
    ext = Extender(extender, tmp_path, log=print, args=shipped)
    at = ext.args.index("--release-journal")  # what the test harness adds; the ha sidecar has none
    del ext.args[at:at + 2]
    ext.start()
    config = yaml.safe_load(built["ConfigMap"]["data"]["config.yaml"])
    config["clientConnection"] = {"kubeconfig": kubeconfig}
    config["extenders"][0]["urlPrefix"] = ext.url
    proc, port, log_path = spawn_scheduler_as_pod(cp, config, kubeconfig, tmp_path)
    try:
        wait_for(lambda: https_ok(port, "/readyz"), timeout=WAIT, what="gang-scheduler /readyz")
        cp.create_namespace("m-ha")
        cp.add_nodes(2, prefix="m-ha-")
        _gang_binds_whole(cp, "m-ha", "podgroup-job.yaml", "training-pg-")
        lease = cp.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/gang-extender")
        assert lease["spec"]["holderIdentity"], lease
        assert _readyz(ext)["leader"] is True
        assert "forbidden" not in log_path.read_text().lower(), tail(log_path)
        assert 'verb="bind"' in metrics_only(metrics_port)  # what Prometheus scrapes; no verb there
        _assert_writes_succeeded(ext)
    finally:
        stop_process_group(proc)
        ext.stop()


def test_default_scheduler_topology_runs_as_shipped(installed: ControlPlane, tmp_path: Path,
                                                    extender_factory: list[Extender]) -> None:
    """kube-scheduler as itself (scheduler.conf's user), which manifests/default-scheduler leaves as it
    was; the extender with the kubeconfig extender-kubeconfig.sh writes for the static pod."""
    cp = installed
    as_scheduler = ["--as=system:kube-scheduler"]
    cp.kubectl("apply", "-k", str(MANIFESTS / "default-scheduler"))
    gained = [(verb, resource) for verb, resource in (("patch", "pods"), ("list", "podgroups.scheduling.x-k8s.io"))
              if cp.kubectl("auth", "can-i", verb, resource, "-A", *as_scheduler, check=False).stdout.strip() != "no"]
    assert gained == [], "kube-scheduler's identity gained the extender's rights"

    extender = extender_kubeconfig(cp, "default-scheduler", tmp_path)
    assert whoami(cp, extender) == EXTENDER_USER
    static_pod = _docs(MANIFESTS / "default-scheduler" / "gang-extender-static-pod.yaml")[0]["spec"]["containers"][0]
    shipped = [a for a in static_pod["args"] if not a.startswith(("--host=", "--port=", "--threads=", "--kubeconfig="))]
    ext = Extender(extender, tmp_path, log=print, args=shipped)  # the static pod's own flags (leader election)
    at = ext.args.index("--release-journal")  # what the test harness adds; leader election excludes it
    del ext.args[at:at + 2]
    extender_factory.append(ext)
    ext.start()
    _assert_all_watches_synced(ext)
    (config,) = _docs(MANIFESTS / "default-scheduler" / "kube-scheduler-config.yaml")
    config["extenders"][0]["urlPrefix"] = ext.url
    config["leaderElection"]["leaderElect"] = False
    cp.create_namespace("m-default")
    cp.add_nodes(2, prefix="m-default-")
    cp.start_scheduler(config)
    try:
        _gang_binds_whole(cp, "m-default", "workload-job.yaml", "training-")
    finally:
        cp.stop_scheduler()
    # It led on this topology's own Lease (role-lease.yaml lets it), not on the second scheduler's: the
    # extenders of both topologies in one cluster never take the lead from each other.
    assert _flag(static_pod["args"], "lease-name") == "gang-extender-default-scheduler"
    chart_values = yaml.safe_load((MANIFESTS.parent / "charts" / "gang-extender" / "values.yaml").read_text())
    assert chart_values["leaderElection"]["extenderLeaseName"] != _flag(static_pod["args"], "lease-name")
    lease = cp.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/"
                              "gang-extender-default-scheduler")
    assert lease["spec"]["holderIdentity"], lease
    _assert_writes_succeeded(ext)
    _assert_no_credentials_logged(ext, ext.kubeconfig)  # the static pod's token kubeconfig


def test_extender_outage_blocks_every_pod_so_the_extender_must_not_need_scheduling(installed: ControlPlane) -> None:
    """With gang-extender unreachable, kube-scheduler binds nothing, not even a DaemonSet's pod: a DaemonSet
    could never (re)start the extender of the scheduler that places it. Hence the static pod."""
    cp = installed
    cp.create_namespace("m-outage")
    (node,) = cp.add_nodes(1, prefix="m-outage-", labels={"m-outage": "yes"})
    closed_port = free_ports(1)[0]
    cp.start_scheduler(scheduler_config(f"http://127.0.0.1:{closed_port}"))
    try:
        daemonset = {
            "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "ds", "namespace": "m-outage"},
            "spec": {"selector": {"matchLabels": {"app": "ds"}}, "template": {
                "metadata": {"labels": {"app": "ds"}},
                "spec": {"nodeSelector": {"m-outage": "yes"}, "tolerations": [{"operator": "Exists"}],
                         "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}}
        cp.kubectl("apply", "-f", "-", input=json.dumps(daemonset))

        def refused() -> list[dict[str, Any]]:
            return [e for e in events(cp, "m-outage", "FailedScheduling") if "connection refused" in e["message"]]

        wait_for(lambda: bool(refused()), timeout=WAIT, what="FailedScheduling: extender connection refused")
        time.sleep(2)
        assert bound(cp, "m-outage") == {}, f"a pod was bound to {node} with the extender down"
        print(f"[e2e] {refused()[0]['message']}")
    finally:
        cp.stop_scheduler()
