"""End-to-end scheduling benchmark: kube-scheduler v1.35.4 (or v1.37.2) on 1,000 fake nodes, four ways, one run.

1. ``ceiling``: kube-scheduler with no extender, the same pods without ``workloadRef`` (no gangs);
2. ``noop-extender``: kube-scheduler with ``bench/noop_extender.py``, a do-nothing extender on
   gang-extender's HTTP stack (filter and bind), the same pods as the ceiling: what the protocol costs;
   ``noop-extender:flask`` serves it as Flask routes on gunicorn's stock gthread worker instead;
3. ``gang-extender``: kube-scheduler with gang-extender (``manifests/scheduler-config.yaml``);
4. ``in-tree``: kube-scheduler with the in-tree GangScheduling plugin (gates ``GenericWorkload`` and
   ``GangScheduling`` on), no extender.

``--release 1.37`` runs kube-scheduler v1.37.2 instead, gangs as ``scheduling.k8s.io/v1beta1`` PodGroups
(``GenericWorkload`` on the API server; on kube-scheduler only for ``in-tree``, where it turns the in-tree gang
plugin on). There ``gang-extender:quorum-gate`` adds the chart's quorum gate (``gang.quorumGate``, rendered by
the pinned helm): each pod is created behind the scheduling gate ``gang-extender.io/quorum``, which
gang-extender removes once the pod's gang has its quorum.

Each configuration gets a fresh control plane (same binaries, same 1,000 nodes: 984 general nodes of
8 cpu and a 16-node contention pool of 4 cpu) and runs up to four phases, measured from one pod watch:

- **backlog**: ``--gangs`` gangs of ``--size`` identical members (500m / 1Gi; 2,000 pods) exist before
  kube-scheduler starts (and the extender has listed them); pods/s = pods / (scheduler started -> last
  pod bound): the scheduler's throughput, not the client's creation rate. The pods are then deleted;
- **arrival**: the same gangs created gang by gang, as fast as 16 client threads can, while the
  scheduler runs; gang latency = last member created -> last member bound;
- **paced**: the same gangs created at ``--paced-rate`` pods/s (gang ``i`` at ``i / rate`` seconds,
  its members together), the same rate for every configuration and below what each sustains, so no
  queue builds: the gang latency is then what a gang waits for being a gang. Arrival pods are deleted
  first;
- **contention**: ``--contention-gangs`` gangs of 8 members of 3 cpu on the 16-node pool, which
  holds two at a time, created interleaved (member 0 of every gang, then member 1, ...). A gang
  "runs" for ``--hold`` seconds once all its members are bound, then its pods are deleted (the job
  finished), freeing room for the next. Every gang should complete, without timeouts; the phase
  ends when all have completed or after ``--contention-cap`` seconds.

A phase also ends after 60 s without any new bind (a stall). A gang is *partial* when some but not
all of its members were bound for more than 2 s. Gang timeouts: gang-extender's
``gang_extender_gangs_timeouts_total``; the in-tree plugin's Permit timeout is 5 minutes, so within
the cap it shows as gangs that never complete.

Also recorded per phase: CPU seconds used by each process (kube-apiserver, etcd, kube-scheduler, the
extender, this driver), the extender's CPU per pod and gang-extender's API writes beyond Bindings
(Events, wake-ups, group status), kube-scheduler's mean scheduling-algorithm duration, its attempts
and queue moves per pod, and gang-extender's mean latency per verb; with ``--record``, each gang's
milestones from gang-extender's request recording (``bench/gang_trace.py``). ``--pin`` puts the
control plane and this driver on CPU 0 and the extender on CPU 1.

The floors printed at the end are issue 29's (``bench/e2e_report.py``): gang-extender >= 95 % of the
do-nothing extender's pods/s (backlog, arrival), its CPU per pod <= the do-nothing extender's + 0.3 ms
(API writes beyond Bindings not counted), and in the paced phase gang latency p50 / p99 and unschedulable
attempts per pod <= the in-tree plugin's with every gang whole, no timeout, no partial gang. Run:
``make bench-e2e`` (``make bench-e2e-pinned``); ``--json FILE`` keeps every number for ``bench/plot.py``."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gang_trace
import pinning
import workloads as wl
from controlplane import DEFAULT_SCHEDULER_CONFIG, ApiError, ControlPlane, find_bin_dir, tail
from e2e_meters import (
    CpuMeter,
    extender_ms,
    extender_worker_pid,
    extender_writes,
    perf_record,
    prom,
    py_spy,
    scheduler_attempt_ms,
    scheduler_counts,
    thread_runs,
    threads_cpu_used,
    user_system,
    watch_events,
    worker_threads_cpu,
)
from e2e_report import WRITE_MS, Phase, floors, gang_stats, tables, write_json
from noop_extender import NoopExtender

CONFIGS = ("ceiling", "noop-extender", "gang-extender", "in-tree")
STALL_SECONDS = 60.0
PSEUDO_FLAGS = ("prioritize", "bind-only", "quorum-gate", "flask")


@dataclass(frozen=True)
class Release:
    """A ``--release``: kube-scheduler's version, the gang API (``workloads.e2e_plan``), the API server's gates
    and runtime config (None: hack/controlplane.py's, which are 1.35's) and kube-scheduler's for ``in-tree``."""

    version: str
    api: str
    gates: Mapping[str, bool]
    runtime_config: tuple[str, ...] | None
    in_tree: Mapping[str, bool]


