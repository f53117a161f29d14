"""Measuring instruments of bench/e2e_scheduling.py: CPU seconds per program, metric scrapes and their
differences, and the optional py-spy profile of the extender's worker.

Owns: finding the processes of one local control plane by their command line (the control plane's
work directory), reading their CPU time from /proc, parsing Prometheus text and reducing two scrapes
of kube-scheduler or gang-extender to what happened between them. Must not: start or change anything
it measures (py-spy only samples).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import workloads as wl
from controlplane import ControlPlane


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


def worker_threads_cpu(worker: int | None) -> dict[str, Any]:
    """A snapshot of the worker's CPU by thread, for :func:`threads_cpu_used`: each live thread's group (its
    name without the pool number: ``gang-bind``, ``watch-pods``, gunicorn's request threads, the main loop that
    accepts, polls and dispatches), its CPU seconds from ``schedstat`` (nanoseconds actually run, not clock
    ticks, which undercount threads that run in short bursts) and the times it was put on a CPU (its third
    field: about one per wake-up), and the whole worker's CPU seconds."""
    if worker is None:
        return {}
    tids: dict[int, tuple[str, float, int]] = {}
    names = python_thread_names(worker)
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{worker}/task").iterdir():
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = (task / "schedstat").read_text().split()
                comm = names.get(int(task.name)) or (task / "comm").read_text().strip()
                name = "main loop" if task.name == str(worker) else thread_group(comm)
                tids[int(task.name)] = (name, int(fields[0]) / 1e9, int(fields[2]))
    user, system = user_system_of(f"/proc/{worker}/stat")
    return {"total": cpu_seconds_of(f"/proc/{worker}/stat"), "user": user, "system": system, "tids": tids}


def python_thread_names(pid: int) -> dict[int, str]:
    """Native thread id -> Python thread name, from one ``py-spy dump`` (Python 3.11 does not name OS
    threads: every thread's ``comm`` is the process's). Empty without py-spy or if it fails."""
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if spy is None:
        return {}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run([spy, "dump", "--pid", str(pid)], check=False, capture_output=True, text=True,
                             timeout=30).stdout
        return {int(tid): name for tid, name in re.findall(r'^Thread (\d+) \(\w+\): "(.*)"$', out, re.M)}
    return {}


def thread_group(comm: str) -> str:
    """A thread's group from its name: pool numbers dropped (``gang-bind_3`` -> ``gang-bind``); the serving
    worker's ``request-12`` (``extender.http.threads``), and Python's ``ThreadPoolExecutor-0_12`` (gunicorn's
    request threads in trees before it, cut to 15 characters) -> ``request threads``."""
    if comm.startswith("ThreadPoolExec") or comm.rstrip("0123456789") == "request-":
        return "request threads"
    return comm.rstrip("0123456789").rstrip("_-") or comm


def _by_group(before: dict[str, Any], after: dict[str, Any], field: int) -> dict[str, float]:
    """Field ``field`` of each live thread's snapshot (1: CPU seconds, 2: times run), summed by thread group
    over the two snapshots (a thread id reused by another group counts from zero)."""
    grown: dict[str, float] = {}
    for tid, now in after["tids"].items():
        was = before["tids"].get(tid)
        grown[now[0]] = grown.get(now[0], 0) + now[field] - (was[field] if was and was[0] == now[0] else 0)
    return grown


