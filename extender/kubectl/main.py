"""``kubectl gang`` (the executable ``kubectl-gang``): gangs as the API server shows them, from a laptop.

Owns: the plugin's flags (``list [-n NS | -A]``, ``explain NS/GROUP``, ``fit -f FILE``, ``--kubeconfig``,
``--context``, ``KUBECONFIG`` as kubectl reads it), and the reads: the newest served version of each group API
(``cluster.groups.GROUP_APIS``), the pods, and the Events gang-extender wrote, of one namespace or all,
through the ``Reader`` seam (``KubeClient`` in use). Exit codes: 0 done, 1 no such gang (explain), 2 bad
arguments or the API server cannot be read. Must not: talk to the extender (everything comes from the
API server: the leader publishes what only it knows as ``GangState`` Events), or decide anything (``fit``
asks ``fitting.oracle`` through ``kubectl.fit``).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol, TextIO
from urllib.parse import quote

import yaml

from extender.cluster.groups import GROUP_APIS
from extender.errors import KubeError, SubmissionError
from extender.fitting import submission
from extender.kube.client import KubeClient, kubeconfig_namespace
from extender.kubectl import collect, fit, render

PROG = "kubectl gang"
VIEWER_ROLE = "gang-extender:kubectl-gang-viewer"
"""The shipped ClusterRole granting what ``read`` lists (manifests/rbac/kubectl-gang-viewer.yaml)."""
FIT_ROLE = "gang-extender:kubectl-gang-fit"
"""The shipped ClusterRole granting what ``fit`` reads (manifests/rbac/kubectl-gang-fit.yaml)."""


def _hint(exc: KubeError, command: str = "") -> str:
    """What to do about a refusal: the role that grants every read of this command."""
    if exc.status != 403:
        return ""
    if command == "fit":
        return (f"; fit reads the whole cluster (nodes, every namespace's pods, PodDisruptionBudgets, group "
                f"objects, gang-extender's Events): ask for a ClusterRoleBinding to the ClusterRole {FIT_ROLE}")
    return (f"; the ClusterRole {VIEWER_ROLE} grants what {PROG} reads: ask for a RoleBinding to it in the "
            "namespace (a ClusterRoleBinding for -A)")


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
    fit = commands.add_parser("fit", help="would a gang start if submitted now, where, and if not, what would it "
                              "take (nothing is created)")
    fit.add_argument("-f", "--filename", required=True, metavar="FILE",
                     help="what you would submit: group object and pods, a pod template, a Job, JobSet or PyTorchJob "
                          "(YAML or JSON; - for stdin)")
    fit.add_argument("-n", "--namespace", help="namespace of objects without one [default: the context's]")
    fit.add_argument("--count", type=int, help="copies of a lone Pod or PodTemplate")
    fit.add_argument("--extender-namespace", help="read the state of the gang-extender in this namespace only")
    fit.add_argument("-o", "--output", choices=("text", "json"), default="text", help="text or the JSON answer")
    return parser


def _objects(source: str, stdin: TextIO) -> list[Any]:
    """The documents of a YAML or JSON file (``-``: stdin); SubmissionError when it cannot be read."""
    try:
        text = stdin.read() if source == "-" else Path(source).read_text()
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise SubmissionError(f"cannot read {source}: {exc}") from None


def _fit(args: argparse.Namespace, kube: Reader, out: TextIO, err: TextIO, stdin: TextIO, now: float) -> int:
    # Millions of objects are built (20 MB of JSON at 5,000 nodes) and dropped together at the end: the
    # cycle collector's passes over them while they are built were a third of the time.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _fit_answer(args, kube, out, err, stdin, now)
    finally:
        if collecting:
            gc.enable()


def _fit_answer(args: argparse.Namespace, kube: Reader, out: TextIO, err: TextIO, stdin: TextIO, now: float) -> int:
    namespace = args.namespace or kubeconfig_namespace(args.kubeconfig, args.context)
    if args.count is not None and args.count < 1:
        print(f"{PROG} fit: --count must be at least 1, got {args.count}", file=err)
        return 2
    try:
        question = submission.read(_objects(args.filename, stdin), namespace, args.count)
        answer = fit.answer(kube, question, extender_namespace=args.extender_namespace, now=now)
    except SubmissionError as exc:
        print(f"{PROG} fit: {exc}", file=err)
        return 2
    except RecursionError:  # a YAML alias that contains itself
        print(f"{PROG} fit: {args.filename} nests too deeply to be Kubernetes objects", file=err)
        return 2
    print(json.dumps(answer, indent=2, sort_keys=True) if args.output == "json" else render.fit_page(answer),
          end="\n" if args.output == "json" else "", file=out)
    return 0


def run(args: argparse.Namespace, kube: Reader, out: TextIO = sys.stdout, err: TextIO = sys.stderr,
        now: float | None = None, stdin: TextIO = sys.stdin) -> int:
    now = time.time() if now is None else now
    if args.command == "fit":
        return _fit(args, kube, out, err, stdin, now)
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
        print(f"{PROG}: cannot read the API server {kube.server}: {exc}{_hint(exc, args.command)}", file=sys.stderr)
        return 2
    finally:
        kube.close()


if __name__ == "__main__":
    sys.exit(main())
