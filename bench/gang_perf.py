"""Upstream's gang scheduling benchmark at its size, on the local control plane (issue 14 section 3).

Upstream: ``k8s.io/kubernetes`` v1.37.2, test/integration/scheduler_perf/podgroup/gangscheduling/
performance-config.yaml. Its shapes, reproduced here:

- nodes: ``--nodes`` (upstream 5,000) of scheduler_perf's default node: 4 cpu, 32Gi, 110 pods, Ready;
- one namespace ``gang-ns-0``; PodGroups ``gang-<i>`` with a gang policy of ``minCount`` = gang size
  (``scheduling.k8s.io/v1beta1`` on 1.37; on 1.35 a ``v1alpha1`` Workload per gang, pod group ``gang``);
- pods ``test-gang-scheduling-<i>`` (pause, 100m cpu / 100Mi), pod i in gang i // size
  (``spec.schedulingGroup.podGroupName``; on 1.35 ``spec.workloadRef``), created in index order while the
  scheduler runs (16 client threads), after the groups exist;
- workloads: 1,000 / 2,000 / 3,000 gangs of 3 and 3 / 6 / 9 gangs of 1,000 (``--workloads``).

Configurations, each workload on a fresh control plane: ``ceiling`` (kube-scheduler alone, the same pods
without a group), ``gang-extender`` (the shipped scheduler configuration, ``httpTimeout`` and the extender's
``--scheduler-http-timeout-seconds`` raised to ``--http-timeout`` so 1,000 held binds can meet at the
barrier), ``in-tree`` (1.37: ``GenericWorkload`` on kube-scheduler too; 1.35: ``GenericWorkload`` and
``GangScheduling``).

Reported per run: pods/s (pods / first created -> last bound), gang scheduling duration p50/p90/p99
(upstream's PodGroupSchedulingDuration: first member created -> minCount-th member bound, from one pod
watch), gang-extender's filter and bind latency (its ``/metrics`` histograms), its CPU seconds and peak
RSS (worker VmHWM), the mirror's initial sync (``gang_extender_watch_initial_sync_seconds``, the extender
started after the nodes exist), CPU seconds of every process. Checked: every pod bound; with gangs no
timeout and no partial gang. Exit status 1 when a check fails.

Run: ``make bench-gang-perf`` (= ``.venv/bin/python bench/gang_perf.py``); ``--scale 0.1`` divides node
and gang counts by ten. Results: docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import e2e_scheduling as es
import gang_perf_report as rep
import workloads as wl
from controlplane import DEFAULT_SCHEDULER_CONFIG, ControlPlane, find_bin_dir, tail

CONFIGS = ("ceiling", "gang-extender", "in-tree")
UPSTREAM_WORKLOADS = ("1000x3", "2000x3", "3000x3", "3x1000", "6x1000", "9x1000")
NAMESPACE = "gang-ns-0"
NODE = {"cpu": "4", "memory": "32Gi", "pods": "110"}  # scheduler_perf's node-default.yaml
POD_REQUESTS = {"cpu": "100m", "memory": "100Mi"}     # gang-pod.yaml
PAUSE = "registry.k8s.io/pause:3.10.1"


@dataclass(frozen=True)
class Release:
    """What differs between the two pinned releases: the group API, the pod's group field, the gates."""

    version: str
    group_api: str
    in_tree_gates: dict[str, bool]

    def control_plane_args(self, config: str) -> dict[str, Any]:
        if self.version.startswith("1.35"):
            return {"feature_gates": self.in_tree_gates if config == "in-tree" else {}}
        return {"feature_gates": {"GenericWorkload": True}, "default_feature_gates": False,
                "runtime_config": ("scheduling.k8s.io/v1beta1=true",),
                "scheduler_feature_gates": None if config == "in-tree" else {}}

    def group(self, index: int, size: int) -> tuple[str, dict[str, Any]]:
        name = f"gang-{index}"
        if self.version.startswith("1.35"):
            return "workloads", {"apiVersion": self.group_api, "kind": "Workload",
                                 "metadata": {"name": name, "namespace": NAMESPACE},
                                 "spec": {"podGroups": [{"name": "gang", "policy": {"gang": {"minCount": size}}}]}}
        return "podgroups", {"apiVersion": self.group_api, "kind": "PodGroup",
                             "metadata": {"name": name, "namespace": NAMESPACE},
                             "spec": {"schedulingPolicy": {"gang": {"minCount": size}}}}

    def join(self, spec: dict[str, Any], index: int) -> None:
        if self.version.startswith("1.35"):
            spec["workloadRef"] = {"name": f"gang-{index}", "podGroup": "gang"}
        else:
            spec["schedulingGroup"] = {"podGroupName": f"gang-{index}"}