def threads_cpu_used(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    """CPU seconds by thread group between two snapshots; what threads that ended in between ran is the
    worker's total less the live threads' (``ended threads``, approximate: the total is clock-based)."""
    if not before or not after:
        return {}
    used = _by_group(before, after, 1)
    used["ended threads"] = max(after["total"] - before["total"] - sum(used.values()), 0.0)
    return {name: round(value, 3) for name, value in sorted(used.items(), key=lambda kv: -kv[1])}


def thread_runs(before: dict[str, Any], after: dict[str, Any]) -> dict[str, int]:
    """Times each thread group was put on a CPU between two snapshots (live threads only): on a VM a
    wake-up from idle costs tens of microseconds of CPU whatever the thread then does."""
    if not before or not after:
        return {}
    runs = _by_group(before, after, 2)
    return {name: int(count) for name, count in sorted(runs.items(), key=lambda kv: -kv[1])}


def user_system(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    """The worker's CPU seconds in user and in kernel mode between two snapshots (clock ticks): a thread
    switch, a futex or a socket call is kernel time."""
    if not before or not after:
        return {}
    return {mode: round(after[mode] - before[mode], 2) for mode in ("user", "system")}


def user_system_of(stat_path: str) -> tuple[float, float]:
    with contextlib.suppress(OSError, IndexError, ValueError):
        fields = Path(stat_path).read_text().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / tick, int(fields[12]) / tick
    return 0.0, 0.0


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


def _label(key: str, label: str) -> str:
    at = key.find(f'{label}="')
    return key[at + len(label) + 2:key.index('"', at + len(label) + 2)] if at >= 0 else ""


def scheduler_counts(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Between two scrapes of kube-scheduler: scheduling attempts (all, and by result), pods entering each of
    its queues (``moves active|backoff|unschedulable|gated``: its unschedulable pool after a failed attempt,
    or held there by PreEnqueue) and the mean pod scheduling SLI duration, ms."""
    out: dict[str, float] = {}

    def add(name: str, value: float) -> None:
        out[name] = out.get(name, 0.0) + value

    for key, value in after.items():
        delta = value - before.get(key, 0.0)
        if key.startswith("scheduler_schedule_attempts_total{"):
            add("attempts", delta)
            add(f"attempts {_label(key, 'result')}", delta)
        elif key.startswith("scheduler_queue_incoming_pods_total{"):
            queue = _label(key, "queue").lower()
            if queue == "unschedulable" and _label(key, "event") != "ScheduleAttemptFailure":
                queue = "gated"  # held back by a PreEnqueue plugin (gates, the in-tree gang plugin), never tried
            add(f"moves {queue}", delta)
        elif key.startswith("scheduler_pod_scheduling_sli_duration_seconds_sum"):
            add("sli sum", delta)
        elif key.startswith("scheduler_pod_scheduling_sli_duration_seconds_count"):
            add("sli count", delta)
    if out.get("sli count"):
        out["sli ms"] = out["sli sum"] / out["sli count"] * 1000
    return out


EXTENDER_WRITES = (  # (kind, metric, outcomes that were API requests)
    ("Events", "gang_extender_events_total", ("sent", "failed")),
    ("pod wakes", "gang_extender_pod_wakes_total", ("sent", "failed")),
    ("quorum gates removed", "gang_extender_quorum_gates_removed_total", ("sent", "failed")),
    ("group status", "gang_extender_group_status_writes_total", None),  # every outcome but "dropped"
)


def extender_writes(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """API writes gang-extender made between two scrapes beyond the Bindings every binder makes."""
    out = {}
    for kind, name, outcomes in EXTENDER_WRITES:
        total = 0.0
        for key, value in after.items():
            if key.startswith(name + "{"):
                outcome = _label(key, "outcome")
                if (outcome in outcomes) if outcomes else outcome != "dropped":
                    total += value - before.get(key, 0.0)
        out[kind] = total
    return out


def watch_events(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Watch events the extender applied between two scrapes, by resource (what its watch threads read)."""
    name = "gang_extender_watch_events_total"
    return {_label(key, "resource"): value - before.get(key, 0.0)
            for key, value in after.items() if key.startswith(name + "{")}


def extender_ms(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    out = {}
    for verb in ("filter", "prioritize", "bind"):
        s = f'gang_extender_request_seconds_sum{{verb="{verb}"}}'
        c = f'gang_extender_request_seconds_count{{verb="{verb}"}}'
        n = after.get(c, 0.0) - before.get(c, 0.0)
        if n:
            out[verb] = round((after.get(s, 0.0) - before.get(s, 0.0)) / n * 1000, 3)
            out[f"{verb}_calls"] = n
            cpu = f'gang_extender_request_cpu_seconds_total{{verb="{verb}"}}'
            if cpu in after:  # CPU of the handler on the request's thread, ms per call
                out[f"{verb}_cpu"] = round((after[cpu] - before.get(cpu, 0.0)) / n * 1000, 3)
    return out


def extender_worker_pid(ext: Any) -> int | None:
    """gunicorn's worker (the master's only child) of an extender started by ``wl.extender_process``."""
    with contextlib.suppress(OSError, IndexError, AttributeError):
        pid = ext.proc.pid
        return int(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()[0])
    return None


@contextlib.contextmanager
def sampled(ext: Any, out: Path | None, name: str, profiler: str, suffix: str,
            command: Callable[[int, Path], list[str]], summary: Callable[[Path], str]) -> Any:
    """Run a sampling profiler (``command``: its argv for the worker's pid and the output file) on the
    extender's worker while the block runs, if asked to (``out``), then log its ``summary``."""
    pid = extender_worker_pid(ext) if ext is not None and out is not None else None
    if pid is None or out is None:
        yield
        return
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name.replace(' ', '-')}{suffix}"
    proc = subprocess.Popen(command(pid, path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
        wl.log(f"[{name}] {profiler} profile of the extender worker: {path}\n{summary(path)}")


def py_spy(ext: Any, out: Path | None, name: str) -> Any:
    """Sample the extender's worker with py-spy (collapsed stacks) while the block runs, if asked to."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    # --gil: only samples where a thread holds the GIL, i.e. where the worker's CPU time goes;
    # --nonblocking: never pauses the worker (pausing ~2,000 held-bind threads 250 times a second stalled
    # the run at 5 pods/s), at the price of an occasional torn stack
    return sampled(ext, out, name, "py-spy", ".txt",
                   lambda pid, path: [spy, "record", "--pid", str(pid), "--rate", "100", "--nonblocking", "--format",
                                      "raw", "--threads", "--gil", "--output", str(path)], spy_summary)


def perf_record(ext: Any, out: Path | None, name: str) -> Any:
    """Sample the extender's worker with Linux ``perf record`` (CPU clock, 499 Hz, user and kernel code by
    symbol) while the block runs, if asked to (and ``perf`` is installed); logs the shared objects and
    symbols that took the most."""
    perf = shutil.which("perf")
    return sampled(ext, out if perf else None, name, "perf", ".data",
                   lambda pid, path: [perf or "perf", "record", "-e", "cpu-clock", "-F", "499", "-p", str(pid),
                                      "-o", str(path)],
                   lambda path: perf_summary(perf or "perf", path))


def perf_summary(perf: str, path: Path, top: int = 25) -> str:
    """The shared objects by share of samples, then the ``top`` symbols."""
    lines = []
    for sort in ("dso", "dso,sym"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            report = subprocess.run([perf, "report", "-i", str(path), "--stdio", "--sort", sort, "--percent-limit",
                                     "0.5"], check=False, capture_output=True, text=True, timeout=120).stdout
            rows = [row for row in report.splitlines() if row.strip() and not row.startswith("#")]
            lines += rows[:top]
    return "\n".join(lines)


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
