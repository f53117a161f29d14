"""The chart's Prometheus Operator objects against the operator's own CRDs on a real kube-apiserver (1.35).

The PrometheusRule (``prometheusRule.enabled``) and the PodMonitor (``metrics.podMonitor.enabled``) are
applied with ``kubectl apply --dry-run=server --validate=strict`` (no warning: no field the CRD's schema
prunes or does not know), then created for real and read back unchanged. The CRDs are prometheus-operator
v0.85.0's (``hack/fetch-prometheus-operator-crds.sh`` keeps them in ~/.cache/gang-extender). The check has
teeth: an unknown field and a malformed duration are refused.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import helmchart as hc
import pytest
import yaml
from controlplane import BinariesUnavailableError, ControlPlane, run_build_script, wait_for
from support import ROOT

from tests.skipping import skip_loudly

pytestmark = pytest.mark.e2e

FETCH_SCRIPT = ROOT / "hack" / "fetch-prometheus-operator-crds.sh"
CRDS = ("monitoring.coreos.com_prometheusrules.yaml", "monitoring.coreos.com_podmonitors.yaml")
SETS = ["prometheusRule.enabled=true", "metrics.podMonitor.enabled=true",
        "prometheusRule.labels.release=kube-prometheus-stack",
        "metrics.podMonitor.labels.release=kube-prometheus-stack"]


@pytest.fixture(scope="module")
def operator_crds(control_plane: ControlPlane) -> ControlPlane:
    """The control plane with the PrometheusRule and PodMonitor CRDs installed and served."""
    try:
        crds = run_build_script(FETCH_SCRIPT, missing="the CRDs are not in the cache and `go` is not installed")
    except BinariesUnavailableError as exc:
        skip_loudly(f"PROMETHEUS OPERATOR CRD TESTS NOT RUN: {exc}")
    for name in CRDS:
        control_plane.kubectl("apply", "--server-side", "-f", str(crds / name))
    control_plane.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                          "crd/prometheusrules.monitoring.coreos.com", "crd/podmonitors.monitoring.coreos.com")
    wait_for(lambda: {"prometheusrules", "podmonitors"} <= set(control_plane.kubectl(
                 "api-resources", "--api-group=monitoring.coreos.com", "-o", "name").stdout.replace(
                 ".monitoring.coreos.com", "").split()),
             timeout=30, what="the monitoring.coreos.com resources to be served")
    control_plane.create_namespace(hc.NAMESPACE)
    return control_plane


def _monitoring(helm_bin: Path) -> list[dict[str, Any]]:
    objects = hc.rendered(helm_bin, sets=SETS)
    found = hc.by_kind(objects, "PrometheusRule") + hc.by_kind(objects, "PodMonitor")
    assert sorted(o["kind"] for o in found) == ["PodMonitor", "PrometheusRule"], found
    return found


def _dry_run(cp: ControlPlane, *objects: dict[str, Any]) -> tuple[int, str, str]:
    manifest = yaml.safe_dump_all(objects)
    proc = cp.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-", input=manifest, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def test_prometheusrule_and_podmonitor_pass_server_dry_run_and_are_stored_as_rendered(
        operator_crds: ControlPlane, helm_bin: Path) -> None:
    cp = operator_crds
    objects = _monitoring(helm_bin)
    code, out, err = _dry_run(cp, *objects)
    assert code == 0, err
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 2 and all(line.endswith("(server dry run)") for line in lines), out
    assert "warning" not in err.lower(), err
    cp.kubectl("apply", "--validate=strict", "-f", "-", input=yaml.safe_dump_all(objects))
    for obj in objects:
        plural = {"PrometheusRule": "prometheusrules", "PodMonitor": "podmonitors"}[obj["kind"]]
        stored = cp.request("GET", f"/apis/monitoring.coreos.com/v1/namespaces/{hc.NAMESPACE}/{plural}/"
                                   f"{obj['metadata']['name']}")
        assert stored["spec"] == obj["spec"], json.dumps(stored["spec"])[:2000]  # nothing pruned or defaulted away
        assert stored["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_the_dry_run_refuses_a_wrong_field_or_duration(operator_crds: ControlPlane, helm_bin: Path) -> None:
    rule, monitor = sorted(_monitoring(helm_bin), key=lambda o: o["kind"] != "PrometheusRule")
    unknown = copy.deepcopy(monitor)
    unknown["spec"]["podMetricsEndpoints"][0]["portName"] = "metrics"  # the field is "port"
    code, _, err = _dry_run(operator_crds, unknown)
    assert code != 0 and 'unknown field "spec.podMetricsEndpoints[0].portName"' in err, err
    late = copy.deepcopy(rule)
    late["spec"]["groups"][0]["rules"][0]["for"] = "ten minutes"
    code, _, err = _dry_run(operator_crds, late)
    assert code != 0 and "spec.groups[0].rules[0].for" in err, err
