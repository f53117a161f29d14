#!/usr/bin/env python3
"""A real, throw-away Kubernetes control plane on loopback, for the e2e tests and the demo.

Runs etcd, kube-apiserver, kube-controller-manager and (on request) kube-scheduler from prebuilt
binaries (see ``hack/build-k8s.sh``), each in its own process group, with every file (certificates,
kubeconfigs, etcd data, logs) under one temporary directory. There are no kubelets: nodes are plain
Node objects made by :meth:`ControlPlane.add_nodes`, and bound pods simply stay Pending with a
``spec.nodeName``. (``hack/kwok_harness.py`` adds nodes that kwok manages, on which pods do run and
graceful deletions complete; it runs kwok through :meth:`ControlPlane.start_component`.)

Library use::

    with ControlPlane(find_bin_dir()) as cp:          # etcd + kube-apiserver + kube-controller-manager
        cp.start_scheduler({"apiVersion": "kubescheduler.config.k8s.io/v1",
                            "kind": "KubeSchedulerConfiguration",
                            "profiles": [{"schedulerName": "default-scheduler"}]})
        cp.add_nodes(3)
        cp.kubectl("get", "nodes")

CLI::

    python hack/controlplane.py up [--nodes N] [--keep]   # prints the kubeconfig path, runs until Ctrl-C

Security model: RBAC is on (``--authorization-mode=RBAC``); :attr:`ControlPlane.kubeconfig` holds a
client certificate in group ``system:masters``; the controller manager and the scheduler use their own
certificates (``system:kube-controller-manager``, ``system:kube-scheduler``) and so get exactly the
bootstrap RBAC a real cluster gives them.

Cleanup guarantees and their limits:

* :meth:`ControlPlane.stop` (run by ``with``, by ``atexit``, and on SIGTERM/SIGHUP when this module
  installed the handler, which then re-raises the signal so the process still dies of it) sends SIGTERM
  to each component's process group, SIGKILL after a grace period, and removes the work directory
  unless ``keep=True``. Stop order is scheduler, controller manager, API server, etcd.
* If the owning Python process dies without running any of that (SIGKILL, OOM kill, ``os._exit``), a
  small watchdog process sees EOF on its stdin pipe from the owner, SIGKILLs the same process groups
  and removes the work directory unless ``keep=True`` (measured: < 0.5s). The watchdog is in its own
  session, so a Ctrl-C in the terminal does not reach it.
* Not covered: SIGKILL of the watchdog itself together with the owner (e.g. ``kill -9`` of both pids),
  and children the owner ``os.fork()``-ed without exec (they inherit the pipe, so the watchdog waits for
  them too). Processes the *caller* starts (e.g. an extender) are the caller's job. Signal handlers are
  only installed from the main thread and only over the default disposition (an existing handler, e.g.
  the CLI's own, is left alone).
* Ports are picked by binding port 0 and releasing it; another process could grab one in between
  (start then fails with the component's "address already in use" log tail).
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import copy
import http.client
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Final

import yaml

REPO_ROOT: Final = Path(__file__).resolve().parent.parent
BUILD_SCRIPT: Final = REPO_ROOT / "hack" / "build-k8s.sh"
BINARIES: Final = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")

#: Gates every component gets unless the caller overrides them. ``GenericWorkload`` brings the
#: ``scheduling.k8s.io/v1alpha1`` Workload API and ``pod.spec.workloadRef``; the in-tree
#: ``GangScheduling`` plugin stays off, because making gangs all-or-nothing is the extender's job.
DEFAULT_FEATURE_GATES: Final[Mapping[str, bool]] = {"GenericWorkload": True, "GangScheduling": False}

#: API versions the API server enables unless the caller says otherwise (1.35's alpha Workload API).
DEFAULT_RUNTIME_CONFIG: Final[tuple[str, ...]] = ("scheduling.k8s.io/v1alpha1=true",)

#: The plain scheduler configuration (no extender).
DEFAULT_SCHEDULER_CONFIG: Final[Mapping[str, Any]] = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "profiles": [{"schedulerName": "default-scheduler"}],
}

SERVICE_CIDR: Final = "10.0.0.0/24"
SERVICE_ACCOUNT_ISSUER: Final = "https://kubernetes.default.svc.cluster.local"
LOG_TAIL_LINES: Final = 40
BUILD_EXIT_NO_GO: Final = 3  # hack/build-k8s.sh exits with this when binaries are missing and go is too

Log = Callable[[str], None]


class ControlPlaneError(RuntimeError):
    """A component failed to start, stopped unexpectedly, or an API call failed."""


class BinariesUnavailableError(ControlPlaneError):
    """The binaries are not built and cannot be built here (no ``go``)."""


class ApiError(ControlPlaneError):
    """The API server answered a raw request with an HTTP error."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path} -> HTTP {status}: {body[:2000]}")
        self.status = status
        self.body = body


class KubectlError(subprocess.CalledProcessError):
    """``kubectl`` exited non-zero; unlike the base class, ``str()`` includes its stderr."""

    def __str__(self) -> str:
        return f"{super().__str__()}\nstderr: {self.stderr}\nstdout: {self.stdout}"


# --------------------------------------------------------------------------------------------------
# Locating the binaries
# --------------------------------------------------------------------------------------------------