RELEASES = {
    "1.35": Release("1.35.4", "workload", {}, None, {"GangScheduling": True}),
    "1.37": Release("1.37.2", "podgroup", {"GenericWorkload": True}, ("scheduling.k8s.io/v1beta1=true",),
                    {"GenericWorkload": True}),
}
QUORUM_GATE_PROBE = "quorum-gate-probe"
PACED_RATE = 96.0  # pods/s: half of the do-nothing extender's arrival throughput here (docs/performance.md)


# ---------------------------------------------------------------------------------------- phases
def run_phase(cp: ControlPlane, plan: wl.Plan, watch: wl.BindWatch, ext: Any, *, name: str, timeout: float,
              hold: float | None = None, start: Any = None, profile: Path | None = None,
              pace: float | None = None, measured: Any = None, perf: Path | None = None) -> Phase:
    """One phase; ``measured``: the extender process whose worker's threads are metered (default ``ext``)."""
    with py_spy(ext, profile, name), perf_record(measured or ext, perf, name):
        return _run_phase(cp, plan, watch, ext, name=name, timeout=timeout, hold=hold, start=start, pace=pace,
                          measured=measured or ext)



def _run_phase(cp: ControlPlane, plan: wl.Plan, watch: wl.BindWatch, ext: Any, *, name: str, timeout: float,
               hold: float | None = None, start: Any = None, args_stall: float = STALL_SECONDS,
               pace: float | None = None, measured: Any = None) -> Phase:
    """Create the plan and wait until it is bound (or ``timeout``). With ``start`` (a callable that starts
    kube-scheduler), the pods are created first and the clock starts when the scheduler is ready; with
    ``pace`` (pods/s), gangs are created at that fixed rate while the scheduler runs."""
    keys = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in plan.pods]
    phase = Phase(pods=len(keys), gangs=len(plan.gangs))
    if start is not None:
        created = wl.create_objects(cp, plan)
        phase.create_seconds = max(created.values()) - min(created.values())
        if ext is not None:  # the extender must have listed every pod before the first request
            while wl.metric(wl.extender_metrics(ext), "gang_extender_mirror_pods") < len(keys):
                time.sleep(0.1)
        wl.log(f"[{name}] created {len(keys)} pods in {phase.create_seconds:.1f}s with no scheduler running")
    meter = CpuMeter(cp)
    ext0 = wl.extender_metrics(ext) if ext is not None else {}
    worker = extender_worker_pid(measured) if measured is not None else None
    threads0 = worker_threads_cpu(worker)
    if start is not None:
        first = time.monotonic()  # scheduler start-up (~0.5 s, the same for every configuration) counts
        start()
        meter = CpuMeter(cp)  # the scheduler's process exists only now
    sched0 = prom(cp.metrics("kube-scheduler"))
    stop = threading.Event()
    completer = None
    if hold is not None:  # contention: a gang bound whole runs for `hold` seconds, then its pods go away
        def complete() -> None:
            finished: set[str] = set()
            while not stop.is_set():
                for gang in plan.gangs:
                    if gang.key in finished:
                        continue
                    binds = [watch.bound.get(m) for m in gang.members]
                    if all(binds) and time.monotonic() - max(b for b in binds if b) >= hold:
                        finished.add(gang.key)
                        wl.delete_pods(cp, gang.members)
                stop.wait(0.1)

        completer = threading.Thread(target=complete, daemon=True)
        completer.start()
    if start is None and pace is not None:
        size = max(len(keys) / max(len(plan.gangs), 1), 1.0)
        phase.paced_rate = pace
        created, phase.create_lag = wl.create_paced(cp, plan, pace / size)
        first = min(created.values())
        phase.create_seconds = max(created.values()) - first
        wl.log(f"[{name}] created {len(keys)} pods in {phase.create_seconds:.1f}s at {pace:.0f} pods/s "
               f"(at most {phase.create_lag:.2f}s behind schedule)")
    elif start is None:
        created = wl.create_objects(cp, plan)
        first = min(created.values())
        phase.create_seconds = max(created.values()) - first
        wl.log(f"[{name}] created {len(keys)} pods in {phase.create_seconds:.1f}s")
    last_report = time.monotonic()
    progress_at, progress_count = last_report, 0

    def done() -> bool:
        if hold is None:
            return watch.bound_count(keys) == len(keys)
        return all(all(m in watch.bound for m in g.members) for g in plan.gangs)

    while not watch.wait(done, timeout=2.0):
        now = time.monotonic()
        if now - first > timeout:
            wl.log(f"[{name}] cap of {timeout:.0f}s reached")
            break
        count = watch.bound_count(keys)
        if count != progress_count:
            progress_at, progress_count = now, count
        elif hold is None and now - progress_at > args_stall:
            wl.log(f"[{name}] no pod bound for {args_stall:.0f}s: stalled, giving up")
            break
        if now - last_report >= 5:
            last_report = now
            bound = watch.bound_count(keys)
            wl.log(f"[{name}] {now - first:5.1f}s: {bound}/{len(keys)} pods bound ({bound / (now - first):.0f}/s)")
    end = time.monotonic()
    stop.set()
    if completer is not None:
        completer.join(5)
    bind_times = sorted(watch.bound[k] for k in keys if k in watch.bound)
    phase.bound = len(bind_times)
    phase.seconds = (bind_times[-1] - first) if phase.bound == len(keys) else end - first
    phase.timeline = [round(t - first, 4) for t in bind_times]
    gang_stats(phase, plan, created if start is None else dict.fromkeys(keys, first), watch, end=end)
    phase.cpu = meter.used()
    sched1 = prom(cp.metrics("kube-scheduler"))
    phase.scheduler_attempt_ms = scheduler_attempt_ms(sched0, sched1)
    phase.scheduler = {k: round(v, 3) for k, v in scheduler_counts(sched0, sched1).items()}
    phase.pinned = pinning.allowed_cpus(meter.pids) if os.sched_getaffinity(0) != set(range(os.cpu_count() or 1)) \
        else {}
    if ext is not None:
        ext1 = wl.extender_metrics(ext)
        phase.extender_ms = extender_ms(ext0, ext1)
        phase.extender_writes = extender_writes(ext0, ext1)
        phase.watch_events = watch_events(ext0, ext1)
        phase.timeouts = wl.metric(ext1, "gang_extender_gangs_timeouts_total") - wl.metric(
            ext0, "gang_extender_gangs_timeouts_total")
        if "--record-file" in getattr(ext, "args", ()):  # where each gang's latency went, from the recording
            recording = Path(ext.args[ext.args.index("--record-file") + 1])
            traces = gang_trace.read_recording(recording, time.time() - time.monotonic(), keys)
            members = [g.members for g in plan.gangs]
            phase.trace = gang_trace.summarize(members, created if start is None else dict.fromkeys(keys, first),
                                               watch.bound, traces, wl.percentile)
    threads1 = worker_threads_cpu(worker)
    phase.extender_threads_cpu = threads_cpu_used(threads0, threads1)
    phase.extender_thread_runs = thread_runs(threads0, threads1)
    phase.extender_user_system = user_system(threads0, threads1)
    if threads0 and threads1:  # threads the worker started during the phase, and how many it has at its end
        phase.extender_threads = {"started": len(threads1["tids"].keys() - threads0["tids"].keys()),
                                  "alive": len(threads1["tids"])}
    wl.log(f"[{name}] {phase.bound}/{phase.pods} bound in {phase.seconds:.1f}s ({phase.pods_per_second:.0f} pods/s); "
           f"{phase.completed_gangs}/{phase.gangs} gangs whole; {phase.partial_gangs} partial; CPU s {phase.cpu}"
           + (f"; extender worker CPU s {phase.extender_threads_cpu}" if phase.extender_threads_cpu else "")
           + (f"; watch events {phase.watch_events}" if phase.watch_events else "")
           + (f"; extender worker threads {phase.extender_threads}" if phase.extender_threads else "")
           + (f"; extender threads put on a CPU {phase.extender_thread_runs}" if phase.extender_thread_runs else "")
           + (f"; extender worker CPU s by mode {phase.extender_user_system}" if phase.extender_user_system else "")
           + (f"; threads' allowed CPUs {phase.pinned}" if phase.pinned else ""))
    return phase


