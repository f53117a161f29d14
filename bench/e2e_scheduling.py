"""End-to-end scheduling benchmark: kube-scheduler v1.35.4 on 1,000 fake nodes, three ways, one run.

1. ``ceiling``: kube-scheduler with no extender, the same pods without ``workloadRef`` (no gangs);
2. ``gang-extender``: kube-scheduler with gang-extender (``manifests/scheduler-config.yaml``);
3. ``in-tree``: kube-scheduler with the in-tree GangScheduling plugin (gates ``GenericWorkload`` and
   ``GangScheduling`` on), no extender.

Each configuration gets a fresh control plane (same binaries, same 1,000 nodes: 984 general nodes of
8 cpu and a 16-node contention pool of 4 cpu) and runs three phases, measured from one pod watch:

- **backlog**: ``--gangs`` gangs of ``--size`` identical members (500m / 1Gi; 2,000 pods) exist before
  kube-scheduler starts (and the extender has listed them); pods/s = pods / (scheduler started -> last
  pod bound): the scheduler's throughput, not the client's creation rate. The pods are then deleted;
- **arrival**: the same gangs created gang by gang, as fast as 16 client threads can, while the
  scheduler runs; gang latency = last member created -> last member bound;
- **contention**: ``--contention-gangs`` gangs of 8 members of 3 cpu on the 16-node pool, which
  holds two at a time, created interleaved (member 0 of every gang, then member 1, ...). A gang
  "runs" for ``--hold`` seconds once all its members are bound, then its pods are deleted (the job
  finished), freeing room for the next. Every gang should complete, without timeouts; the phase
  ends when all have completed or after ``--contention-cap`` seconds.

A phase also ends after 60 s without any new bind (a stall).

A gang is *partial* when some but not all of its members were bound for more than 2 s. Gang timeouts:
gang-extender's ``gang_extender_gangs_timeouts_total``; the in-tree plugin's Permit timeout is 5
minutes, so within the cap it shows as gangs that never complete.

Also recorded per phase: CPU seconds used by each process (kube-apiserver, etcd, kube-scheduler,
gang-extender, this driver), kube-scheduler's mean scheduling-algorithm duration and gang-extender's
mean latency per verb, so a missed floor can be traced to where the time went.

Run: ``make bench-e2e`` (= ``.venv/bin/python bench/e2e_scheduling.py``); ``--json FILE`` keeps every
number for ``bench/plot.py``. Results: docs/performance.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workloads as wl
from controlplane import DEFAULT_SCHEDULER_CONFIG, ControlPlane, find_bin_dir, tail

CONFIGS = ("ceiling", "gang-extender", "in-tree")
PARTIAL_GRACE = 2.0
FLOOR_RATIO = 0.8


@dataclass
class Phase:
    pods: int = 0
    gangs: int = 0
    seconds: float = float("nan")          # first pod created -> last pod bound (or the cap)
    create_seconds: float = float("nan")   # first -> last pod created
    bound: int = 0
    completed_gangs: int = 0
    gang_latency: list[float] = field(default_factory=list)  # last member created -> whole gang bound
    partial_gangs: int = 0
    max_partial_seconds: float = 0.0
    timeouts: float = float("nan")
    cpu: dict[str, float] = field(default_factory=dict)
    scheduler_attempt_ms: float = float("nan")  # mean scheduling algorithm duration per attempt
    extender_ms: dict[str, float] = field(default_factory=dict)
    extender_threads_cpu: dict[str, float] = field(default_factory=dict)  # the worker's CPU s: main loop / rest
    timeline: list[float] = field(default_factory=list)  # bind times relative to the first creation

    @property
    def pods_per_second(self) -> float:
        return self.bound / self.seconds if self.seconds == self.seconds and self.seconds > 0 else float("nan")


# ---------------------------------------------------------------------------------------- CPU use
def component_pids(cp: ControlPlane) -> dict[str, list[int]]:
    """Processes whose command line mentions the control plane's work directory, by program name."""
    pids: dict[str, list[int]] = {}
    marker = str(cp.workdir).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmdline = (entry / "cmdline").read_bytes()
            if marker in cmdline:
                argv = cmdline.split(b"\0")
                name = Path(argv[0].decode()).name
                if name.startswith("python"):
                    name = "gang-extender" if b"gang-extender" in cmdline else (
                        "noop-extender" if b"noop_extender" in cmdline else name)
                pids.setdefault(name, []).append(int(entry.name))
    return pids


