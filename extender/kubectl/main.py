"""``kubectl gang`` (the executable ``kubectl-gang``): gangs as the API server shows them, from a laptop.

Owns: the plugin's flags (``list [-n NS | -A]``, ``explain NS/GROUP``, ``--kubeconfig``, ``--context``,
``KUBECONFIG`` as kubectl reads it), and the reads: the newest served version of each group API
(``cluster.groups.GROUP_APIS``), the pods, and the Events gang-extender wrote, of one namespace or all,
through the ``Reader`` seam (``KubeClient`` in use). Exit codes: 0 done, 1 no such gang (explain), 2 bad
arguments or the API server cannot be read. Must not: talk to the extender (everything comes from the
API server: the leader publishes what only it knows as ``GangState`` Events), or decide anything.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, TextIO
from urllib.parse import quote

from extender.cluster.groups import GROUP_APIS
from extender.errors import KubeError
from extender.kube.client import KubeClient, kubeconfig_namespace
from extender.kubectl import collect, render

PROG = "kubectl gang"
VIEWER_ROLE = "gang-extender:kubectl-gang-viewer"
"""The shipped ClusterRole granting what ``read`` lists (manifests/rbac/kubectl-gang-viewer.yaml)."""


def _hint(exc: KubeError) -> str:
    """What to do about a refusal: the role that grants every read of this plugin."""
    return (f"; the ClusterRole {VIEWER_ROLE} grants what {PROG} reads: ask for a RoleBinding to it in the "
            "namespace (a ClusterRoleBinding for -A)") if exc.status == 403 else ""


class Reader(Protocol):
    """What the plugin needs of an API server (``KubeClient``; fakes in unit tests)."""

    def serves(self, group: str, version: str, resource: str) -> bool: ...

    def list(self, path: str, page_size: int = 500,
             query: dict[str, str] | None = None) -> Iterable[dict[str, Any]]: ...


def _in(namespace: str | None, prefix: str, resource: str) -> str:
    return f"{prefix}/namespaces/{quote(namespace, safe='')}/{resource}" if namespace else f"{prefix}/{resource}"


def read(kube: Reader, namespace: str | None, warn: TextIO = sys.stderr) -> list[collect.GangRow]:
    """Every gang of ``namespace`` (None: all namespaces), read from the API server."""
    groups: list[collect.GroupObject] = []
    for api in GROUP_APIS:
        version = next((v for v in api.versions if kube.serves(api.group, v, api.resource)), None)
        if version is None:
            continue
        try:
            for obj in kube.list(_in(namespace, f"/apis/{api.group}/{version}", api.resource)):
                obj.setdefault("apiVersion", f"{api.group}/{version}")
                groups.append(collect.GroupObject(api.kind, obj))
        except KubeError as exc:
            print(f"{PROG}: cannot list {api.name}: {exc} (its gangs are shown from their pods only){_hint(exc)}",
                  file=warn)
    pods = list(kube.list(_in(namespace, "/api/v1", "pods")))
    try:
        events = list(kube.list(_in(namespace, "/api/v1", "events"),
                                query={"fieldSelector": f"source={collect.COMPONENT}"}))
    except KubeError as exc:
        print(f"{PROG}: cannot list events: {exc} (no reasons or published explanations){_hint(exc)}", file=warn)
        events = []
    return collect.gang_rows(groups, pods, events)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="gangs scheduled by gang-extender, as the API server "
                                     "shows them (group objects, pods, gang-extender's Events)")
    parser.add_argument("--kubeconfig", help="kubeconfig file [default: $KUBECONFIG, then ~/.kube/config]")
    parser.add_argument("--context", help="kubeconfig context [default: the current one]")
    commands = parser.add_subparsers(dest="command", required=True)
    listing = commands.add_parser("list", help="every gang: source API, minCount, members, bound, state, reason")
    listing.add_argument("-n", "--namespace", help="only this namespace [default: the context's]")
    listing.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    explain = commands.add_parser("explain", help="what the leading gang-extender published about a gang")
    explain.add_argument("group", metavar="NAMESPACE/GROUP", help="a PodGroup, Workload or annotation group")
    explain.add_argument("--pod-group", help="only this pod group of a 1.35 Workload")
    explain.add_argument("--replica", help="only this podGroupReplicaKey of a 1.35 Workload")
    return parser


def run(args: argparse.Namespace, kube: Reader, out: TextIO = sys.stdout, err: TextIO = sys.stderr,
        now: float | None = None) -> int:
    now = time.time() if now is None else now
    if args.command == "list":
        namespace = None if args.all_namespaces else (args.namespace or
                                                      kubeconfig_namespace(args.kubeconfig, args.context))
        print(render.table(read(kube, namespace, err), all_namespaces=namespace is None), end="", file=out)
        return 0
    namespace, slash, name = str(args.group).partition("/")
    if not slash or not namespace or not name or "/" in name:
        print(f"{PROG} explain: expected NAMESPACE/GROUP, got {args.group!r}", file=err)
        return 2
    found = collect.select(read(kube, namespace, err), namespace, name, args.pod_group, args.replica)
    if not found:
        print(f"{PROG} explain: no gang of group {namespace}/{name} (no group object and no member pods)", file=err)
        return 1
    print("\n".join(render.page(row, now) for row in found), end="", file=out)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if getattr(args, "namespace", None) and getattr(args, "all_namespaces", False):
        parser.error("-n and -A exclude each other")
    try:
        kube = KubeClient(args.kubeconfig, args.context)
    except KubeError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    try:
        return run(args, kube)
    except KubeError as exc:
        print(f"{PROG}: cannot read the API server {kube.server}: {exc}{_hint(exc)}", file=sys.stderr)
        return 2
    finally:
        kube.close()


if __name__ == "__main__":
    sys.exit(main())
