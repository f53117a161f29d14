"""Who may speak for gang-extender in a ``GangState`` Event, enforced by a real kube-apiserver (1.35 and
1.37): the ValidatingAdmissionPolicy ``gang-extender-gang-state-events`` of manifests/rbac.

- A user allowed to create, update and patch Events in a namespace, through both Event APIs, is refused
  by the policy, with its message, a ``GangState`` Event that names gang-extender as its reporter (core
  v1 ``source.component`` or ``reportingComponent``; events.k8s.io/v1 ``reportingController``), and a
  patch that turns an ordinary Event into one or changes the extender's own.
- The cluster administrator is refused the same (it may remove the policy, which is no forgery).
- The same user still writes ordinary Events (both APIs) and a ``GangState`` Event reported as itself.
- gang-extender, running with its ServiceAccount's credentials as the second-scheduler topology gives
  them and called by kube-scheduler, still publishes its ``GangState`` Event, and ``kubectl gang
  explain`` shows it as published.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from controlplane import ApiError, ControlPlane, wait_for
from gangctl import annotated, kubectl_gang
from identities import extender_kubeconfig, install, refused, wait_until_in_force
from support import create, scenario, scheduling_with_extender

from extender.errors import KubeError
from extender.kube.client import KubeClient
from extender.kube.publishing import ANNOTATION, REASON

pytestmark = pytest.mark.e2e

POLICY = "gang-extender-gang-state-events"
REFUSAL = "only gang-extender may write a GangState Event reported as gang-extender"
WRITER = "event-writer"
WRITER_RULES = [{"apiGroups": ["", "events.k8s.io"], "resources": ["events"],
                 "verbs": ["create", "update", "patch", "get", "list"]}]
FORM = {"kind": "annotations", "namespace": "", "name": "ann", "state": "Bound", "publishedAt": 0,
        "waiting": "forged: all is well"}
MERGE = "application/merge-patch+json"


@pytest.fixture(scope="module", params=["1.35", "1.37"])
def installed(request: pytest.FixtureRequest) -> ControlPlane:
    cp: ControlPlane = request.getfixturevalue("control_plane" if request.param == "1.35" else "control_plane_137")
    return install(cp)


def _now(micro: bool = False) -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def core_event(ns: str, name: str, reason: str, reporter: dict[str, Any], form: dict[str, Any] | None = None
               ) -> tuple[str, dict[str, Any]]:
    """(path, body) of a core v1 Event on pod ``ann-0``; ``reporter``: its source / reporting fields."""
    metadata = {"name": name, "namespace": ns, **({"annotations": {ANNOTATION: json.dumps(form)}} if form else {})}
    return f"/api/v1/namespaces/{ns}/events", {
        "apiVersion": "v1", "kind": "Event", "metadata": metadata,
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": "ann-0"},
        "type": "Normal", "reason": reason, "message": "written by a test", "firstTimestamp": _now(),
        "lastTimestamp": _now(), "count": 1, **reporter}


def new_event(ns: str, name: str, reason: str, controller: str, form: dict[str, Any] | None = None
              ) -> tuple[str, dict[str, Any]]:
    """(path, body) of an events.k8s.io/v1 Event on pod ``ann-0`` reported by ``controller``."""
    metadata = {"name": name, "namespace": ns, **({"annotations": {ANNOTATION: json.dumps(form)}} if form else {})}
    return f"/apis/events.k8s.io/v1/namespaces/{ns}/events", {
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": metadata, "eventTime": _now(micro=True),
        "reportingController": controller, "reportingInstance": "test-1", "action": "Publish",
        "reason": reason, "note": "written by a test", "type": "Normal",
        "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": "ann-0"}}


def _by_policy(error: KubeError) -> bool:
    return (error.status == 403 and f"ValidatingAdmissionPolicy '{POLICY}'" in str(error)
            and REFUSAL in str(error) and f"by {WRITER} refused" in str(error))


def writer(cp: ControlPlane, ns: str) -> KubeClient:
    """A client of user ``event-writer``, who may create, update and patch Events (both APIs) in ``ns``."""
    create(cp, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": WRITER, "namespace": ns}, "rules": WRITER_RULES},
           {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": WRITER, "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": WRITER},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": WRITER}]})
    return KubeClient(cp.user_kubeconfig(WRITER, name=f"{WRITER}-{ns}"))


def _wait_for_the_policy(kube: KubeClient, ns: str) -> None:
    """Until the API server's policy informer has it: a dry-run forged create is refused by the policy."""
    path, body = core_event(ns, "probe", REASON, {"source": {"component": "gang-extender"}})

    wait_until_in_force(POLICY, lambda: kube.request("POST", path, {"dryRun": "All"}, body=body), _by_policy)