def settle(ext: Any, timeout: float = 90.0) -> None:
    """Wait until the extender holds no bind and no admitted gang (the backlog's leftovers expire)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        values = wl.extender_metrics(ext)
        if not wl.metric(values, "gang_extender_held_binds") and not wl.metric(values, "gang_extender_admitted_gangs"):
            return
        time.sleep(1.0)
    wl.log(f"[extender] still holding binds after {timeout:.0f}s; the next phase's counters include them")



def run_config(config: str, bin_dir: Path, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """One configuration on a fresh control plane. ``gang-extender:--flag=value,...`` adds serve flags, and
    pseudo-flags change kube-scheduler's configuration (``scheduler_config_for``)."""
    config, _, flags = config.partition(":")
    words = flags.replace("=", " ").replace(",", " ").split()
    extender_args = [*args.extender_args.split(), *(w for w in words if w not in PSEUDO_FLAGS)]
    label = config + (f" ({' '.join(extender_args)})" if extender_args and config == "gang-extender" else "")
    label += " + prioritize" if "prioritize" in words else ""
    label += ", bind only" if "bind-only" in words else ""
    label += " + quorum gate" if "quorum-gate" in words else ""
    label += " (Flask, stock gthread)" if "flask" in words else ""
    label += ", pinned" if args.pin else ""
    release = RELEASES[args.release]
    label += f" (v{release.version})" if args.release != "1.35" else ""
    result: dict[str, Any] = {"config": label, "kind": config}
    slug = "".join(c if c.isalnum() or c == "-" else "_" for c in label)
    base, n = slug, 1
    while (workdir / slug).exists():  # the same configuration twice in a run: a fresh directory each time
        n += 1
        slug = f"{base}-{n}"
    with release_control_plane(args.release, config, bin_dir, workdir / slug) as cp:
        wl.add_pools(cp, args.general_nodes)
        if "quorum-gate" in words:
            install_quorum_gate(cp)
        ext = noop = None
        try:
            with pinning.spawning_on(pinning.EXTENDER_CPU if args.pin else None):
                if config == "gang-extender":
                    ext = wl.extender_process(cp.kubeconfig, workdir / slug, args=extender_args, record=args.record)
                    ext.start()
                elif config == "noop-extender":
                    noop = NoopExtender(cp.kubeconfig, workdir / slug, stack="flask" if "flask" in words else "direct")
            scheduler = scheduler_config_for(ext or noop, words)
            run_phases(cp, config, ext, scheduler, args, result, slug, measured=ext or noop)
            text = cp.log_path("kube-scheduler").read_text(errors="replace")
            result["scheduler_log"] = {
                "permit_timeouts": text.count("rejected due to timeout"),
                "extender_error_lines": sum(1 for line in text.splitlines()
                                            if "extender" in line.lower() and "error" in line.lower()),
            }
        except Exception:
            wl.log(f"[{config}] failed; scheduler log tail:\n{tail(cp.log_path('kube-scheduler'))}")
            raise
        finally:
            if ext is not None:
                ext.stop()
            if noop is not None:
                noop.stop()
    return result