def cpu_seconds(pids: Sequence[int]) -> float:
    return sum(cpu_seconds_of(f"/proc/{pid}/stat") for pid in pids)


def worker_threads_cpu(worker: int | None) -> dict[str, float]:
    """CPU seconds of gunicorn's main loop (the worker's main thread: accept, poll, dispatch) and of the
    rest of the worker (request handlers, watches, Event writer, sweeper), from /proc/<pid>/task/<pid>
    and /proc/<pid>/stat (the whole thread group)."""
    if worker is None:
        return {}
    main = cpu_seconds_of(f"/proc/{worker}/task/{worker}/stat")
    return {"main loop": main, "rest of the worker": max(cpu_seconds_of(f"/proc/{worker}/stat") - main, 0.0)}


def cpu_seconds_of(stat_path: str) -> float:
    with contextlib.suppress(OSError, IndexError, ValueError):
        fields = Path(stat_path).read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


class CpuMeter:
    def __init__(self, cp: ControlPlane) -> None:
        self.pids = component_pids(cp)
        self.pids["driver"] = [os.getpid()]
        self.start = {name: cpu_seconds(p) for name, p in self.pids.items()}

    def used(self) -> dict[str, float]:
        return {name: round(cpu_seconds(p) - self.start[name], 2) for name, p in self.pids.items()}


# ---------------------------------------------------------------------------------------- metrics
def prom(text: str) -> dict[str, float]:
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                values[name] = float(value)
    return values


def scheduler_attempt_ms(before: dict[str, float], after: dict[str, float]) -> float:
    """Mean duration of kube-scheduler's scheduling algorithm (filter and score, extender calls included;
    not binding) between two scrapes."""
    total = count = 0.0
    for key, value in after.items():
        if key.startswith("scheduler_scheduling_algorithm_duration_seconds_sum"):
            total += value - before.get(key, 0.0)
        elif key.startswith("scheduler_scheduling_algorithm_duration_seconds_count"):
            count += value - before.get(key, 0.0)
    return total / count * 1000 if count else float("nan")