RELEASES = {
    "1.37.2": Release("1.37.2", "scheduling.k8s.io/v1beta1", {"GenericWorkload": True}),
    "1.35.4": Release("1.35.4", "scheduling.k8s.io/v1alpha1", {"GenericWorkload": True, "GangScheduling": True}),
}


def parse_workload(text: str, scale: float) -> tuple[int, int]:
    """``GANGSxSIZE`` -> (gangs scaled, at least 1; size)."""
    gangs, _, size = text.partition("x")
    return max(1, round(int(gangs) * scale)), int(size)


def plan(release: Release, gangs: int, size: int, *, grouped: bool) -> tuple[list[tuple[str, dict[str, Any]]],
                                                                             wl.Plan]:
    groups = [release.group(g, size) for g in range(gangs)] if grouped else []
    pods, plan_gangs = [], []
    for g in range(gangs):
        names = []
        for i in range(g * size, (g + 1) * size):
            spec: dict[str, Any] = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0, "containers": [
                {"name": "pause", "image": PAUSE, "resources": {"requests": dict(POD_REQUESTS)}}]}
            if grouped:
                release.join(spec, g)
            pods.append({"apiVersion": "v1", "kind": "Pod", "spec": spec,
                         "metadata": {"name": f"test-gang-scheduling-{i}", "namespace": NAMESPACE}})
            names.append(f"{NAMESPACE}/test-gang-scheduling-{i}")
        plan_gangs.append(wl.Gang(f"{NAMESPACE}/gang-{g}", names, size, "identical"))
    return groups, wl.Plan([], [], pods, plan_gangs)


# ---------------------------------------------------------------------------------------- one run
def start_extender(cp: ControlPlane, workdir: Path, args: argparse.Namespace, result: rep.Result) -> Any:
    """gang-extender, started once the nodes exist, so its initial sync lists all of them."""
    ext = wl.extender_process(cp.kubeconfig, workdir, args=[
        "--scheduler-http-timeout-seconds", f"{args.http_timeout:g}",
        "--gang-timeout-seconds", f"{args.gang_timeout:g}", *args.extender_args.split()])
    started = time.monotonic()
    ext.start(timeout=300)
    result.extender["ready_s"] = time.monotonic() - started
    values = wl.extender_metrics(ext)
    for resource in ("nodes", "pods"):
        result.extender[f"sync_{resource}_s"] = values.get(
            f'gang_extender_watch_initial_sync_seconds{{resource="{resource}"}}', float("nan"))
    wl.log(f"[{result.config}] gang-extender ready in {result.extender['ready_s']:.1f}s; mirror initial sync "
           f"nodes {result.extender['sync_nodes_s']:.2f}s, pods {result.extender['sync_pods_s']:.2f}s")
    return ext


def scheduler_config(config: str, ext: Any, args: argparse.Namespace) -> dict[str, Any]:
    if config != "gang-extender":
        return dict(DEFAULT_SCHEDULER_CONFIG)
    from support import scheduler_config as shipped

    return shipped(ext.url, http_timeout=f"{args.http_timeout:g}s")


def create_groups(cp: ControlPlane, release: Release, groups: Sequence[tuple[str, dict[str, Any]]]) -> None:
    def post(item: tuple[str, dict[str, Any]]) -> None:
        cp.request("POST", f"/apis/{release.group_api}/namespaces/{NAMESPACE}/{item[0]}", item[1])

    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(post, groups))


def wait_bound(watch: wl.BindWatch, keys: Sequence[str], first: float, *, cap: float, stall: float,
               name: str) -> float:
    """Wait until every key is bound, ``cap`` seconds pass or no pod binds for ``stall`` seconds; the end."""
    progress_at, count, report = time.monotonic(), 0, time.monotonic()
    while not watch.wait(lambda: watch.bound_count(keys) == len(keys), timeout=2.0):
        now = time.monotonic()
        bound = watch.bound_count(keys)
        if bound != count:
            progress_at, count = now, bound
        if now - first > cap or now - progress_at > stall:
            wl.log(f"[{name}] giving up after {now - first:.0f}s ({bound}/{len(keys)} bound)")
            break
        if now - report >= 10:
            report = now
            wl.log(f"[{name}] {now - first:5.1f}s: {bound}/{len(keys)} bound")
    return time.monotonic()