def release_control_plane(release: str, config: str, bin_dir: Path, workdir: Path) -> ControlPlane:
    """A fresh control plane of ``release`` (:data:`RELEASES`) for ``config``: the gang API served, and the
    in-tree gang plugin on in kube-scheduler only for ``in-tree``."""
    r = RELEASES[release]
    if r.runtime_config is None:  # hack/controlplane.py's defaults (1.35's): GenericWorkload on, GangScheduling off
        gates = r.in_tree if config == "in-tree" else {}
        wl.log(f"[{config}] fresh control plane v{r.version}; gates {gates or 'default'}")
        return ControlPlane(bin_dir, workdir, feature_gates=gates, log=wl.log, keep=True)
    scheduler_gates = r.in_tree if config == "in-tree" else {}
    wl.log(f"[{config}] fresh control plane v{r.version}; gates {dict(r.gates)}, "
           f"kube-scheduler's {dict(scheduler_gates)}")
    return ControlPlane(bin_dir, workdir, feature_gates=r.gates, default_feature_gates=False,
                        runtime_config=r.runtime_config, scheduler_feature_gates=scheduler_gates, log=wl.log, keep=True)


def install_quorum_gate(cp: ControlPlane) -> None:
    """The chart's quorum gate for kube-scheduler's default profile, in force before any pod is created."""
    import helmchart
    from support import install_quorum_gate as install

    from extender.model.cluster import QUORUM_GATE

    cp.create_namespace(QUORUM_GATE_PROBE)
    install(cp, helmchart.quorum_gate_objects(helmchart.find_helm(), "default-scheduler"),
            probe_namespace=QUORUM_GATE_PROBE, gate=QUORUM_GATE)
    wl.log("[bench-e2e] the quorum gate is in force")


