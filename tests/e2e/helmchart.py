"""The Helm chart charts/gang-extender as the e2e tier sees it: the pinned helm, rendered objects, and
their comparison with what the kustomize overlays under manifests/ build.

Owns: finding or building helm (``hack/build-helm.sh``), ``helm template`` / ``helm lint`` runs,
normalising rendered objects so a chart and an overlay can be compared (``comparable``), and listing
where two objects differ (``differences``). Must not: talk to an API server (the tests do, through
their control plane), or forgive a difference beyond the ones named in ``comparable``.
"""

from __future__ import annotations

import copy
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from controlplane import run_build_script
from support import ROOT

HELM_VERSION = "3.22.0"  # keep in step with HELM_VERSION in hack/build-helm.sh
BUILD_SCRIPT = ROOT / "hack" / "build-helm.sh"
CHART = ROOT / "charts" / "gang-extender"
RELEASE = "gang-extender"
NAMESPACE = "gang-scheduler"
#: Each kustomize overlay and the chart values that must render the same objects.
OVERLAYS: Mapping[str, Path] = {
    "second-scheduler": CHART / "ci" / "second-scheduler-values.yaml",
    "second-scheduler-tls": CHART / "ci" / "second-scheduler-tls-values.yaml",
    "ha": CHART / "ci" / "ha-values.yaml",
}
#: Labels Helm charts carry and kustomize manifests do not.
HELM_LABELS = ("app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "helm.sh/chart")
#: kustomize's configMapGenerator and the chart both suffix the scheduler configuration's name with a
#: hash of its content, each its own hash.
CONFIG_MAP = re.compile(r"^(gang-scheduler-config)-[a-z0-9]{10}$")

Obj = dict[str, Any]


def find_helm(env: Mapping[str, str] | None = None) -> Path:
    """The pinned helm binary (``hack/build-helm.sh`` builds it if needed)."""
    bin_dir = run_build_script(BUILD_SCRIPT, env, missing="helm is not built and `go` is not installed")
    return bin_dir / "helm"


def helm(binary: Path, *args: str, check: bool = True, kubeconfig: str | None = None
         ) -> subprocess.CompletedProcess[str]:
    """Run helm with a throwaway home (no user repositories or plugins), ``kubeconfig`` if given."""
    home = ROOT / ".cache" / "helm-home"
    env = {"HELM_CACHE_HOME": str(home / "cache"), "HELM_CONFIG_HOME": str(home / "config"),
           "HELM_DATA_HOME": str(home / "data"), "HOME": str(home), "PATH": "/usr/bin:/bin"}
    if kubeconfig is not None:
        env["KUBECONFIG"] = kubeconfig
    proc = subprocess.run([str(binary), *args], capture_output=True, text=True, env=env, timeout=120,
                          stdin=subprocess.DEVNULL, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc


def template(binary: Path, values: Iterable[Path] = (), sets: Sequence[str] = (), *, check: bool = True
             ) -> subprocess.CompletedProcess[str]:
    """``helm template`` of the chart into NAMESPACE (``--values`` files, then ``--set`` pairs)."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for path in values:
        args += ["--values", str(path)]
    for pair in sets:
        args += ["--set", pair]
    return helm(binary, *args, check=check)


def rendered(binary: Path, values: Iterable[Path] = (), sets: Sequence[str] = ()) -> list[Obj]:
    """The chart's objects (``template``, parsed)."""
    return [d for d in yaml.safe_load_all(template(binary, values, sets).stdout) if d]


def quorum_gate_objects(binary: Path, scheduler: str) -> list[Obj]:
    """The chart's quorum-gate MutatingAdmissionPolicy and its binding (``gang.quorumGate=true``) for the
    scheduler name ``scheduler``, rendered as a 1.36+ cluster (MutatingAdmissionPolicy v1) would have them."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--set", "gang.quorumGate=true",
            "--set", f"schedulerName={scheduler}",
            "--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy",
            "--show-only", "templates/quorum-gate.yaml"]
    objects = [o for o in yaml.safe_load_all(helm(binary, *args).stdout) if o]
    kinds = [o["kind"] for o in objects]
    assert kinds == ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"], kinds
    return objects


def key(obj: Obj) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return obj["kind"], meta.get("namespace", ""), CONFIG_MAP.sub(r"\1-<hash>", meta["name"])


def comparable(objects: Iterable[Obj]) -> dict[tuple[str, str, str], Obj]:
    """Objects by (kind, namespace, name), with what may legitimately differ made equal: Helm's labels
    dropped, the scheduler configuration ConfigMap's hash suffix replaced (in its name and in the volume
    that mounts it), its config.yaml parsed (comments are not configuration), and runs of white space in
    the admission policy's CEL expressions made one space (kustomize re-emits a folded YAML scalar with
    more-indented lines so that it reads back with an extra line break; CEL ignores white space)."""
    out: dict[tuple[str, str, str], Obj] = {}
    for original in objects:
        obj = copy.deepcopy(original)
        labels = obj["metadata"].get("labels") or {}
        for label in HELM_LABELS:
            labels.pop(label, None)
        if obj["kind"] == "ConfigMap" and "config.yaml" in obj.get("data", {}):
            obj["data"]["config.yaml"] = yaml.safe_load(obj["data"]["config.yaml"])
        if obj["kind"] == "Deployment":
            for volume in obj["spec"]["template"]["spec"].get("volumes", []):
                if "configMap" in volume:
                    volume["configMap"]["name"] = CONFIG_MAP.sub(r"\1-<hash>", volume["configMap"]["name"])
        if obj["kind"] == "ValidatingAdmissionPolicy":
            obj["spec"] = _cel_spaces(obj["spec"])
        k = key(obj)
        obj["metadata"]["name"] = k[2]
        assert k not in out, f"two objects {k}"
        out[k] = obj
    return out


def _cel_spaces(value: Any, field: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _cel_spaces(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_cel_spaces(v, field) for v in value]
    if isinstance(value, str) and field.endswith(("expression", "Expression")):
        return " ".join(value.split())
    return value


def differences(chart: Any, kustomize: Any, path: str = "") -> list[str]:
    """Every place where the two differ, as 'path: chart ... != kustomize ...' lines."""
    if isinstance(chart, dict) and isinstance(kustomize, dict):
        found = []
        for k in sorted(set(chart) | set(kustomize), key=str):
            where = f"{path}.{k}"
            if k not in chart:
                found.append(f"{where}: only in kustomize: {kustomize[k]!r}")
            elif k not in kustomize:
                found.append(f"{where}: only in the chart: {chart[k]!r}")
            else:
                found += differences(chart[k], kustomize[k], where)
        return found
    if isinstance(chart, list) and isinstance(kustomize, list) and len(chart) == len(kustomize):
        return [d for i, (a, b) in enumerate(zip(chart, kustomize, strict=True))
                for d in differences(a, b, f"{path}[{i}]")]
    return [] if chart == kustomize else [f"{path}: chart {chart!r} != kustomize {kustomize!r}"]


def drift(chart: Iterable[Obj], kustomize: Iterable[Obj]) -> list[str]:
    """What differs between the chart's objects and an overlay's, besides the Namespace (which the chart
    does not carry: ``helm install --create-namespace`` makes it, docs/deploy.md labels it)."""
    ours, theirs = comparable(chart), comparable(kustomize)
    theirs = {k: v for k, v in theirs.items() if k[0] != "Namespace"}
    found = [f"{k}: only in the chart" for k in sorted(set(ours) - set(theirs))]
    found += [f"{k}: only in kustomize" for k in sorted(set(theirs) - set(ours))]
    for k in sorted(set(ours) & set(theirs)):
        found += [f"{k}{d}" for d in differences(ours[k], theirs[k])]
    return found


def by_kind(objects: Iterable[Obj], kind: str) -> list[Obj]:
    return [o for o in objects if o["kind"] == kind]


def pod_spec(objects: Iterable[Obj]) -> Obj:
    (deployment,) = by_kind(objects, "Deployment")
    spec: Obj = deployment["spec"]["template"]["spec"]
    return spec


def extender_args(objects: Iterable[Obj]) -> list[str]:
    (sidecar,) = pod_spec(objects)["initContainers"]
    return list(sidecar["args"])


def scheduler_configuration(objects: Iterable[Obj]) -> Obj:
    (config_map,) = [o for o in by_kind(objects, "ConfigMap") if CONFIG_MAP.match(o["metadata"]["name"])]
    config: Obj = yaml.safe_load(config_map["data"]["config.yaml"])
    return config