def measure(cp: ControlPlane, ext: Any, result: rep.Result, release: Release, work: tuple[int, int],
            args: argparse.Namespace) -> None:
    """Groups, then the pods while the scheduler runs; every figure of ``result``."""
    groups, pods = plan(release, *work, grouped=result.config != "ceiling")
    keys = [f"{NAMESPACE}/{p['metadata']['name']}" for p in pods.pods]
    result.pods, result.gangs, result.size = len(keys), work[0], work[1]
    cp.create_namespace(NAMESPACE)
    create_groups(cp, release, groups)
    time.sleep(1.0)  # upstream waits for the scheduler's informer to hold the groups
    watch = wl.BindWatch(cp)
    meter = es.CpuMeter(cp)
    ext0 = wl.extender_metrics(ext) if ext is not None else {}
    sched0 = es.prom(cp.metrics("kube-scheduler"))
    try:
        created = wl.create_objects(cp, pods)
        first = min(created.values())
        result.create_seconds = max(created.values()) - first
        end = wait_bound(watch, keys, first, cap=args.cap, stall=args.stall, name=f"{result.workload} {result.config}")
        bound = dict(watch.bound)
    finally:
        watch.close()
    binds = sorted(bound[k] for k in keys if k in bound)
    result.bound = len(binds)
    result.seconds = (binds[-1] if result.bound == len(keys) else end) - first
    rep.gang_figures(result, pods.gangs, created, bound)
    result.cpu = meter.used()
    sched1 = es.prom(cp.metrics("kube-scheduler"))
    result.scheduler = {"attempt_ms": es.scheduler_attempt_ms(sched0, sched1),
                        "podgroup_attempt_ms": rep.mean_ms(sched0, sched1,
                                                           "scheduler_podgroup_scheduling_attempt_duration_seconds")}
    gate = "GangScheduling" if release.version.startswith("1.35") else "GenericWorkload"
    result.scheduler["in_tree_gate"] = next(  # the gate that turns the in-tree gang plugin on: 1 only for in-tree
        (v for k, v in sched1.items() if k.startswith(f'kubernetes_feature_enabled{{name="{gate}"')), float("nan"))
    log_text = cp.log_path("kube-scheduler").read_text(errors="replace")
    if ext is not None:
        ext1 = settled_metrics(ext, ext0, result.bound)
        for verb in ("filter", "bind"):
            result.extender.update(rep.verb_latency(ext0, ext1, verb))
        result.timeouts = (wl.metric(ext1, "gang_extender_gangs_timeouts_total")
                           - wl.metric(ext0, "gang_extender_gangs_timeouts_total"))
        result.extender["cpu_s"] = result.cpu.get("gang-extender", float("nan"))
        # filters of gang members the extender's pod watch had not delivered yet (issue 26: each waits up to
        # 0.1 s for it; one still unseen is told to come back and woken when it comes)
        result.extender["unseen_filters"] = (wl.metric(ext1, "gang_extender_filter_unseen_pods_total")
                                             - wl.metric(ext0, "gang_extender_filter_unseen_pods_total"))
        for name in ("events", "pod_wakes", "group_status_writes"):  # API writes it tried (every outcome)
            result.extender[f"{name}_tried"] = (wl.metric(ext1, f"gang_extender_{name}_total")
                                                  - wl.metric(ext0, f"gang_extender_{name}_total"))
        result.extender["peak_rss_mib"] = rep.peak_rss_mib(es.extender_worker_pid(ext))
    elif result.config == "in-tree":
        result.timeouts = log_text.count("rejected due to timeout")


def settled_metrics(ext: Any, ext0: Mapping[str, float], bound: int, wait: float = 5.0) -> dict[str, float]:
    """gang-extender's metrics once every bind it answered is counted: a bind's histogram is observed as its
    handler returns, which can come just after the pod watch saw the Binding. Waits up to ``wait`` s."""
    name = 'gang_extender_request_seconds_count{verb="bind"}'
    deadline = time.monotonic() + wait
    while True:
        ext1 = wl.extender_metrics(ext)
        if ext1.get(name, 0.0) - ext0.get(name, 0.0) >= bound or time.monotonic() >= deadline:
            return ext1
        time.sleep(0.1)