def find_bin_dir(env: Mapping[str, str] | None = None) -> Path:
    """Run ``hack/build-k8s.sh`` (which builds only if needed) and return the directory it prints last.

    ``KUBEBUILDER_ASSETS`` in the environment is honoured by the script. Build progress is copied to
    our stderr as it comes. Raises :class:`BinariesUnavailableError` when the binaries are missing and
    ``go`` is not installed, :class:`ControlPlaneError` (with the script's last stderr lines) on any
    other failure.
    """
    bin_dir = run_build_script(
        BUILD_SCRIPT, env, missing="Kubernetes binaries are not built and `go` is not installed (install Go or "
        "point KUBEBUILDER_ASSETS at a directory with " + ", ".join(BINARIES) + ")")
    check_bin_dir(bin_dir)
    return bin_dir


def run_build_script(script: Path, env: Mapping[str, str] | None = None, *, missing: str) -> Path:
    """Run a ``hack/build-*.sh`` script and return the directory it prints on its last stdout line.

    The scripts' contract: build only what is missing, progress on stderr (copied to ours as it comes),
    exit :data:`BUILD_EXIT_NO_GO` when the output is missing and ``go`` is not installed (raised as
    :class:`BinariesUnavailableError` saying ``missing``), any other non-zero exit is a
    :class:`ControlPlaneError` with the script's last stderr lines.
    """
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(
            ["bash", str(script)],
            stdout=out,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=dict(os.environ if env is None else env),
        )
        assert proc.stderr is not None
        errors: deque[str] = deque(maxlen=20)
        with proc:
            for line in proc.stderr:
                sys.stderr.write(line)
                sys.stderr.flush()
                errors.append(line.rstrip("\n"))
        out.seek(0)
        lines = [line.strip() for line in out.read().splitlines() if line.strip()]
    if proc.returncode == BUILD_EXIT_NO_GO:
        raise BinariesUnavailableError(f"{script} exited {proc.returncode}: {missing}")
    if proc.returncode != 0 or not lines:
        detail = "\n".join(errors) or "<no stderr>"
        raise ControlPlaneError(f"{script} failed with exit code {proc.returncode}:\n{detail}")
    return Path(lines[-1])


def check_bin_dir(bin_dir: Path) -> None:
    missing = [b for b in BINARIES if not os.access(bin_dir / b, os.X_OK)]
    if missing:
        raise ControlPlaneError(f"{bin_dir} lacks executable(s): {', '.join(missing)}")


# --------------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------------


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports that were free a moment ago (the OS picks them)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_for(
    condition: Callable[[], bool], *, timeout: float = 30.0, interval: float = 0.1, what: str = "condition"
) -> None:
    """Poll ``condition`` until it returns true; raise :class:`TimeoutError` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return "\n".join(data.splitlines()[-lines:])


def _gates_flag(gates: Mapping[str, bool]) -> str:
    return ",".join(f"{k}={'true' if v else 'false'}" for k, v in sorted(gates.items()))


def _gates_args(gates: Mapping[str, bool]) -> list[str]:
    """``--feature-gates=...``, or no flag at all for no gates."""
    return [f"--feature-gates={_gates_flag(gates)}"] if gates else []


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def _openssl(cwd: Path, *args: str) -> None:
    proc = subprocess.run(
        ["openssl", *args], cwd=cwd, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False
    )
    if proc.returncode != 0:
        raise ControlPlaneError(f"openssl {' '.join(args)} failed: {proc.stderr.strip()}")


# --------------------------------------------------------------------------------------------------
# PKI (openssl CLI, ECDSA P-256 keys: fast to generate, accepted by every component)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CertPair:
    cert: Path
    key: Path


class Pki:
    """A throw-away CA plus the certificates the control plane needs, under ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.ca = self._make_ca("ca", "gang-extender-e2e-ca")
        # A separate CA for --requestheader-client-ca-file (nothing uses a front proxy here, but
        # without it every component logs "missing content for CA bundle ... requestheader" forever).
        self.front_proxy_ca = self._make_ca("front-proxy-ca", "gang-extender-e2e-front-proxy-ca")
        # Service-account token signing key pair.
        self.sa_key = directory / "sa.key"
        self.sa_pub = directory / "sa.pub"
        _openssl(directory, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                 "-out", self.sa_key.name)  # fmt: skip
        _openssl(directory, "pkey", "-in", self.sa_key.name, "-pubout", "-out", self.sa_pub.name)

    def _make_ca(self, name: str, common_name: str) -> CertPair:
        pair = CertPair(self.dir / f"{name}.crt", self.dir / f"{name}.key")
        _openssl(
            self.dir, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", pair.key.name, "-out", pair.cert.name, "-days", "3650",
            "-subj", f"/CN={common_name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        )  # fmt: skip
        return pair

    def issue(
        self,
        name: str,
        common_name: str,
        *,
        organizations: Sequence[str] = (),
        server_names: Sequence[str] = (),
        server_ips: Sequence[str] = (),
    ) -> CertPair:
        """Sign a leaf certificate: a serving one when names/IPs are given, a client one otherwise."""
        pair = CertPair(self.dir / f"{name}.crt", self.dir / f"{name}.key")
        csr = self.dir / f"{name}.csr"
        ext = self.dir / f"{name}.ext"
        subject = "".join(f"/O={o}" for o in organizations) + f"/CN={common_name}"
        sans = [f"DNS:{n}" for n in server_names] + [f"IP:{ip}" for ip in server_ips]
        lines = ["basicConstraints=critical,CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment"]
        if sans:
            lines += ["extendedKeyUsage=serverAuth,clientAuth", "subjectAltName=" + ",".join(sans)]
        else:
            lines += ["extendedKeyUsage=clientAuth"]
        ext.write_text("\n".join(lines) + "\n")
        _openssl(
            self.dir, "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", pair.key.name, "-out", csr.name, "-subj", subject,
        )  # fmt: skip
        _openssl(
            self.dir, "x509", "-req", "-in", csr.name, "-CA", self.ca.cert.name, "-CAkey", self.ca.key.name,
            "-set_serial", str(secrets.randbits(63)), "-days", "3650", "-sha256", "-extfile", ext.name,
            "-out", pair.cert.name,
        )  # fmt: skip
        csr.unlink()
        ext.unlink()
        return pair


def write_kubeconfig(
    path: Path,
    server: str,
    ca: Path,
    *,
    user: str,
    client: CertPair | None = None,
    token: str | None = None,
    namespace: str | None = None,
) -> Path:
    """Write a self-contained kubeconfig (certificates embedded) for one user."""
    creds: dict[str, str] = {}
    if client is not None:
        creds["client-certificate-data"] = _b64(client.cert)
        creds["client-key-data"] = _b64(client.key)
    if token is not None:
        creds["token"] = token
    context: dict[str, str] = {"cluster": "e2e", "user": user}
    if namespace is not None:
        context["namespace"] = namespace
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority-data": _b64(ca)}}],
        "users": [{"name": user, "user": creds}],
        "contexts": [{"name": "e2e", "context": context}],
        "current-context": "e2e",
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)
    return path