def extender_ms(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    out = {}
    for verb in ("filter", "prioritize", "bind"):
        s = f'gang_extender_request_seconds_sum{{verb="{verb}"}}'
        c = f'gang_extender_request_seconds_count{{verb="{verb}"}}'
        n = after.get(c, 0.0) - before.get(c, 0.0)
        if n:
            out[verb] = round((after.get(s, 0.0) - before.get(s, 0.0)) / n * 1000, 3)
            out[f"{verb}_calls"] = n
    return out


# ---------------------------------------------------------------------------------------- phases
def gang_stats(phase: Phase, plan: wl.Plan, created: dict[str, float], watch: wl.BindWatch, *, end: float) -> None:
    for gang in plan.gangs:
        binds = [watch.bound[m] for m in gang.members if m in watch.bound]
        if len(binds) == len(gang.members):
            phase.completed_gangs += 1
            phase.gang_latency.append(max(binds) - max(created[m] for m in gang.members))
            span = max(binds) - min(binds)
        elif binds:
            span = end - min(binds)
        else:
            span = 0.0
        if span > PARTIAL_GRACE:
            phase.partial_gangs += 1
        phase.max_partial_seconds = max(phase.max_partial_seconds, span)


def extender_worker_pid(ext: Any) -> int | None:
    """gunicorn's worker (the master's only child) of an extender started by ``wl.extender_process``."""
    with contextlib.suppress(OSError, IndexError, AttributeError):
        pid = ext.proc.pid
        return int(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()[0])
    return None


@contextlib.contextmanager
def py_spy(ext: Any, out: Path | None, name: str) -> Any:
    """Sample the extender's worker with py-spy (collapsed stacks) while the block runs, if asked to."""
    pid = extender_worker_pid(ext) if ext is not None and out is not None else None
    if pid is None or out is None:
        yield
        return
    import shutil
    import subprocess

    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name.replace(' ', '-')}.txt"
    # --gil: only samples where a thread holds the GIL, i.e. where the worker's CPU time goes
    proc = subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", "250", "--format", "raw", "--threads",
                             "--gil", "--output", str(path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
        wl.log(f"[{name}] py-spy profile of the extender worker: {path}\n{spy_summary(path)}")


SPY_BUCKETS = (  # (label, a frame or thread name that puts a sample in it); first match wins
    ("gang admission (GangLedger.admission)", "GangLedger.admission"),
    ("filter handler, other", "filter_ (extender/http/routes.py"),
    ("prioritize handler", "prioritize (extender/http/routes.py"),
    ("bind handler (held binds: waiting)", "bind (extender/http/routes.py"),
    ("other Flask / WSGI", "Flask.wsgi_app"),
    ("gunicorn main loop (accept, poll, dispatch)", "thread (MainThread)"),
    ("wake-up annotations (PodWaker)", "PodWaker._write"),
    ("Events (EventRecorder)", "EventRecorder._write"),
    ("binding API calls of released quorums", "Engine._bind_one"),
    ("pod watch", "watch-pods"),
    ("other watches", "watch-"),
)


def spy_summary(path: Path) -> str:
    """Shares of py-spy's collapsed-stack samples by where they were (the table in docs/performance.md)."""
    import re

    counts: dict[str, int] = {}
    total = 0
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            if not n.isdigit():
                continue
            stack = re.sub(r"^thread \(\d+\): ([^;]*)", r"thread (\1)", stack)
            total += int(n)
            label = next((label for label, marker in SPY_BUCKETS if marker in stack), "other")
            counts[label] = counts.get(label, 0) + int(n)
    rows = [f"| {label} | {n / total * 100:.0f} % |" for label, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    return "\n".join([f"| where ({total} samples) | share |", "|---|---:|", *rows]) if total else "(no samples)"


def run_phase(cp: ControlPlane, plan: wl.Plan, watch: wl.BindWatch, ext: Any, *, name: str, timeout: float,
              hold: float | None = None, start: Any = None, profile: Path | None = None) -> Phase:
    with py_spy(ext, profile, name):
        return _run_phase(cp, plan, watch, ext, name=name, timeout=timeout, hold=hold, start=start)


STALL_SECONDS = 60.0


def _run_phase(cp: ControlPlane, plan: wl.Plan, watch: wl.BindWatch, ext: Any, *, name: str, timeout: float,
               hold: float | None = None, start: Any = None, args_stall: float = STALL_SECONDS) -> Phase:
    """Create the plan and wait until it is bound (or ``timeout``). With ``start`` (a callable that starts
    kube-scheduler), the pods are created first and the clock starts when the scheduler is ready."""
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
    worker = extender_worker_pid(ext) if ext is not None else None
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
    if start is None:
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
    phase.scheduler_attempt_ms = scheduler_attempt_ms(sched0, prom(cp.metrics("kube-scheduler")))
    if ext is not None:
        ext1 = wl.extender_metrics(ext)
        phase.extender_ms = extender_ms(ext0, ext1)
        phase.timeouts = wl.metric(ext1, "gang_extender_gangs_timeouts_total") - wl.metric(
            ext0, "gang_extender_gangs_timeouts_total")
        threads1 = worker_threads_cpu(worker)
        phase.extender_threads_cpu = {k: round(threads1[k] - threads0.get(k, 0.0), 2) for k in threads1}
    wl.log(f"[{name}] {phase.bound}/{phase.pods} bound in {phase.seconds:.1f}s ({phase.pods_per_second:.0f} pods/s); "
           f"{phase.completed_gangs}/{phase.gangs} gangs whole; {phase.partial_gangs} partial; CPU s {phase.cpu}"
           + (f"; extender worker CPU s {phase.extender_threads_cpu}" if phase.extender_threads_cpu else ""))
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


PSEUDO_FLAGS = ("prioritize", "bind-only")


def run_config(config: str, bin_dir: Path, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """One configuration on a fresh control plane. ``gang-extender:--flag=value,...`` adds serve flags;
    the pseudo-flag ``prioritize`` adds the extender's prioritize verb to kube-scheduler's configuration
    (the shipped one has only filter and bind), ``bind-only`` removes its filter verb (for
    ``noop-extender``: what the bind round trip alone costs; gang-extender is not meant to run so);
    ``--bind-mode=filter-gated`` also removes its bind verb (manifests/scheduler-config-filter-gated.yaml)."""
    config, _, flags = config.partition(":")
    words = flags.replace("=", " ").replace(",", " ").split()
    prioritize = "prioritize" in words
    bind_only = "bind-only" in words
    extender_args = [*args.extender_args.split(), *(w for w in words if w not in PSEUDO_FLAGS)]
    label = config + (f" ({' '.join(extender_args)})" if extender_args and config == "gang-extender" else "")
    label += " + prioritize" if prioritize else ""
    label += ", bind only" if bind_only else ""
    gangs = config not in ("ceiling", "noop-extender")  # both run the same pods without gangs
    gates = {"GangScheduling": True} if config == "in-tree" else {}
    backlog, _ = wl.e2e_plan(gangs=gangs, gang_count=args.gangs, size=args.size, contention_gangs=0,
                             namespace="backlog")
    arrival, contention = wl.e2e_plan(gangs=gangs, gang_count=args.gangs, size=args.size,
                                      contention_gangs=args.contention_gangs)
    wl.log(f"[{config}] fresh control plane; gates {gates or 'default'}")
    result: dict[str, Any] = {"config": label, "kind": config}
    slug = "".join(c if c.isalnum() or c == "-" else "_" for c in label)
    with ControlPlane(bin_dir, workdir / slug, feature_gates=gates, log=wl.log, keep=True) as cp:
        wl.add_pools(cp, args.general_nodes)
        ext = None
        noop = None
        try:
            if config == "gang-extender":
                ext = wl.extender_process(cp.kubeconfig, workdir / slug, args=extender_args)
                ext.start()
                from support import scheduler_config

                scheduler = scheduler_config(ext.url, prioritize=prioritize)
            elif config == "noop-extender":
                from support import scheduler_config

                noop = NoopExtender(cp.kubeconfig, workdir / slug)
                scheduler = scheduler_config(noop.url, prioritize=prioritize)
            else:
                scheduler = dict(DEFAULT_SCHEDULER_CONFIG)
            if bind_only:  # kube-scheduler calls the extender only to bind
                for extender in scheduler.get("extenders", []):
                    extender.pop("filterVerb", None)
            if "filter-gated" in extender_args:  # --bind-mode filter-gated: kube-scheduler's own binder binds
                for extender in scheduler.get("extenders", []):
                    extender.pop("bindVerb", None)
            watch = wl.BindWatch(cp)
            backlog_keys = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in backlog.pods]
            try:
                if "backlog" in args.phases:
                    result["backlog"] = run_phase(cp, backlog, watch, ext, name=f"{slug} backlog", timeout=args.timeout,
                                                  start=lambda: cp.start_scheduler(scheduler), profile=args.py_spy)
                    # The arrival phase starts from the same state everywhere: no backlog pods (bound or stuck).
                    wl.delete_namespace_pods(cp, "backlog")
                    watch.wait(lambda: all(k in watch.deleted for k in backlog_keys), timeout=120)
                    if ext is not None:  # held binds of backlog gangs must expire first, or their timeouts
                        settle(ext)      # would be counted in the arrival phase
                else:
                    cp.start_scheduler(scheduler)
                if config == "in-tree":
                    enabled = [line for line in cp.metrics("kube-scheduler").splitlines()
                               if line.startswith('kubernetes_feature_enabled{name="GangScheduling"')]
                    wl.log(f"[{config}] {enabled}")
                if "arrival" in args.phases:
                    result["arrival"] = run_phase(cp, arrival, watch, ext, name=f"{slug} arrival",
                                                  timeout=args.timeout, profile=args.py_spy)
                if "contention" in args.phases:
                    cap = args.contention_cap if gangs else min(args.contention_cap, 30.0)  # groups never complete
                    result["contention"] = run_phase(cp, contention, watch, ext, name=f"{slug} contention",
                                                     timeout=cap, hold=args.hold)
            finally:
                watch.close()
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


class NoopExtender:
    """``bench/noop_extender.py`` as a child process (its own process group), ready when constructed."""

    def __init__(self, kubeconfig: str, workdir: Path) -> None:
        import subprocess

        from support import free_ports

        port = free_ports(1)[0]
        self.url = f"http://127.0.0.1:{port}"
        with open(workdir / "noop-extender.log", "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("noop_extender.py")), "--kubeconfig", kubeconfig,
                 "--port", str(port)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        while not self._healthy():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"noop extender did not start: {tail(workdir / 'noop-extender.log')}")
            time.sleep(0.1)

    def _healthy(self) -> bool:
        import urllib.request

        with contextlib.suppress(OSError), urllib.request.urlopen(self.url + "/healthz", timeout=2) as reply:
            return bool(reply.status == 200)
        return False

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(15)


# ---------------------------------------------------------------------------------------- output
def fmt(value: float, digits: int = 1) -> str:
    return "-" if math.isnan(value) else f"{value:,.{digits}f}"


def tables(results: Sequence[dict[str, Any]]) -> str:
    ceiling = next((r["backlog"].pods_per_second for r in results if r["kind"] == "ceiling" and "backlog" in r),
                   float("nan"))

    def ext_ms(p: Phase) -> str:
        if not p.extender_ms:
            return "-"
        return " / ".join(fmt(p.extender_ms.get(v, float("nan")), 2) for v in ("filter", "prioritize", "bind"))

    def lat(p: Phase) -> str:
        values = sorted(p.gang_latency)
        return " | ".join(fmt(v, 2) for v in (wl.percentile(values, 50), wl.percentile(values, 99),
                                               values[-1] if values else float("nan")))

    out = ["### Backlog: scheduling throughput\n",
           "All pods exist before kube-scheduler starts; pods/s = pods / (scheduler started -> last pod "
           "bound).\n",
           "| configuration | pods | bound | seconds | pods/s | vs ceiling | gangs whole | partial gangs "
           "| gang timeouts | scheduling algorithm ms/pod | extender ms filter / prioritize / bind |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in (r for r in results if "backlog" in r):
        p: Phase = r["backlog"]
        note = " groups" if r["kind"] == "ceiling" else ""
        out.append(f"| {r['config']} | {p.pods:,} | {p.bound:,} | {fmt(p.seconds)} | {fmt(p.pods_per_second, 0)} | "
                   f"{_pct(p.pods_per_second / ceiling)} | {p.completed_gangs}/{p.gangs}{note} | "
                   f"{p.partial_gangs} | {fmt(p.timeouts, 0)} | {fmt(p.scheduler_attempt_ms, 2)} | {ext_ms(p)} |")
    out += ["\n### Arrival: gangs created while kube-scheduler runs\n",
            "Gang latency = last member created -> whole gang bound.\n",
            "| configuration | pods | created in s | bound after s | pods/s | gang latency p50 s | p99 s | max s "
            "| partial gangs | gang timeouts | extender ms filter / prioritize / bind |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in (r for r in results if "arrival" in r):
        p = r["arrival"]
        out.append(f"| {r['config']} | {p.pods:,} | {fmt(p.create_seconds)} | {fmt(p.seconds)} | "
                   f"{fmt(p.pods_per_second, 0)} | {lat(p)} | {p.partial_gangs} | {fmt(p.timeouts, 0)} | {ext_ms(p)} |")
    out += ["\n### Contention: gangs that cannot all fit\n",
            "| configuration | gangs | completed | seconds | gang latency p50 s | p99 s | max s | partial gangs "
            "| longest partial s | gang timeouts | pods bound |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in (r for r in results if "contention" in r):
        p = r["contention"]
        out.append(f"| {r['config']} | {p.gangs} | {p.completed_gangs} | {fmt(p.seconds)} | {lat(p)} | "
                   f"{p.partial_gangs} | {fmt(p.max_partial_seconds)} | {fmt(p.timeouts, 0)} | {p.bound}/{p.pods} |")
    for phase in ("backlog", "arrival"):
        names = _programs(results, phase)
        out += [f"\n### CPU seconds used, {phase} phase (2 cores: at most 2 CPU s per second)\n",
                "| configuration | seconds | " + " | ".join(names) + " | total |",
                "|---|---:|" + "---:|" * (len(names) + 1)]
        for r in (r for r in results if phase in r):
            p = r[phase]
            out.append(f"| {r['config']} | {fmt(p.seconds)} | " + " | ".join(
                fmt(p.cpu.get(name, float("nan")), 1) for name in names) + f" | {fmt(sum(p.cpu.values()), 1)} |")
    return "\n".join(out)


def _pct(ratio: float) -> str:
    return "-" if math.isnan(ratio) else f"{ratio * 100:,.0f} %"


def _programs(results: Sequence[dict[str, Any]], phase: str) -> list[str]:
    names: list[str] = []
    for r in results:
        for name in (r[phase].cpu if phase in r else {}):
            if name not in names:
                names.append(name)
    return names


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default=";".join(CONFIGS),
                        help=f"configurations, ';'-separated; 'gang-extender:--threads=2048' adds serve flags "
                             f"[{';'.join(CONFIGS)}]")
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
    parser.add_argument("--phases", default="backlog,arrival,contention",
                        help="which phases [backlog,arrival,contention]")
    parser.add_argument("--py-spy", type=Path, metavar="DIR",
                        help="profile the extender's worker with py-spy (pip install py-spy) into DIR")
    parser.add_argument("--json", type=Path, help="write every number here (for bench/plot.py)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (component logs)")
    args = parser.parse_args(argv)

    # SIGTERM unwinds like Ctrl-C, so the extender and the control plane are stopped on the way out
    signal.signal(signal.SIGTERM, lambda signum, frame: (_ for _ in ()).throw(KeyboardInterrupt()))
    bin_dir = find_bin_dir()
    workdir = Path(tempfile.mkdtemp(prefix="gang-bench-e2e-"))
    wl.log(f"[bench-e2e] {os.cpu_count()} cpu; binaries {bin_dir}; work dir {workdir}; load average "
           f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    results = []
    started = time.monotonic()
    try:
        for config in args.configs.split(";"):
            results.append(run_config(config.strip(), bin_dir, args, workdir))
    finally:
        if args.json and results:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({
                "args": vars(args) | {"json": str(args.json)}, "nproc": os.cpu_count(),
                "loadavg_end": Path("/proc/loadavg").read_text().split()[:3],
                "results": [{k: (vars(v) | {"pods_per_second": v.pods_per_second}) if isinstance(v, Phase) else v
                             for k, v in r.items()} for r in results]}, indent=1, default=str))
            wl.log(f"[bench-e2e] wrote {args.json}")
        if not args.keep:
            import shutil

            shutil.rmtree(workdir, ignore_errors=True)
        else:
            wl.log(f"[bench-e2e] kept {workdir}")
    print(f"\n## End-to-end scheduling ({os.cpu_count()} cpu; {args.general_nodes + wl.CONTENTION_NODES:,} nodes; "
          f"{args.gangs} gangs of {args.size}; run took {time.monotonic() - started:.0f}s)\n")
    print(tables(results))
    by: dict[str, dict[str, Any]] = {}
    for r in results:
        by.setdefault(r["kind"], r)  # the first run of each kind (a variant with extra flags comes after)
    if "backlog" in by.get("ceiling", {}) and "backlog" in by.get("gang-extender", {}):
        ratio = by["gang-extender"]["backlog"].pods_per_second / by["ceiling"]["backlog"].pods_per_second
        print(f"\nFloor: gang-extender pods/s >= {FLOOR_RATIO:.0%} of the ceiling: "
              f"{'MET' if ratio >= FLOOR_RATIO else 'NOT MET'} ({ratio:.0%})")
    if "contention" in by.get("gang-extender", {}):
        c: Phase = by["gang-extender"]["contention"]
        ok = c.completed_gangs == c.gangs and not c.timeouts
        print(f"Floor: every contention gang completes with gang-extender, no timeouts: {'MET' if ok else 'NOT MET'} "
              f"({c.completed_gangs}/{c.gangs} completed, {fmt(c.timeouts, 0)} timeouts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