def run_one(config: str, workload: str, release: Release, bin_dir: Path, args: argparse.Namespace,
            workdir: Path) -> rep.Result:
    work = parse_workload(workload, args.scale)
    nodes = max(1, round(args.nodes * args.scale))
    name = f"{nodes}Nodes_{work[0]}Gangs_{work[0] * work[1]}Pods" + (f"_{work[1]}PerGroup" if work[1] > 3 else "")
    result = rep.Result(config=config, workload=name, nodes=nodes, k8s=release.version)
    slug = f"{name}-{config}"
    wl.log(f"[{slug}] fresh control plane (Kubernetes {release.version})")
    with ControlPlane(bin_dir, workdir / slug, log=wl.log, keep=True, **release.control_plane_args(config)) as cp:
        started = time.monotonic()
        cp.add_nodes(nodes, prefix="scheduler-perf-", **NODE)
        result.nodes_seconds = time.monotonic() - started
        ext = start_extender(cp, workdir / slug, args, result) if config == "gang-extender" else None
        try:
            cp.start_scheduler(scheduler_config(config, ext, args))
            with es.py_spy(ext, args.py_spy, slug):
                measure(cp, ext, result, release, work, args)
        except Exception:
            wl.log(f"[{slug}] failed; scheduler log tail:\n{tail(cp.log_path('kube-scheduler'))}")
            raise
        finally:
            if ext is not None:
                ext.stop()
    result.loadavg = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    wl.log(f"[{slug}] {result.bound}/{result.pods} bound in {result.seconds:.1f}s ({result.pods_per_second:.0f} "
           f"pods/s); {result.whole_gangs}/{result.gangs} whole, {result.partial_gangs} partial; load {result.loadavg}")
    return result


def run(args: argparse.Namespace) -> list[rep.Result]:
    """Every workload under every configuration, in that order; the results (also as ``--json``)."""
    release = RELEASES[args.k8s]
    bin_dir = find_bin_dir({**os.environ, "K8S_VERSION": release.version})
    workdir = Path(tempfile.mkdtemp(prefix="gang-perf-"))
    wl.log(f"[gang-perf] {os.cpu_count()} cpu; Kubernetes {release.version} ({bin_dir}); work dir {workdir}; "
           f"load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    results: list[rep.Result] = []
    try:
        for workload in args.workloads.split(","):
            for config in args.configs.split(","):
                results.append(run_one(config.strip(), workload.strip(), release, bin_dir, args, workdir))
    finally:
        if args.json and results:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                             "nproc": os.cpu_count(), "results": [rep.as_json(r) for r in results]},
                                            indent=1, default=str))
            wl.log(f"[gang-perf] wrote {args.json}")
        if not args.keep:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
    return results


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=5000, help="fake nodes (upstream: 5,000) [5000]")
    p.add_argument("--workloads", default="1000x3,3x1000",
                   help=f"GANGSxSIZE, comma-separated; upstream's: {','.join(UPSTREAM_WORKLOADS)} [1000x3,3x1000]")
    p.add_argument("--configs", default=",".join(CONFIGS), help=f"[{','.join(CONFIGS)}]")
    p.add_argument("--scale", type=float, default=1.0, help="multiplies node and gang counts (not gang sizes) [1]")
    p.add_argument("--k8s", choices=sorted(RELEASES), default="1.37.2", help="pinned release [1.37.2, upstream's]")
    p.add_argument("--http-timeout", type=float, default=120.0,
                   help="kube-scheduler's extender httpTimeout and --scheduler-http-timeout-seconds [120]")
    p.add_argument("--gang-timeout", type=float, default=100.0, help="gang-extender --gang-timeout-seconds [100]")
    p.add_argument("--extender-args", default="", help="further gang-extender serve flags")
    p.add_argument("--cap", type=float, default=900.0, help="give up on a run after this many seconds [900]")
    p.add_argument("--stall", type=float, default=120.0, help="... or after this long without a bind [120]")
    p.add_argument("--py-spy", type=Path, metavar="DIR",
                   help="profile gang-extender's worker with py-spy (pip install py-spy) into DIR")
    p.add_argument("--json", type=Path, help="write every number here")
    p.add_argument("--keep", action="store_true", help="keep the work directory (component logs)")
    p.add_argument("--report", type=Path, metavar="JSON", help="print the table of an earlier --json file; run nothing")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so the extender and the control plane are stopped on the way out
    signal.signal(signal.SIGTERM, lambda signum, frame: (_ for _ in ()).throw(KeyboardInterrupt()))
    started = time.monotonic()
    results = rep.load(args.report) if args.report else run(args)
    ok, lines = rep.checks(results)
    when = (f"from {args.report}" if args.report else f"run took {time.monotonic() - started:.0f}s; load average at "
            f"the end {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    print(f"\n## Upstream's gang benchmark (Kubernetes {results[0].k8s if results else args.k8s}; "
          f"{os.cpu_count()} cpu; {when})\n")
    print(rep.table(results))
    print("\n" + lines)
    print(f"\nChecks (every pod bound; gang-extender and in-tree: 0 gang timeouts, 0 partial gangs): "
          f"{'PASSED' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