# --------------------------------------------------------------------------------------------------
# Raw HTTPS client (stdlib; one keep-alive connection per thread)
# --------------------------------------------------------------------------------------------------


class ApiClient:
    """Minimal JSON client for the API server, safe to share between threads."""

    def __init__(self, port: int, context: ssl.SSLContext, *, timeout: float = 30.0) -> None:
        self.port = port
        self.context = context
        self.timeout = timeout
        self._local = threading.local()
        self._conns: list[http.client.HTTPSConnection] = []
        self._lock = threading.Lock()

    def _conn(self) -> http.client.HTTPSConnection:
        conn: http.client.HTTPSConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=self.timeout)
            self._local.conn = conn
            with self._lock:
                self._conns.append(conn)
        return conn

    def request_raw(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json"
    ) -> tuple[int, bytes]:
        payload = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = {"Accept": "application/json"}
        if payload is not None:
            headers["Content-Type"] = content_type
        for attempt in (1, 2):
            conn = self._conn()
            try:
                conn.request(method, path, body=payload, headers=headers)
                resp = conn.getresponse()
                return resp.status, resp.read()
            except (http.client.RemoteDisconnected, ConnectionError, http.client.CannotSendRequest, ssl.SSLEOFError):
                # Stale keep-alive connection (the API server restarted, or closed it while idle: on TLS the
                # write then fails with SSLEOFError, seen after a 3-minute build between two requests):
                # reconnect once.
                conn.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json") -> Any:
        status, data = self.request_raw(method, path, body, content_type=content_type)
        if status >= 400:
            raise ApiError(method, path, status, data.decode("utf-8", "replace"))
        if not data:
            return None
        try:
            return json.loads(data)
        except ValueError:
            return data.decode("utf-8", "replace")

    def close(self) -> None:
        # The connections stay registered: a thread still holding one reconnects on its next request
        # (e.g. a sampler across an API server restart), and the next close() must close that socket too.
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            conn.close()


# --------------------------------------------------------------------------------------------------
# Process supervision
# --------------------------------------------------------------------------------------------------

_WATCHDOG_SOURCE = r"""
import os, shutil, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
class Stop(Exception):
    pass
def on_signal(signum, frame):
    raise Stop()
signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGHUP, on_signal)
groups, rmdir = set(), None
def alive(g):
    # A killed leader stays a zombie until whoever inherited it reaps it: count zombies as gone.
    if os.path.isdir("/proc/self"):
        try:
            with open(f"/proc/{g}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except OSError:
            return False
    try:
        os.killpg(g, 0)
        return True
    except OSError:
        return False
try:
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        if cmd == "add":
            groups.add(int(arg))
        elif cmd == "del":
            groups.discard(int(arg))
        elif cmd == "rmdir":
            rmdir = arg
        elif cmd == "keepdir":
            rmdir = None
except Stop:
    pass
finally:
    # EOF: our owner has exited (or closed the pipe after its own clean shutdown). The cluster is
    # throw-away, so no grace period: SIGKILL, wait for the groups to vanish, remove the files.
    for g in groups:
        try:
            os.killpg(g, signal.SIGKILL)
        except OSError:
            pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(g) for g in groups):
        time.sleep(0.05)
    if rmdir:
        shutil.rmtree(rmdir, ignore_errors=True)
"""