def scheduler_config_for(extender: Any, words: Sequence[str]) -> dict[str, Any]:
    """kube-scheduler's configuration: the shipped extender entry for ``extender`` (prioritize added with the
    pseudo-flag ``prioritize``; filter removed with ``bind-only``, for ``noop-extender``: what the bind round
    trip alone costs; bind removed with ``--bind-mode=filter-gated``), the default one without an extender."""
    if extender is None:
        return dict(DEFAULT_SCHEDULER_CONFIG)
    from support import scheduler_config

    scheduler = scheduler_config(extender.url, prioritize="prioritize" in words)
    for entry in scheduler.get("extenders", []):
        if "bind-only" in words:  # kube-scheduler calls the extender only to bind
            entry.pop("filterVerb", None)
        if "filter-gated" in words:  # --bind-mode=filter-gated: kube-scheduler's own binder binds
            entry.pop("bindVerb", None)
    return scheduler


def scheduler_metrics_served(cp: ControlPlane, timeout: float = 30.0) -> None:
    """Wait until a kube-scheduler just started serves /metrics: for its first moments it authorizes nobody."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            cp.metrics("kube-scheduler")
            return
        except ApiError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def clear(cp: ControlPlane, watch: wl.BindWatch, ext: Any, plan: wl.Plan) -> None:
    """Delete a phase's pods and wait until they are gone and the extender holds nothing of theirs, so the
    next phase starts from the same empty cluster in every configuration."""
    keys = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in plan.pods]
    for ns in plan.namespaces:
        wl.delete_namespace_pods(cp, ns)
    watch.wait(lambda: all(k in watch.deleted for k in keys), timeout=120)
    if ext is not None:  # held binds of the gangs must expire first, or their timeouts would be counted next
        settle(ext)


def run_phases(cp: ControlPlane, config: str, ext: Any, scheduler: dict[str, Any], args: argparse.Namespace,
               result: dict[str, Any], slug: str, measured: Any = None) -> None:
    gangs = config not in ("ceiling", "noop-extender")  # both run the same pods without gangs
    api = RELEASES[args.release].api
    backlog, _ = wl.e2e_plan(gangs=gangs, gang_count=args.gangs, size=args.size, contention_gangs=0,
                             namespace="backlog", api=api)
    arrival, contention = wl.e2e_plan(gangs=gangs, gang_count=args.gangs, size=args.size,
                                      contention_gangs=args.contention_gangs, api=api)
    paced, _ = wl.e2e_plan(gangs=gangs, gang_count=args.gangs, size=args.size, contention_gangs=0, namespace="paced",
                           api=api)
    watch = wl.BindWatch(cp)
    try:
        if "backlog" in args.phases:
            result["backlog"] = run_phase(cp, backlog, watch, ext, measured=measured, name=f"{slug} backlog",
                                          timeout=args.timeout,
                                          start=lambda: cp.start_scheduler(scheduler), profile=args.py_spy,
                                          perf=args.perf)
            clear(cp, watch, ext, backlog)
        else:
            cp.start_scheduler(scheduler)
            scheduler_metrics_served(cp)
        if config == "in-tree":  # the gate turning the in-tree gang plugin on (1.37: GenericWorkload)
            gate = next(iter(RELEASES[args.release].in_tree))
            enabled = [line for line in cp.metrics("kube-scheduler").splitlines()
                       if line.startswith(f'kubernetes_feature_enabled{{name="{gate}"')]
            wl.log(f"[{config}] {enabled}")
        if "arrival" in args.phases:
            result["arrival"] = run_phase(cp, arrival, watch, ext, measured=measured, name=f"{slug} arrival",
                                          timeout=args.timeout, profile=args.py_spy, perf=args.perf)
        if "paced" in args.phases:
            if "arrival" in args.phases:
                clear(cp, watch, ext, arrival)
            result["paced"] = run_phase(cp, paced, watch, ext, measured=measured, name=f"{slug} paced",
                                        timeout=args.timeout,
                                        profile=args.py_spy, pace=args.paced_rate, perf=args.perf)
        if "contention" in args.phases:
            cap = args.contention_cap if gangs else min(args.contention_cap, 30.0)  # groups never complete
            result["contention"] = run_phase(cp, contention, watch, ext, measured=measured, name=f"{slug} contention",
                                             timeout=cap, hold=args.hold, perf=args.perf)
    finally:
        watch.close()


def extender_hot_path(workdir: Path) -> str:
    """Which hot path ``gang-extender`` runs here, started as the runs start it (``make bench-e2e-compiled``
    puts build/compiled first on PYTHONPATH): the ``hot path: ...`` of its ``--version`` line."""
    import subprocess

    from support import GANG_EXTENDER

    line = subprocess.run([GANG_EXTENDER, "--version"], capture_output=True, text=True, cwd=workdir,
                          check=False).stdout.strip()
    return line[line.find("hot path"):-1] if "hot path" in line else f"hot path: unknown ({line!r})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default=";".join(CONFIGS),
                        help=f"configurations, ';'-separated; 'gang-extender:--threads=2048' adds serve flags "
                             f"[{';'.join(CONFIGS)}]")
    parser.add_argument("--release", choices=sorted(RELEASES), default="1.35",
                        help="kube-scheduler release and gang API: 1.35 (v1.35.4, Workloads) or 1.37 (v1.37.2, "
                             "PodGroups; allows gang-extender:quorum-gate) [1.35]")
    parser.add_argument("--general-nodes", type=int, default=984, help="general nodes (+16 contention) [984]")
    parser.add_argument("--gangs", type=int, default=250, help="gangs in the backlog and arrival phases [250]")
    parser.add_argument("--size", type=int, default=8, help="members per gang in those phases [8]")
    parser.add_argument("--contention-gangs", type=int, default=6, help="gangs of 8 on the 16-node pool [6]")
    parser.add_argument("--hold", type=float, default=2.0, help="seconds a whole contention gang runs [2]")
    parser.add_argument("--contention-cap", type=float, default=120.0,
                        help="give up on the contention phase after this many seconds [120; ceiling: 30]")
    parser.add_argument("--timeout", type=float, default=180.0,
                        help="cap of the backlog and arrival phases [180]; a phase also ends after 60 s without a bind")
    parser.add_argument("--extender-args", default="", help="extra gang-extender serve flags, e.g. '--threads 1024'")
    parser.add_argument("--phases", default="backlog,arrival,paced,contention",
                        help="which phases [backlog,arrival,paced,contention]")
    parser.add_argument("--paced-rate", type=float, default=PACED_RATE,
                        help=f"pods/s at which the paced phase creates gangs, the same for every configuration "
                             f"[{PACED_RATE:.0f}: half of the do-nothing extender's arrival throughput here]")
    parser.add_argument("--pin", action="store_true",
                        help="control plane (and this driver) on CPU 0, the extender on CPU 1 (needs 2 CPUs)")
    parser.add_argument("--record", action="store_true",
                        help="gang-extender records its requests; adds where each gang's latency went (costs CPU)")
    parser.add_argument("--write-ms", type=float, default=WRITE_MS,
                        help=f"CPU ms per API write, to leave gang-extender's writes out of its CPU floor [{WRITE_MS}]")
    parser.add_argument("--py-spy", type=Path, metavar="DIR",
                        help="profile the extender's worker with py-spy (pip install py-spy) into DIR")
    parser.add_argument("--perf", type=Path, metavar="DIR",
                        help="record each phase of the extender's worker (do-nothing one too) with Linux perf into DIR "
                             "(user and kernel code by symbol: the interpreter, the compiled modules, TLS, the kernel)")
    parser.add_argument("--json", type=Path, help="write every number here (for bench/plot.py)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (component logs)")
    args = parser.parse_args(argv)

    # SIGTERM unwinds like Ctrl-C, so the extender and the control plane are stopped on the way out
    signal.signal(signal.SIGTERM, lambda signum, frame: (_ for _ in ()).throw(KeyboardInterrupt()))
    if args.pin:
        if not pinning.available():
            parser.error("--pin needs at least 2 CPUs and sched_setaffinity")
        pinning.pin_driver()  # before any thread or child: all of them inherit CPU 0
    if args.release == "1.35" and "quorum-gate" in args.configs:
        parser.error("quorum-gate needs MutatingAdmissionPolicy v1: --release 1.37")
    bin_dir = find_bin_dir({**os.environ, "K8S_VERSION": RELEASES[args.release].version})
    workdir = Path(tempfile.mkdtemp(prefix="gang-bench-e2e-"))
    hot_path = extender_hot_path(workdir)
    wl.log(f"[bench-e2e] {os.cpu_count()} cpu; binaries {bin_dir}; work dir {workdir}; {hot_path}; load average "
           f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    results = []
    started = time.monotonic()
    try:
        for config in args.configs.split(";"):
            results.append(run_config(config.strip(), bin_dir, args, workdir))
    finally:
        if args.json and results:
            write_json(args.json, vars(args) | {"hot_path": hot_path}, results)
            wl.log(f"[bench-e2e] wrote {args.json}")
        if not args.keep:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
        else:
            wl.log(f"[bench-e2e] kept {workdir}")
    print(f"\n## End-to-end scheduling (kube-scheduler v{RELEASES[args.release].version}; {os.cpu_count()} cpu; "
          f"{args.general_nodes + wl.CONTENTION_NODES:,} nodes; "
          f"{args.gangs} gangs of {args.size}; paced at {args.paced_rate:.0f} pods/s"
          f"{'; control plane on CPU 0, extender on CPU 1' if args.pin else ''}; {hot_path}; "
          f"run took {time.monotonic() - started:.0f}s)\n")
    print(tables(results))
    print()
    for line in floors(results, write_ms=args.write_ms):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
