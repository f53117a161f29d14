"""The shipped ClusterRole gang-extender:kubectl-gang-viewer (manifests/rbac/kubectl-gang-viewer.yaml)
grants exactly what ``kubectl gang`` reads: every list its ``read`` makes, recorded through the plugin's
``Reader`` seam with every group API served, of one namespace and of all, and nothing more. A new read
in extender/kubectl/ that the role does not grant fails here (and, on a real API server, in
tests/e2e/gangctl.py, which runs the plugin as a user bound to this role only). The chart renders the
same role (tests/e2e/test_helm_drift.py)."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import yaml

from extender.cluster.groups import GROUP_APIS
from extender.errors import KubeError
from extender.kubectl import main

ROLE = Path(__file__).resolve().parents[2] / "manifests" / "rbac" / "kubectl-gang-viewer.yaml"
PATH = re.compile(r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/[^/]+)(?:/namespaces/[^/]+)?/(?P<resource>[^/]+)$")


class Recording:
    """A ``Reader`` serving the newest version of every group API, with nothing in it; records each list."""

    def __init__(self) -> None:
        self.listed: set[tuple[str, str, str]] = set()   # (apiGroup, resource, verb)

    def serves(self, group: str, version: str, resource: str) -> bool:
        return any(api.group == group and api.resource == resource and api.versions[0] == version
                   for api in GROUP_APIS)

    def list(self, path: str, page_size: int = 500, query: dict[str, str] | None = None) -> list[dict[str, Any]]:
        found = PATH.match(path)
        if found is None:
            raise KubeError(f"the plugin read a path the test cannot name: {path}")
        self.listed.add((found["group"] or "", found["resource"], "list"))
        return []


def granted(path: Path = ROLE, name: str = main.VIEWER_ROLE) -> set[tuple[str, str, str]]:
    (role,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert role["kind"] == "ClusterRole" and role["metadata"]["name"] == name
    return {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def test_the_role_grants_exactly_what_the_plugin_reads() -> None:
    reader = Recording()
    for argv in (["list", "-n", "ml"], ["list", "-A"], ["explain", "ml/train"]):
        main.run(main._parser().parse_args(argv), reader, io.StringIO(), io.StringIO(), now=0.0)
    assert reader.listed == granted()
    # every group API generation the extender schedules is among them
    assert {(api.group, api.resource) for api in GROUP_APIS} <= {(g, r) for g, r, _ in reader.listed}


def test_a_refusal_names_the_role() -> None:
    class Refusing(Recording):
        def list(self, path: str, page_size: int = 500, query: dict[str, str] | None = None) -> list[dict[str, Any]]:
            raise KubeError(f"GET {path}: 403 pods is forbidden", 403)

    err = io.StringIO()
    try:
        main.run(main._parser().parse_args(["list", "-n", "ml"]), Refusing(), io.StringIO(), err, now=0.0)
    except KubeError as exc:  # main.main prints it with the same hint
        assert main.VIEWER_ROLE in main._hint(exc)
    assert main.VIEWER_ROLE in err.getvalue()  # the group objects' warnings


FIT_ROLE = ROLE.with_name("kubectl-gang-fit.yaml")


def test_the_fit_role_grants_exactly_what_fit_reads(tmp_path: Path) -> None:
    """``kubectl gang fit`` reads the whole cluster; its role (never aggregated) grants that and no more."""
    question = tmp_path / "gang.yaml"
    question.write_text(yaml.safe_dump_all([
        {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": {"name": "g"},
         "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}},
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "g"},
         "spec": {"parallelism": 2, "template": {"spec": {"schedulingGroup": {"podGroupName": "g"},
                                                          "containers": [{"name": "c", "image": "x"}]}}}}]))
    reader, out = Recording(), io.StringIO()
    assert main.run(main._parser().parse_args(["fit", "-f", str(question), "-n", "ml"]), reader, out,
                    io.StringIO(), now=0.0) == 0
    assert "Answer:      Never:" in out.getvalue()  # no node at all
    assert reader.listed == granted(FIT_ROLE, main.FIT_ROLE)
    (role,) = [d for d in yaml.safe_load_all(FIT_ROLE.read_text()) if d]
    assert not any(k.startswith("rbac.authorization.k8s.io/aggregate") for k in role["metadata"]["labels"])


def test_a_refused_fit_names_the_fit_role() -> None:
    assert main.FIT_ROLE in main._hint(KubeError("GET /api/v1/nodes: 403", 403), "fit")
    assert main.VIEWER_ROLE in main._hint(KubeError("GET /api/v1/pods: 403", 403), "list")


def test_a_file_that_contains_itself_is_refused_not_a_traceback(tmp_path: Path) -> None:
    question = tmp_path / "loop.yaml"
    question.write_text("kind: List\nitems: &loop\n- kind: List\n  items: *loop\n")  # a List that holds itself
    err = io.StringIO()
    assert main.run(main._parser().parse_args(["fit", "-f", str(question)]), Recording(), io.StringIO(), err,
                    now=0.0) == 2
    assert "nests too deeply" in err.getvalue(), err.getvalue()