class _Watchdog:
    """Kills registered process groups if the owning process dies without cleaning up."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-c", _WATCHDOG_SOURCE],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            text=True,
        )
        self._lock = threading.Lock()

    def send(self, line: str) -> None:
        with self._lock:
            stdin = self.proc.stdin
            if stdin is None or stdin.closed:
                return
            try:
                stdin.write(line + "\n")
                stdin.flush()
            except (BrokenPipeError, ValueError):
                pass

    def close(self) -> None:
        """Clean shutdown: the owner already stopped everything and sent ``del`` for each group."""
        with self._lock:
            if self.proc.stdin is not None and not self.proc.stdin.closed:
                with contextlib.suppress(BrokenPipeError):
                    self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Component:
    name: str
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


_LIVE: set[ControlPlane] = set()
_LIVE_LOCK = threading.Lock()
_HOOKS_INSTALLED = False


def _stop_all_live() -> None:
    with _LIVE_LOCK:
        planes = list(_LIVE)
    for plane in planes:
        with contextlib.suppress(Exception):
            plane.stop()


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    """Tear the planes down, then die of the same signal (so the exit status is still "killed by")."""
    _stop_all_live()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_exit_hooks() -> None:
    """atexit always; SIGTERM/SIGHUP handlers only from the main thread and over the default disposition."""
    global _HOOKS_INSTALLED  # noqa: PLW0603
    if _HOOKS_INSTALLED:
        return
    _HOOKS_INSTALLED = True
    atexit.register(_stop_all_live)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, _exit_on_signal)


# --------------------------------------------------------------------------------------------------
# The control plane
# --------------------------------------------------------------------------------------------------


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager (+ optional kube-scheduler) on 127.0.0.1.

    ``workdir``: where everything goes; default a fresh temp dir, removed on :meth:`stop` unless
    ``keep`` (a caller-supplied ``workdir`` is never removed). ``scheduler_config``: if given,
    :meth:`start` also starts kube-scheduler with it. ``feature_gates`` are merged over
    :data:`DEFAULT_FEATURE_GATES` (over nothing with ``default_feature_gates=False``: then an empty
    mapping means no ``--feature-gates`` flag at all) and passed to the API server, controller manager
    and scheduler; ``scheduler_feature_gates``, when given, replaces them for the scheduler alone.
    ``runtime_config`` replaces :data:`DEFAULT_RUNTIME_CONFIG` (empty: no ``--runtime-config``).
    ``advertise_address``: for clusters with real kubelets (``hack/real-nodes/realnodes.py``): the API
    server then listens on every address (still on 127.0.0.1 for this class's clients), advertises this
    one (not loopback), keeps the ``kubernetes`` Service's endpoints on it so that pods reach it through
    the Service, and its serving certificate names it; default: loopback only, no endpoints.
    """

    # Set by start() (certificates and the components' own kubeconfigs).
    serving: CertPair
    _admin_pair: CertPair
    _kcm_kubeconfig: Path
    _scheduler_kubeconfig: Path

    def __init__(
        self,
        bin_dir: str | os.PathLike[str],
        workdir: str | os.PathLike[str] | None = None,
        *,
        scheduler_config: Mapping[str, Any] | None = None,
        feature_gates: Mapping[str, bool] | None = None,
        default_feature_gates: bool = True,
        runtime_config: Sequence[str] | None = None,
        scheduler_feature_gates: Mapping[str, bool] | None = None,
        log: Log = print,
        keep: bool = False,
        start_timeout: float = 90.0,
        advertise_address: str | None = None,
    ) -> None:
        self.bin_dir = Path(bin_dir)
        self.advertise_address = advertise_address
        check_bin_dir(self.bin_dir)
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="gang-e2e-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.scheduler_config = copy.deepcopy(dict(scheduler_config)) if scheduler_config else None
        defaults = DEFAULT_FEATURE_GATES if default_feature_gates else {}
        self.feature_gates: dict[str, bool] = {**defaults, **(feature_gates or {})}
        self.scheduler_feature_gates: dict[str, bool] = dict(
            self.feature_gates if scheduler_feature_gates is None else scheduler_feature_gates)
        self.runtime_config: list[str] = list(DEFAULT_RUNTIME_CONFIG if runtime_config is None else runtime_config)
        self.log = log
        self.keep = keep
        self.start_timeout = start_timeout

        (self.etcd_port, self.etcd_peer_port, self.apiserver_port, self.kcm_port, self.scheduler_port) = free_ports(5)
        self.server = f"https://127.0.0.1:{self.apiserver_port}"
        self.kubeconfig = str(self.workdir / "admin.kubeconfig")
        self.pki: Pki | None = None
        self._components: dict[str, Component] = {}
        self._scheduler_runs = 0
        self._scheduler_ports: dict[str, int] = {"kube-scheduler": self.scheduler_port}
        self._api: ApiClient | None = None
        self._watchdog: _Watchdog | None = None
        self._node_index: dict[str, int] = {}
        self._started = False
        self._stopped = False

    # ---- context manager -------------------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        if not self._started:
            self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ---- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start etcd, kube-apiserver and kube-controller-manager; return once pods can be created.

        On failure everything started so far is stopped, the work directory is kept for inspection and
        a :class:`ControlPlaneError` carrying the failing component's log tail is raised.
        """
        if self._started:
            raise ControlPlaneError("control plane already started")
        self._started = True
        _install_exit_hooks()
        with _LIVE_LOCK:
            _LIVE.add(self)
        self._watchdog = _Watchdog()
        if self._own_workdir and not self.keep:
            self._watchdog.send(f"rmdir {self.workdir}")
        t0 = time.monotonic()
        try:
            self._write_pki()
            self._start_etcd()
            self.start_apiserver()
            self._start_controller_manager()
            if self.scheduler_config is not None:
                self.start_scheduler(self.scheduler_config)
        except BaseException:
            self.keep = True  # leave the logs for the post-mortem
            self._watchdog.send("keepdir")
            self.stop()
            raise
        self.log(f"[controlplane] up in {time.monotonic() - t0:.1f}s: {self.server}, kubeconfig {self.kubeconfig}")

    def _write_pki(self) -> None:
        t0 = time.monotonic()
        pki = Pki(self.workdir / "pki")
        self.pki = pki
        self.serving = pki.issue(
            "serving",
            "kube-apiserver",
            server_names=[
                "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            server_ips=["127.0.0.1", "10.0.0.1", *([self.advertise_address] if self.advertise_address else [])],
        )  # fmt: skip
        admin = pki.issue("admin", "kubernetes-admin", organizations=["system:masters"])
        kcm = pki.issue("controller-manager", "system:kube-controller-manager")
        sched = pki.issue("scheduler", "system:kube-scheduler")
        ca = pki.ca.cert
        write_kubeconfig(Path(self.kubeconfig), self.server, ca, user="kubernetes-admin", client=admin)
        self._kcm_kubeconfig = write_kubeconfig(
            self.workdir / "controller-manager.kubeconfig", self.server, ca,
            user="system:kube-controller-manager", client=kcm,
        )  # fmt: skip
        self._scheduler_kubeconfig = write_kubeconfig(
            self.workdir / "scheduler.kubeconfig", self.server, ca, user="system:kube-scheduler", client=sched
        )
        self._admin_pair = admin
        self.log(f"[controlplane] certificates and kubeconfigs in {self.workdir} ({time.monotonic() - t0:.1f}s)")

    def _ssl_context(self, client: CertPair | None) -> ssl.SSLContext:
        assert self.pki is not None
        ctx = ssl.create_default_context(cafile=str(self.pki.ca.cert))
        if client is not None:
            ctx.load_cert_chain(str(client.cert), str(client.key))
        return ctx

    @property
    def api(self) -> ApiClient:
        """Raw JSON client authenticated as the admin (``system:masters``)."""
        if self._api is None:
            self._api = ApiClient(self.apiserver_port, self._ssl_context(self._admin_pair))
        return self._api

    def request(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json") -> Any:
        """Raw API call as admin, e.g. ``cp.request("GET", "/api/v1/nodes")``; raises :class:`ApiError`."""
        return self.api.request(method, path, body, content_type=content_type)

    # ---- components ------------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str], env: Mapping[str, str] | None = None) -> Component:
        log_path = self.workdir / f"{name}.log"
        with log_path.open("ab") as logf:
            logf.write(f"\n==== {time.strftime('%H:%M:%S')} starting: {' '.join(argv)}\n".encode())
            logf.flush()
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=None if env is None else {**os.environ, **env},
                start_new_session=True,  # own session => own process group, immune to the terminal's ^C
            )
        if self._watchdog is not None:
            self._watchdog.send(f"add {proc.pid}")
        comp = Component(name, argv, log_path, proc)
        self._components[name] = comp
        return comp

    def _terminate(self, name: str, grace: float = 10.0, sig: signal.Signals = signal.SIGTERM) -> None:
        """Send ``sig`` to the component's process group; SIGKILL it if still alive after ``grace``."""
        comp = self._components.pop(name, None)
        if comp is None or comp.proc is None:
            return
        proc = comp.proc
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if self._watchdog is not None:
            self._watchdog.send(f"del {proc.pid}")

    def _claim(self, name: str) -> None:
        """Make room to (re)start ``name``: reap it if it died, refuse if it still runs."""
        comp = self._components.get(name)
        if comp is not None:
            if comp.running:
                raise ControlPlaneError(f"{name} is already running")
            self._terminate(name)

    def _wait_ready(self, comp: Component, check: Callable[[], bool], timeout: float | None = None) -> None:
        """Poll ``check`` until true; if the process exits or time runs out, stop it and raise."""
        try:
            self._poll_ready(comp, check, self.start_timeout if timeout is None else timeout)
        except BaseException:
            self._terminate(comp.name, grace=2.0)
            raise

    def _poll_ready(self, comp: Component, check: Callable[[], bool], timeout: float) -> None:
        t0 = time.monotonic()
        deadline = t0 + timeout
        last_error = ""
        while True:
            assert comp.proc is not None
            code = comp.proc.poll()
            if code is not None:
                raise ControlPlaneError(
                    f"{comp.name} exited with code {code} during startup; last lines of {comp.log_path}:\n"
                    + tail(comp.log_path)
                )
            try:
                if check():
                    self.log(f"[controlplane] {comp.name} ready ({time.monotonic() - t0:.1f}s)")
                    return
            except (OSError, http.client.HTTPException, ValueError) as exc:
                last_error = f"{type(exc).__name__}: {exc}"
            if time.monotonic() >= deadline:
                raise ControlPlaneError(
                    f"{comp.name} not ready after {timeout:.0f}s (last probe error: {last_error or 'none'}); "
                    f"last lines of {comp.log_path}:\n" + tail(comp.log_path)
                )
            time.sleep(0.1)

    def _start_etcd(self) -> None:
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        client = f"http://127.0.0.1:{self.etcd_port}"
        comp = self._spawn("etcd", [
            str(self.bin_dir / "etcd"),
            "--name=e2e",
            f"--data-dir={self.workdir / 'etcd-data'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=e2e={peer}",
            "--initial-cluster-state=new",
            "--unsafe-no-fsync=true",  # throw-away data: skip fsync, much faster on slow disks
            "--log-level=warn",
        ])  # fmt: skip

        def healthy() -> bool:
            conn = http.client.HTTPConnection("127.0.0.1", self.etcd_port, timeout=2)
            try:
                conn.request("GET", "/health")
                resp = conn.getresponse()
                return resp.status == 200 and json.loads(resp.read()).get("health") == "true"
            finally:
                conn.close()

        self._wait_ready(comp, healthy)

    def start_apiserver(self) -> None:
        """Start kube-apiserver (again) on the same port and wait for ``/readyz``."""
        self._claim("kube-apiserver")
        assert self.pki is not None
        pki = self.pki
        comp = self._spawn("kube-apiserver", [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            f"--bind-address={'0.0.0.0' if self.advertise_address else '127.0.0.1'}",
            f"--advertise-address={self.advertise_address or '127.0.0.1'}",
            f"--secure-port={self.apiserver_port}",
            f"--tls-cert-file={self.serving.cert}",
            f"--tls-private-key-file={self.serving.key}",
            f"--client-ca-file={pki.ca.cert}",
            f"--requestheader-client-ca-file={pki.front_proxy_ca.cert}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            *([f"--runtime-config={','.join(self.runtime_config)}"] if self.runtime_config else []),
            # TaintNodesByCondition puts node.kubernetes.io/not-ready:NoSchedule on every new Node and
            # only the node lifecycle controller (disabled: no kubelets) would take it off again.
            "--disable-admission-plugins=TaintNodesByCondition",
            *_gates_args(self.feature_gates),
            "--allow-privileged=true",
            # The "kubernetes" Service's endpoint would be 127.0.0.1, which Endpoints validation
            # rejects (loopback) every 10s; nothing runs in-cluster here, so don't maintain it.
            *([] if self.advertise_address else ["--endpoint-reconciler-type=none"]),
            "--profiling=false",
            "--v=1",
        ])  # fmt: skip
        ctx = self._ssl_context(self._admin_pair)

        def ready() -> bool:
            conn = http.client.HTTPSConnection("127.0.0.1", self.apiserver_port, context=ctx, timeout=5)
            try:
                conn.request("GET", "/readyz")
                resp = conn.getresponse()
                return resp.status == 200 and resp.read().strip() == b"ok"
            finally:
                conn.close()

        self._wait_ready(comp, ready)

    def stop_apiserver(self, *, graceful: bool = False) -> None:
        """Stop kube-apiserver; etcd and the other components keep running.

        Default: SIGKILL, i.e. a crash, which is also the only fast way: on SIGTERM kube-apiserver
        waits up to 60s for clients' open watch connections (controller manager, scheduler, an
        extender) before it exits. ``graceful=True`` sends SIGTERM and waits up to 70s.
        """
        if graceful:
            self._terminate("kube-apiserver", grace=70.0)
        else:
            self._terminate("kube-apiserver", grace=0.0, sig=signal.SIGKILL)
        if self._api is not None:
            self._api.close()

    def restart_apiserver(self, *, graceful: bool = False) -> None:
        """Stop (see :meth:`stop_apiserver`) and start kube-apiserver again on the same port."""
        self.log(f"[controlplane] restarting kube-apiserver ({'SIGTERM' if graceful else 'SIGKILL'})")
        self.stop_apiserver(graceful=graceful)
        self.start_apiserver()

    def _start_controller_manager(self) -> None:
        assert self.pki is not None
        kubeconfig = str(self._kcm_kubeconfig)
        comp = self._spawn("kube-controller-manager", [
            str(self.bin_dir / "kube-controller-manager"),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.kcm_port}",
            f"--tls-cert-file={self.serving.cert}",
            f"--tls-private-key-file={self.serving.key}",
            # No kubelets: nobody heartbeats, so the node lifecycle controller would taint every
            # node NotReady/unreachable and evict its pods.
            "--controllers=*,-node-lifecycle-controller",
            "--leader-elect=false",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={self.pki.sa_key}",
            f"--root-ca-file={self.pki.ca.cert}",
            f"--cluster-signing-cert-file={self.pki.ca.cert}",
            f"--cluster-signing-key-file={self.pki.ca.key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--kube-api-qps=500",
            "--kube-api-burst=1000",
            *_gates_args(self.feature_gates),
            "--profiling=false",
            "--v=1",
        ])  # fmt: skip

        def default_sa_exists() -> bool:
            # The ServiceAccount admission plugin rejects pods until this exists.
            status, _ = self.api.request_raw("GET", "/api/v1/namespaces/default/serviceaccounts/default")
            return status == 200

        self._wait_ready(comp, default_sa_exists)

    def start_scheduler(self, config: Mapping[str, Any] | None = None, *, timeout: float | None = None,
                        name: str = "kube-scheduler") -> None:
        """Start kube-scheduler with ``config`` (a KubeSchedulerConfiguration as a dict).

        Filled in unless already present: ``clientConnection.kubeconfig`` (always overwritten: the
        scheduler's own identity ``system:kube-scheduler``), ``clientConnection.qps/burst`` (500/1000)
        and ``leaderElection.leaderElect`` (false). Waits for the scheduler's ``/readyz``. ``name``
        other than ``kube-scheduler`` runs a further scheduler beside it (its own port and log
        ``<name>.log``; give it profiles with their own ``schedulerName``).
        """
        self._claim(name)
        port = self._scheduler_ports.setdefault(name, free_ports(1)[0])
        cfg: dict[str, Any] = copy.deepcopy(dict(config if config is not None else DEFAULT_SCHEDULER_CONFIG))
        client_connection = cfg.setdefault("clientConnection", {})
        client_connection["kubeconfig"] = str(self._scheduler_kubeconfig)
        client_connection.setdefault("qps", 500)
        client_connection.setdefault("burst", 1000)
        cfg.setdefault("leaderElection", {}).setdefault("leaderElect", False)
        self._scheduler_runs += 1
        cfg_path = self.workdir / f"scheduler-config-{self._scheduler_runs}.yaml"
        cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        kubeconfig = str(self._scheduler_kubeconfig)
        comp = self._spawn(name, [
            str(self.bin_dir / "kube-scheduler"),
            f"--config={cfg_path}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--tls-cert-file={self.serving.cert}",
            f"--tls-private-key-file={self.serving.key}",
            *_gates_args(self.scheduler_feature_gates),
            "--profiling=false",
            "--v=2",
        ])  # fmt: skip
        ctx = self._ssl_context(None)

        def ready() -> bool:
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=5)
            try:
                conn.request("GET", "/readyz")
                resp = conn.getresponse()
                return resp.status == 200 and resp.read().strip() == b"ok"
            finally:
                conn.close()

        self._wait_ready(comp, ready, timeout)

    def stop_scheduler(self, name: str = "kube-scheduler") -> None:
        """Stop kube-scheduler (or the scheduler started as ``name``) if it runs (SIGTERM, then SIGKILL)."""
        self._terminate(name)

    def kill_scheduler(self, name: str = "kube-scheduler") -> None:
        """SIGKILL kube-scheduler (or the scheduler started as ``name``), as a crash would, and reap it."""
        self._terminate(name, grace=0.0, sig=signal.SIGKILL)

    def start_component(self, name: str, argv: Sequence[str], ready: Callable[[], bool] | None = None, *,
                        env: Mapping[str, str] | None = None, timeout: float | None = None) -> Path:
        """Run a further process beside the control plane (e.g. kwok, see ``hack/kwok_harness.py``).

        It gets what the control plane's own components get: its own process group, the work
        directory as cwd, its output in ``<workdir>/<name>.log`` (returned), the watchdog's SIGKILL if
        the owner dies, and a stop before the API server's in :meth:`stop`. ``env`` is merged over
        ``os.environ``. When ``ready`` is given it is polled until true (the process exiting or
        ``timeout``, default ``start_timeout``, stops it and raises :class:`ControlPlaneError`).
        """
        self._claim(name)
        comp = self._spawn(name, list(argv), env)
        if ready is not None:
            self._wait_ready(comp, ready, timeout)
        return comp.log_path

    def stop_component(self, name: str, *, grace: float = 10.0) -> None:
        """Stop a process started with :meth:`start_component` if it runs (SIGTERM, SIGKILL after ``grace``)."""
        self._terminate(name, grace=grace)

    def is_running(self, component: str) -> bool:
        comp = self._components.get(component)
        return comp is not None and comp.running

    def log_path(self, component: str) -> Path:
        """``<workdir>/<component>.log`` (every restart appends to the same file)."""
        return self.workdir / f"{component}.log"

    def stop(self) -> None:
        """Stop every component (process groups; SIGTERM, SIGKILL after 10s) and clean up. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        # Clients first, so that kube-apiserver has no open watches and exits at once on SIGTERM.
        servers = ("kube-apiserver", "etcd")
        for name in [*(n for n in self._components if n not in servers), *servers]:
            self._terminate(name, grace=5.0)
        for name in list(self._components):
            self._terminate(name)
        if self._api is not None:
            self._api.close()
        if self._watchdog is not None:
            self._watchdog.close()
        with _LIVE_LOCK:
            _LIVE.discard(self)
        if self._own_workdir and not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)
            if self._started:
                self.log("[controlplane] stopped")
        elif self._started:
            self.log(f"[controlplane] stopped; files kept in {self.workdir}")

    # ---- conveniences ----------------------------------------------------------------------------

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl as admin; text output captured. Raises :class:`KubectlError` if ``check``."""
        argv = [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args]
        proc = subprocess.run(
            argv,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=None if input is not None else subprocess.DEVNULL,
            check=False,
        )
        if check and proc.returncode != 0:
            raise KubectlError(proc.returncode, argv, proc.stdout, proc.stderr)
        return proc

    def user_kubeconfig(self, user: str, groups: Sequence[str] = (), *, name: str | None = None) -> str:
        """A kubeconfig with a fresh client certificate for ``user`` in ``groups`` (for RBAC checks)."""
        assert self.pki is not None
        slug = name or "user-" + "".join(c if c.isalnum() else "-" for c in user)
        pair = self.pki.issue(slug, user, organizations=groups)
        path = self.workdir / f"{slug}.kubeconfig"
        return str(write_kubeconfig(path, self.server, self.pki.ca.cert, user=user, client=pair))

    def service_account_kubeconfig(self, namespace: str, name: str, *, duration: str = "24h") -> str:
        """A kubeconfig with a TokenRequest token for ServiceAccount ``namespace/name`` (must exist)."""
        assert self.pki is not None
        token = self.kubectl("create", "token", name, "-n", namespace, f"--duration={duration}").stdout.strip()
        path = self.workdir / f"sa-{namespace}-{name}.kubeconfig"
        user = f"system:serviceaccount:{namespace}:{name}"
        return str(write_kubeconfig(path, self.server, self.pki.ca.cert, user=user, token=token, namespace=namespace))

    def add_nodes(
        self,
        count: int,
        cpu: str = "4",
        memory: str = "16Gi",
        pods: str = "110",
        labels: Mapping[str, str] | None = None,
        prefix: str = "node-",
        *,
        resources: Mapping[str, str] | None = None,
        taints: Sequence[Mapping[str, str]] | None = None,
        start: int | None = None,
        workers: int = 32,
    ) -> list[str]:
        """Create ``count`` Ready nodes named ``<prefix><i>`` and return their names.

        Numbering continues where the previous call with the same prefix stopped unless ``start`` is
        given. ``resources`` adds capacity entries (e.g. ``{"nvidia.com/gpu": "8"}``). Each node is
        a POST plus a merge PATCH of ``/status`` (create ignores status), sent over ``workers``
        parallel keep-alive connections.
        """
        first = self._node_index.get(prefix, 0) if start is None else start
        names = [f"{prefix}{i}" for i in range(first, first + count)]
        self._node_index[prefix] = max(self._node_index.get(prefix, 0), first + count)
        capacity = {"cpu": cpu, "memory": memory, "pods": pods, **(resources or {})}
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [
                {
                    "type": "Ready", "status": "True", "reason": "KubeletReady",
                    "message": "fake node created by hack/controlplane.py",
                    "lastHeartbeatTime": now, "lastTransitionTime": now,
                }
            ],
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
        }  # fmt: skip

        def create(name: str) -> None:
            node: dict[str, Any] = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {
                        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64", **(labels or {}),
                    },
                },
                "spec": {"taints": [dict(t) for t in taints]} if taints else {},
            }  # fmt: skip
            client.request("POST", "/api/v1/nodes", node)
            client.request(
                "PATCH", f"/api/v1/nodes/{name}/status", {"status": status},
                content_type="application/merge-patch+json",
            )  # fmt: skip

        assert self.pki is not None
        client = ApiClient(self.apiserver_port, self._ssl_context(self._admin_pair))
        t0 = time.monotonic()
        try:
            with ThreadPoolExecutor(max_workers=max(1, min(workers, count))) as pool:
                list(pool.map(create, names))
        finally:
            client.close()
        if count >= 100:
            self.log(f"[controlplane] created {count} nodes in {time.monotonic() - t0:.1f}s")
        return names

    def delete_node(self, name: str, *, missing_ok: bool = False) -> None:
        """Delete Node ``name`` (pods bound to it are left to the pod GC controller)."""
        try:
            self.request("DELETE", f"/api/v1/nodes/{name}")
        except ApiError as exc:
            if not (missing_ok and exc.status == 404):
                raise

    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None, *, timeout: float = 30.0) -> None:
        """Create a namespace and wait for its ``default`` ServiceAccount (pods are rejected before it)."""
        self.request(
            "POST", "/api/v1/namespaces", {"metadata": {"name": name, "labels": dict(labels or {})}}
        )  # fmt: skip

        def has_sa() -> bool:
            status, _ = self.api.request_raw("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")
            return status == 200

        wait_for(has_sa, timeout=timeout, what=f"ServiceAccount {name}/default")

    def metrics(self, component: str = "kube-apiserver") -> str:
        """The Prometheus text of ``/metrics`` of a running component, fetched as admin.

        E.g. ``kubernetes_feature_enabled{name="GangScheduling",stage="ALPHA"} 0`` shows a gate's state.
        """
        ports = {
            "kube-apiserver": self.apiserver_port,
            "kube-controller-manager": self.kcm_port,
            "kube-scheduler": self.scheduler_port,
        }
        if component not in ports:
            raise ValueError(f"no metrics endpoint for {component!r}; one of {sorted(ports)}")
        conn = http.client.HTTPSConnection(
            "127.0.0.1", ports[component], context=self._ssl_context(self._admin_pair), timeout=30
        )
        try:
            conn.request("GET", "/metrics")
            resp = conn.getresponse()
            body = resp.read().decode("utf-8", "replace")
        finally:
            conn.close()
        if resp.status != 200:
            raise ApiError("GET", f"{component}/metrics", resp.status, body)
        return body


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------