def _forgeries(ns: str) -> dict[str, tuple[str, dict[str, Any]]]:
    form = FORM | {"namespace": ns}
    return {
        "core v1 as gang-extender writes it": core_event(
            ns, "forged-1", REASON, {"source": {"component": "gang-extender"}, "reportingComponent": "gang-extender",
                                     "reportingInstance": "gang-extender-0"}, form),
        "core v1, source only": core_event(ns, "forged-2", REASON, {"source": {"component": "gang-extender"}}, form),
        "core v1, reportingComponent only": core_event(
            ns, "forged-3", REASON, {"reportingComponent": "gang-extender", "reportingInstance": "x"}, form),
        "core v1, no annotation": core_event(ns, "forged-4", REASON, {"source": {"component": "gang-extender"}}),
        "events.k8s.io/v1": new_event(ns, "forged-5", REASON, "gang-extender", form),
    }


def test_only_the_extender_may_write_gang_state_events(installed: ControlPlane, tmp_path: Path) -> None:
    cp = installed
    ns, _, _ = scenario(cp, "forge", nodes=0)
    kube = writer(cp, ns)
    extender = KubeClient(extender_kubeconfig(cp, "second-scheduler", tmp_path))
    try:
        _wait_for_the_policy(kube, ns)
        for what, (path, body) in _forgeries(ns).items():
            error = refused(what, lambda p=path, b=body: kube.request("POST", p, body=b))
            assert _by_policy(error), (what, str(error))
        # The policy binds everyone but the extender: the cluster administrator too (who may remove it).
        path, body = _forgeries(ns)["core v1 as gang-extender writes it"]
        with pytest.raises(ApiError) as admin:
            cp.request("POST", path, body)
        assert admin.value.status == 403 and REFUSAL in admin.value.body, str(admin.value)

        # Ordinary Events pass, through both APIs, and so does a GangState Event reported as someone else.
        allowed = {
            "plain": core_event(ns, "plain", "Started", {"source": {"component": "my-tool"}}),
            "plain-new": new_event(ns, "plain-new", "Started", "example.com/my-tool"),
            "own-gang-state": core_event(ns, "own-gang-state", REASON, {"source": {"component": "my-tool"}},
                                         FORM | {"namespace": ns}),
            "own-gang-state-new": new_event(ns, "own-gang-state-new", REASON, "example.com/my-tool"),
        }
        for path, body in allowed.values():
            kube.request("POST", path, body=body)

        # A patch may not turn an ordinary core v1 Event into gang-extender's GangState (events.k8s.io/v1
        # keeps reason and reportingController immutable) ...
        turned = {"reason": REASON, "source": {"component": "gang-extender"}}
        error = refused("patch into GangState", lambda: kube.request(
            "PATCH", f"/api/v1/namespaces/{ns}/events/plain", body=turned, content_type=MERGE))
        assert _by_policy(error), str(error)

        # ... nor change the one gang-extender wrote (through either API), which its own identity still may.
        extender.create_event({"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": "ann-0"}, "Normal",
                              REASON, "published by the extender's identity", {ANNOTATION: json.dumps(FORM)})
        (real,) = [e for e in cp.request("GET", f"/api/v1/namespaces/{ns}/events")["items"]
                   if e["reason"] == REASON and (e.get("source") or {}).get("component") == "gang-extender"]
        forged = {"metadata": {"annotations": {ANNOTATION: json.dumps(FORM | {"namespace": ns})}}}
        for api in ("/api/v1", "/apis/events.k8s.io/v1"):
            error = refused(f"patch of gang-extender's GangState ({api})", lambda a=api: kube.request(
                "PATCH", f"{a}/namespaces/{ns}/events/{real['metadata']['name']}", body=forged, content_type=MERGE))
            assert _by_policy(error), (api, str(error))
        names = {e["metadata"]["name"] for e in cp.request("GET", f"/api/v1/namespaces/{ns}/events")["items"]}
        assert names == {*allowed, real["metadata"]["name"]}, names
    finally:
        kube.close()
        extender.close()


def test_the_extender_still_publishes_what_kubectl_gang_explain_shows(installed: ControlPlane,
                                                                      tmp_path: Path) -> None:
    """gang-extender as its ServiceAccount, kube-scheduler calling it, an annotation gang of 2 of 3
    members: its GangState Event is written and ``kubectl gang explain`` shows it as published."""
    cp = installed
    ns, labels, _ = scenario(cp, "publish")
    (tmp_path / "ext").mkdir()
    (tmp_path / "home").mkdir()
    identity = extender_kubeconfig(cp, "second-scheduler", tmp_path)
    out: dict[str, str] = {}
    with scheduling_with_extender(cp, tmp_path / "ext", "--explain-publish-seconds", "1", kubeconfig=identity) as ext:
        create(cp, *(annotated(ns, "ann", i, labels) for i in range(2)))

        def published() -> bool:
            out["explain"] = kubectl_gang(cp, tmp_path / "home", "explain", f"{ns}/ann")
            return "by the leading gang-extender (GangState Event)" in out["explain"]

        try:
            wait_for(published, timeout=30, interval=0.5, what="kubectl gang explain to show the published form")
        except TimeoutError as exc:
            log = ext.log_path.read_text()
            raise AssertionError(f"{exc}\n{out.get('explain')}\n{log[-3000:]}") from None
    assert "State:       WaitingForMembers" in out["explain"], out["explain"]
    assert POLICY not in ext.log_path.read_text()
    print(out["explain"])
