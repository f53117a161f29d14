"""A live ``gang-extender serve --cluster-snapshot`` (gunicorn, the serving worker) for HTTP-tier tests and
benchmarks: start, wait, find the worker, read its memory from /proc, optionally inside a memory cgroup.

The memory cgroup is made under this process's own one (cgroup v1 ``memory`` or v2), as root; where that
is not possible ``MemoryCgroup.available()`` says why and the caller skips.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
GANG_EXTENDER = str(BIN / "gang-extender")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM (peak RSS), Threads from /proc/PID/status, in bytes (threads as a count)."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) * 1024
        elif key == "Threads":
            values[key] = int(rest)
    return values


class MemoryCgroup:
    """A child memory cgroup with a hard limit; processes started with ``wrap`` run inside it."""

    def __init__(self, name: str, limit_bytes: int) -> None:
        self.limit = limit_bytes
        self.path, self.version = self._place(name)

    @staticmethod
    def _place(name: str) -> tuple[Path, int]:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, where = line.split(":", 2)
            if "memory" in controllers.split(","):
                return Path("/sys/fs/cgroup/memory") / where.lstrip("/") / name, 1
        where = next(line.split(":", 2)[2] for line in Path("/proc/self/cgroup").read_text().splitlines()
                     if line.startswith("0::"))
        return Path("/sys/fs/cgroup") / where.lstrip("/") / name, 2

    @classmethod
    def available(cls) -> str | None:
        """None when a limited child cgroup can be made here, else the reason it cannot."""
        if os.geteuid() != 0:
            return "not root: cannot make a memory cgroup"
        try:
            probe = cls("gang-extender-probe", 2**30)
            probe.create()
            probe.remove()
        except (OSError, StopIteration) as exc:
            return f"no writable memory cgroup: {exc}"
        return None

    def create(self) -> None:
        self.path.mkdir()
        if self.version == 1:
            (self.path / "memory.limit_in_bytes").write_text(str(self.limit))
            swap = self.path / "memory.memsw.limit_in_bytes"
            if swap.exists():
                swap.write_text(str(self.limit))  # no escape into swap
        else:
            (self.path / "memory.max").write_text(str(self.limit))
            (self.path / "memory.swap.max").write_text("0")

    def wrap(self, argv: Sequence[str]) -> list[str]:
        procs = self.path / "cgroup.procs"
        return ["/bin/sh", "-c", f'echo $$ > "{procs}" && exec "$@"', "sh", *argv]

    def peak_bytes(self) -> int:
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        return int((self.path / name).read_text())

    def oom_kills(self) -> int:
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        for line in (self.path / name).read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def remove(self) -> None:
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)  # processes still leaving


class LiveServer:
    """``gang-extender serve`` over a snapshot document, as a child process (its own session)."""

    def __init__(self, workdir: Path, snapshot: dict[str, Any], args: Sequence[str] = (),
                 cgroup: MemoryCgroup | None = None, source: Path | None = None) -> None:
        """``source``: run the extender package found in this directory (e.g. an older commit) instead."""
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "server.log"
        self.snapshot_path = workdir / "snapshot.json"
        self.snapshot_path.write_text(json.dumps(snapshot))
        self.args = list(args)
        self.cgroup = cgroup
        self.source = source
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> LiveServer:
        command = [sys.executable, "-m", "extender.cli"] if self.source else [GANG_EXTENDER]
        argv = [*command, "serve", "--cluster-snapshot", str(self.snapshot_path), "--port", str(self.port),
                *self.args]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if self.source:
            env["PYTHONPATH"] = str(self.source)
        if self.cgroup is not None:
            self.cgroup.create()
            argv = self.cgroup.wrap(argv)
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                         env=env, cwd=self.source)  # ``-m`` puts the working directory first
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"gang-extender did not become ready:\n{self.log_tail()}")
            time.sleep(0.1)
        return self

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/readyz", timeout=2) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    def worker_pid(self) -> int:
        assert self.proc is not None
        master = self.proc.pid
        children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
        assert len(children) == 1, children
        return int(children[0])

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        if self.cgroup is not None:
            self.cgroup.remove()

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