def _parse_gate(text: str) -> tuple[str, bool]:
    name, sep, value = text.partition("=")
    if not sep or value.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected NAME=true|false, got {text!r}")
    return name, value.lower() == "true"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start etcd + kube-apiserver + kube-controller-manager until Ctrl-C/SIGTERM")
    up.add_argument("--bin-dir", help="directory with the binaries (default: ask hack/build-k8s.sh)")
    up.add_argument("--workdir", help="directory for certificates, data and logs (default: a temp dir)")
    up.add_argument("--keep", action="store_true", help="keep the work directory after shutdown")
    up.add_argument("--nodes", type=int, default=0, help="create this many fake Ready nodes")
    up.add_argument("--feature-gate", type=_parse_gate, action="append", default=[], metavar="NAME=BOOL")
    args = parser.parse_args(argv)

    def err(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    bin_dir = Path(args.bin_dir) if args.bin_dir else find_bin_dir()
    with ControlPlane(bin_dir, args.workdir, feature_gates=dict(args.feature_gate), log=err, keep=args.keep) as plane:
        if args.nodes:
            plane.add_nodes(args.nodes)
        print(plane.kubeconfig, flush=True)
        err(f"[controlplane] export KUBECONFIG={plane.kubeconfig}   (Ctrl-C to stop)")
        while not stop.wait(1.0):
            for name in ("etcd", "kube-apiserver", "kube-controller-manager"):
                if not plane.is_running(name):
                    err(f"[controlplane] {name} died; last lines of its log:\n{tail(plane.log_path(name))}")
                    return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
