"""charts/gang-extender against the kustomize overlays it packages, with the pinned helm: no drift.

- The chart rendered with ci/<overlay>-values.yaml and ``kubectl kustomize manifests/<overlay>`` are the
  same objects (kinds, names, RBAC rules, the containers' images, args, probes, security contexts,
  volumes, the scheduler configuration), but for what ``helmchart.comparable`` names: Helm's labels, the
  ConfigMap's hash suffix, the Namespace (made by ``helm install --create-namespace``).
- The comparison has teeth: a flag changed on either side is reported.
- ``helm lint --strict`` passes for every values file; the gang settings render flags that
  ``gang-extender serve`` parses to the values given; the filter-gated mode renders the extender entry
  of manifests/scheduler-config-filter-gated.yaml; the monitoring wrappers carry their files unchanged.

No control plane: helm and kubectl run offline (marked e2e because both are built by hack/).
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import helmchart as hc
import pytest
import yaml
from identities import MANIFESTS
from identities import built as kustomized

from extender import config

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("overlay", sorted(hc.OVERLAYS))
def test_chart_renders_what_the_overlay_builds(helm_bin: Path, k8s_bin_dir: Path, overlay: str) -> None:
    chart = hc.rendered(helm_bin, [hc.OVERLAYS[overlay]])
    assert hc.drift(chart, kustomized(k8s_bin_dir, overlay)) == []
    # What the chart leaves out: the Namespace, whose Pod Security labels docs/deploy.md applies.
    (namespace,) = hc.by_kind(kustomized(k8s_bin_dir, overlay), "Namespace")
    assert namespace["metadata"]["name"] == hc.NAMESPACE and hc.by_kind(chart, "Namespace") == []


def _replace(args: list[str], old: str, new: str) -> list[str]:
    assert old in args, args
    return [new if a == old else a for a in args]


def test_drift_is_caught_on_either_side(helm_bin: Path, k8s_bin_dir: Path) -> None:
    base = kustomized(k8s_bin_dir, "second-scheduler")
    # the chart changes a flag
    changed = hc.rendered(helm_bin, sets=["gang.timeoutSeconds=21"])
    assert any("--gang-timeout-seconds=21" in d for d in hc.drift(changed, base)), hc.drift(changed, base)
    # the users' viewer role leaves the built-in roles, or is not rendered
    for pair in ("kubectlGang.aggregateToView=false", "kubectlGang.viewerRole=false"):
        found = hc.drift(hc.rendered(helm_bin, sets=[pair]), base)
        assert any("gang-extender:kubectl-gang-viewer" in d for d in found), (pair, found)
    # the overlay changes a flag, a scheduler setting, an RBAC rule, a security context
    chart = hc.rendered(helm_bin)
    for change in ("arg", "config", "rule", "context"):
        theirs = copy.deepcopy(base)
        pod = hc.pod_spec(theirs)
        if change == "arg":
            sidecar = pod["initContainers"][0]
            sidecar["args"] = _replace(sidecar["args"], "--threads=4096", "--threads=2048")
        elif change == "config":
            (config_map,) = hc.by_kind(theirs, "ConfigMap")
            config_map["data"]["config.yaml"] += "\npercentageOfNodesToScore: 50\n"
        elif change == "rule":
            (role,) = [r for r in hc.by_kind(theirs, "ClusterRole") if r["metadata"]["name"] == "gang-extender"]
            role["rules"][1]["verbs"].remove("patch")
        else:
            pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] = False
        assert hc.drift(chart, theirs), change


def test_helm_lint(helm_bin: Path) -> None:
    for values in [None, *hc.OVERLAYS.values()]:
        args = ["lint", "--strict", str(hc.CHART), *(["--values", str(values)] if values else [])]
        proc = hc.helm(helm_bin, *args)
        assert "0 chart(s) failed" in proc.stdout, proc.stdout


def _parsed(args: list[str]) -> argparse.Namespace:
    """The args as ``gang-extender serve`` parses them (an unknown flag exits)."""
    parser = argparse.ArgumentParser(exit_on_error=False)
    config.add_arguments(parser)
    return parser.parse_args(args)


def test_gang_settings_render_the_extenders_flags(helm_bin: Path, tmp_path: Path) -> None:
    sets = ["gang.timeoutSeconds=45", "gang.backoffSeconds=0", "gang.maxWaitSeconds=120", "gang.preemption=off",
            "gang.maxEvictionsPerMinute=10", "schedulerName=batch", "extender.threads=512",
            "scheduler.extenderHTTPTimeoutSeconds=40", "extender.extraArgs={--cache-size=5}"]
    objects = hc.rendered(helm_bin, sets=sets)
    parsed = vars(_parsed(hc.extender_args(objects)))
    assert {k: parsed[k] for k in ("gang_timeout_seconds", "gang_backoff_seconds", "max_wait_seconds", "preemption",
                                   "max_evictions_per_minute", "scheduler_names", "threads",
                                   "scheduler_http_timeout_seconds", "cache_size")} == {
        "gang_timeout_seconds": "45", "gang_backoff_seconds": "0", "max_wait_seconds": "120", "preemption": "off",
        "max_evictions_per_minute": "10", "scheduler_names": "batch", "threads": "512",
        "scheduler_http_timeout_seconds": "40", "cache_size": "5"}
    scheduler = hc.scheduler_configuration(objects)
    assert scheduler["profiles"] == [{"schedulerName": "batch"}]
    assert scheduler["extenders"][0]["httpTimeout"] == "40s"
    assert scheduler["leaderElection"]["resourceName"] == "batch"
    (role,) = [r for r in hc.by_kind(objects, "Role") if r["metadata"]["name"] == "gang-scheduler:leader-election"]
    assert role["rules"][0]["resourceNames"] == ["batch"]
    # A values file's YAML 1.1 `off` (a boolean to helm) is still the word the flag takes.
    values = tmp_path / "values.yaml"
    values.write_text("gang:\n  preemption: off\n")
    assert _parsed(hc.extender_args(hc.rendered(helm_bin, [values]))).preemption == "off"
    # A values file's numbers reach the templates as floats: a big whole one still renders as digits.
    values.write_text("gang:\n  maxEvictionsPerMinute: 1000000\n  maxWaitSeconds: 30.5\n")
    big = hc.rendered(helm_bin, [values])
    parsed = vars(_parsed(hc.extender_args(big)))
    assert (parsed["max_evictions_per_minute"], parsed["max_wait_seconds"]) == ("1000000", "30.5")


def test_filter_gated_mode_renders_the_shipped_filter_gated_entry(helm_bin: Path) -> None:
    objects = hc.rendered(helm_bin, sets=["gang.bindMode=filter-gated"])
    assert _parsed(hc.extender_args(objects)).bind_mode == "filter-gated"
    (shipped,) = yaml.safe_load((MANIFESTS / "scheduler-config-filter-gated.yaml").read_text())["extenders"]
    assert hc.scheduler_configuration(objects)["extenders"] == [shipped]
    proc = hc.template(helm_bin, sets=["gang.bindMode=bind-all"], check=False)
    assert proc.returncode != 0 and "bindMode" in proc.stderr, proc.stderr  # values.schema.json


def test_leader_election_without_replicas(helm_bin: Path, k8s_bin_dir: Path) -> None:
    """leaderElection.extender on one replica: the ha overlay's flags, without its anti-affinity or PDB."""
    objects = hc.rendered(helm_bin, sets=["leaderElection.extender=true"])
    (sidecar,) = hc.pod_spec(kustomized(k8s_bin_dir, "ha"))["initContainers"]
    assert hc.extender_args(objects) == sidecar["args"]
    assert "affinity" not in hc.pod_spec(objects) and hc.by_kind(objects, "PodDisruptionBudget") == []


