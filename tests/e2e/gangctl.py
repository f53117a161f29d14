"""The ``kubectl gang`` scenario shared by the 1.35 and 1.37 e2e tests (tests/e2e/test_kubectl_gang*.py).

The installed ``kubectl-gang`` runs as a kubectl plugin (``kubectl gang``, found on PATH by kubectl
itself) and on its own with ``--kubeconfig``, with nothing but a kubeconfig (the admin's, or that of a
user bound only to the shipped ClusterRole gang-extender:kubectl-gang-viewer, in the scenario's namespace
or everywhere, or only to the built-in view role it is aggregated into): HOME is an empty
directory and no in-cluster variables are set. gang-extender runs as the e2e harness runs it,
publishing its explanations every second; the plugin never talks to it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml
from controlplane import ControlPlane, wait_for
from identities import MANIFESTS
from support import all_bound, create, pod, pod_spec, scenario, scheduling_with_extender

KUBECTL_GANG = str(Path(sys.executable).with_name("kubectl-gang"))

Group = Callable[[str, str, int], dict[str, Any]]           # (namespace, name, minCount) -> group object
Member = Callable[[str, str, int, Mapping[str, str]], dict[str, Any]]  # (ns, group, index, selector) -> pod


def kubectl_gang(cp: ControlPlane, home: Path, *args: str, plugin: bool = True, kubeconfig: str = "") -> str:
    """``kubectl gang ARGS`` (kubectl finds the plugin on PATH; KUBECONFIG names the cluster) or, with
    ``plugin=False``, ``kubectl-gang --kubeconfig ... ARGS``; its output (exit code 0 and nothing on
    stderr required). ``kubeconfig``: another identity's (default: the admin's)."""
    env = {"PATH": f"{Path(KUBECTL_GANG).parent}:{os.environ.get('PATH', '')}", "HOME": str(home),
           "LANG": "C.UTF-8"}
    config = kubeconfig or cp.kubeconfig
    if plugin:
        argv, env["KUBECONFIG"] = [str(cp.bin_dir / "kubectl"), "gang", *args], config
    else:
        argv = [KUBECTL_GANG, "--kubeconfig", config, *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env, check=False)
    assert done.returncode == 0 and not done.stderr, f"{argv}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


SOURCE_COLUMN = "SOURCE"
COLUMNS = ("NAME", "SOURCE", "MIN", "MEMBERS", "BOUND", "STATE", "REASON")


def row(listing: str, name: str) -> dict[str, str]:
    """Gang ``name``'s row of a ``kubectl gang list -n`` table, by column; {} when absent. Columns are
    apart by at least two spaces; a cell (the source API, the reason) holds single spaces only."""
    for line in listing.splitlines()[1:]:
        cells = re.split(r"\s{2,}", line.strip())
        if cells[0] == name:
            return dict(zip(COLUMNS, cells, strict=False))
    return {}


VIEWER_ROLE = MANIFESTS / "rbac" / "kubectl-gang-viewer.yaml"
"""The shipped ClusterRole gang-extender:kubectl-gang-viewer: all ``kubectl gang`` may read (API discovery
is open to every authenticated user)."""


def _binding(kind: str, name: str, ns: str | None, role: str, user: str) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
            "metadata": {"name": name, **({"namespace": ns} if ns else {})},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]}


def reader_kubeconfig(cp: ControlPlane, ns: str, role: str = "", cluster_wide: bool = False) -> str:
    """A kubeconfig of a user bound to one ClusterRole (default: the shipped viewer role, applied from
    manifests/rbac) in ``ns`` only, or in every namespace (``cluster_wide``), and to nothing else."""
    if not role:
        cp.kubectl("apply", "-f", str(VIEWER_ROLE))
        role = yaml.safe_load(VIEWER_ROLE.read_text())["metadata"]["name"]
    user = f"gang-reader-{'all' if cluster_wide else ns}-{role.replace(':', '-')}"
    name = f"{user}-binding"
    create(cp, _binding("ClusterRoleBinding", name, None, role, user) if cluster_wide
           else _binding("RoleBinding", name, ns, role, user))
    return cp.user_kubeconfig(user)


def refused(cp: ControlPlane, home: Path, ns: str) -> None:
    """A user bound to nothing: ``kubectl gang list`` exits 2 with a message naming the shipped role,
    never a traceback."""
    argv = [KUBECTL_GANG, "--kubeconfig", cp.user_kubeconfig(f"gang-nobody-{ns}"), "list", "-n", ns]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False,
                          env={"HOME": str(home), "LANG": "C.UTF-8"})
    assert done.returncode == 2 and not done.stdout, (done.returncode, done.stdout, done.stderr)
    last = done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr and "403" in last and "gang-extender:kubectl-gang-viewer" in last, done.stderr


def as_readers(cp: ControlPlane, home: Path, ns: str, train: str, out: dict[str, str]) -> None:
    """``kubectl gang`` list and explain as users bound only to the shipped viewer role (nothing on
    stderr: a list it makes that the role does not grant fails here), by the built-in view role it is
    aggregated into, and refused to a user bound to nothing."""
    reader = reader_kubeconfig(cp, ns)
    assert row(kubectl_gang(cp, home, "list", "-n", ns, kubeconfig=reader), train)["STATE"] == "WaitingForMembers"
    out["explain"] = kubectl_gang(cp, home, "explain", f"{ns}/train", plugin=False, kubeconfig=reader)
    for text in ("State:       WaitingForMembers", "minCount 4", "3/4 pods exist", "Published:", "Live:"):
        assert text in out["explain"], out["explain"]
    everywhere = reader_kubeconfig(cp, ns, cluster_wide=True)
    assert row(kubectl_gang(cp, home, "list", "-n", ns, kubeconfig=everywhere), train)["STATE"] == "WaitingForMembers"
    assert any(line.startswith(ns) for line in kubectl_gang(cp, home, "list", "-A", kubeconfig=everywhere).splitlines())
    viewer = reader_kubeconfig(cp, ns, role="view")  # the aggregation controller fills view in a moment
    wait_for(lambda: subprocess.run([KUBECTL_GANG, "--kubeconfig", viewer, "list", "-n", ns], capture_output=True,
                                    text=True, timeout=30, check=False, env={"HOME": str(home)}).stderr == "",
             timeout=30, interval=0.5, what="the view ClusterRole to aggregate gang-extender:kubectl-gang-viewer")
    full = kubectl_gang(cp, home, "list", "-n", ns, kubeconfig=viewer)
    assert row(full, train)["STATE"] == "WaitingForMembers" and "3/4 pods exist" in row(full, train)["REASON"], full
    refused(cp, home, ns)


def annotated(ns: str, name: str, index: int, selector: Mapping[str, str]) -> dict[str, Any]:
    return pod(ns, f"{name}-{index}", pod_spec(cpu="1", selector=selector),
               annotations={"gang-extender.io/group": name, "gang-extender.io/min-count": "3"})


def run_scenario(cp: ControlPlane, workdir: Path, name: str, group: Group, member: Member,
                 group_name: Callable[[str], str] = lambda g: g) -> dict[str, str]:
    """A gang waiting for its 4th member, a gang of 2 bound, an annotation gang waiting for its 3rd:
    ``kubectl gang list`` and ``explain`` show each as it is, then the first gang bound once its 4th
    member exists. Returns the outputs (printed for the README)."""
    home = workdir / "home"
    home.mkdir()
    (workdir / "ext").mkdir()
    ns, labels, nodes = scenario(cp, name)
    started = time.monotonic()
    out: dict[str, str] = {}
    with scheduling_with_extender(cp, workdir / "ext", "--explain-publish-seconds", "1"):
        create(cp, group(ns, "train", 4), group(ns, "small", 2),
               *(member(ns, "train", i, labels) for i in range(3)), *(member(ns, "small", i, labels) for i in range(2)),
               *(annotated(ns, "ann", i, labels) for i in range(2)))
        train, small = group_name("train"), group_name("small")

        def shown() -> bool:
            out["list"] = kubectl_gang(cp, home, "list", "-n", ns)
            waiting, done, ann = row(out["list"], train), row(out["list"], small), row(out["list"], "ann")
            return (done.get("STATE") == "Bound" and waiting.get("STATE") == "WaitingForMembers"
                    and "3/4 pods exist" in waiting.get("REASON", "") and ann.get("STATE") == "WaitingForMembers")
        try:
            wait_for(shown, timeout=30, interval=0.5, what=f"kubectl gang list to show the gangs of {ns}")
        except TimeoutError as exc:
            raise AssertionError(f"{exc}; the last list:\n{out.get('list')}") from None
        waiting, done = row(out["list"], train), row(out["list"], small)
        assert [waiting[c] for c in ("MIN", "MEMBERS", "BOUND")] == ["4", "3", "0"], out["list"]
        assert [done[c] for c in ("MIN", "MEMBERS", "BOUND")] == ["2", "2", "2"], out["list"]
        assert row(out["list"], "ann")["SOURCE"] == "annotations", out["list"]
        as_readers(cp, home, ns, train, out)  # the shipped viewer role, view, and no role at all
        out["explain-ann"] = kubectl_gang(cp, home, "explain", f"{ns}/ann")
        assert "State:       WaitingForMembers" in out["explain-ann"] and "[annotations]" in out["explain-ann"]
        create(cp, member(ns, "train", 3, labels))
        all_bound(cp, ns, "train-", 4, nodes)
        wait_for(lambda: row(kubectl_gang(cp, home, "list", "-n", ns), train).get("STATE") == "Bound",
                 timeout=30, interval=0.5, what="kubectl gang list to show the gang bound")
        out["explain-bound"] = kubectl_gang(cp, home, "explain", f"{ns}/train")
        assert "Live:        Bound; 4 member(s) exist, 4 bound" in out["explain-bound"], out["explain-bound"]
        out["list-all"] = kubectl_gang(cp, home, "list", "-A")
        assert any(line.startswith(ns) for line in out["list-all"].splitlines()), out["list-all"]
    for key, text in out.items():
        print(f"----- kubectl gang {key} ({time.monotonic() - started:.0f}s)\n{text}")
    return out