FILES = hc.CHART / "files"


def test_monitoring_wrappers_carry_their_files(helm_bin: Path) -> None:
    alerts, dashboard = FILES / "alerts.yaml", FILES / "dashboard.json"
    if not (alerts.is_file() and dashboard.is_file()):
        pytest.skip(f"{alerts.name} and {dashboard.name} are not in {FILES} yet")
    assert hc.by_kind(hc.rendered(helm_bin), "PrometheusRule") == []  # both off by default
    objects = hc.rendered(helm_bin, sets=["prometheusRule.enabled=true", "dashboard.enabled=true",
                                          "prometheusRule.labels.release=kube-prometheus-stack"])
    (rule,) = hc.by_kind(objects, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["spec"] == yaml.safe_load(alerts.read_text())
    (board,) = [c for c in hc.by_kind(objects, "ConfigMap") if c["metadata"]["name"] == "gang-extender-dashboard"]
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(board["data"]["gang-extender.json"]) == json.loads(dashboard.read_text())


def test_hostile_values_are_refused_or_rendered_safely(helm_bin: Path) -> None:
    """extraArgs may not override what the chart sets from other values (the loopback host, the bind
    mode the scheduler configuration matches); a scheduler name YAML would read as a boolean stays a
    string."""
    for arg in ("--host=0.0.0.0", "--bind-mode=filter-gated", "--scheduler-http-timeout-seconds=5", "--port",
                "--metrics-address=0.0.0.0:8888"):
        refused = hc.template(helm_bin, sets=[f"extender.extraArgs={{{arg}}}"], check=False)
        assert refused.returncode != 0 and "'not' failed" in refused.stderr, (arg, refused.stderr)
    objects = hc.rendered(helm_bin, sets=["schedulerName=yes"])
    assert hc.scheduler_configuration(objects)["profiles"] == [{"schedulerName": "yes"}]
    (role,) = [r for r in hc.by_kind(objects, "Role") if r["metadata"]["name"] == "gang-scheduler:leader-election"]
    assert role["rules"][0]["resourceNames"] == ["yes"]


def test_metrics_values_render_the_listener_its_service_and_podmonitor(helm_bin: Path) -> None:
    """metrics.*: the flag ``gang-extender serve`` parses to the address given, the sidecar's port, the
    headless Service, the PodMonitor only when asked (and only with the listener); all gone when off."""
    objects = hc.rendered(helm_bin, sets=["metrics.address=[::]", "metrics.port=9191"])
    address = _parsed(hc.extender_args(objects)).metrics_address
    assert config.metrics_address(config.load({"metrics_address": address})) == ("::", 9191)
    (sidecar,) = hc.pod_spec(objects)["initContainers"]
    assert sidecar["ports"] == [{"name": "metrics", "containerPort": 9191, "protocol": "TCP"}]
    (service,) = hc.by_kind(objects, "Service")
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["ports"][0]["targetPort"] == 9191
    (deployment,) = hc.by_kind(objects, "Deployment")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert hc.by_kind(objects, "PodMonitor") == []  # off by default
    (monitor,) = hc.by_kind(hc.rendered(helm_bin, sets=["metrics.podMonitor.enabled=true",
                                                        "metrics.podMonitor.labels.release=kps"]), "PodMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kps"
    assert monitor["spec"]["podMetricsEndpoints"] == [{"portNumber": 9090, "path": "/metrics", "scheme": "http",
                                                       "interval": "30s"}]
    off = hc.rendered(helm_bin, sets=["metrics.enabled=false"])
    assert not any(a.startswith("--metrics-address") for a in hc.extender_args(off))
    assert "ports" not in hc.pod_spec(off)["initContainers"][0] and hc.by_kind(off, "Service") == []
    refused = hc.template(helm_bin, sets=["metrics.enabled=false", "metrics.podMonitor.enabled=true"], check=False)
    assert refused.returncode != 0 and "metrics.podMonitor.enabled needs metrics.enabled" in refused.stderr


def test_a_metrics_port_the_extender_would_refuse_is_refused_at_render(helm_bin: Path) -> None:
    """``gang-extender serve`` exits when --metrics-address has the verbs' port (config._serving_problems):
    the chart says so at install time rather than rendering a pod that crash-loops."""
    for sets in (["metrics.port=8888"], ["extender.port=9191", "metrics.port=9191"]):
        refused = hc.template(helm_bin, sets=sets, check=False)
        assert refused.returncode != 0 and "metrics.port must differ from extender.port" in refused.stderr, sets
    assert hc.rendered(helm_bin, sets=["metrics.enabled=false", "metrics.port=8888"])  # no listener: no clash
