"""Settings from flags and environment variables (pure).

Owns: every tunable of the service, its default, its environment variable (``GANG_EXTENDER_<NAME>``),
and validation that reports *all* problems at once. Must not: start anything or read files other
than checking that named paths exist.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from extender.errors import ConfigError
from extender.labelkeys import HOSTNAME, label_key_problem

ENV_PREFIX = "GANG_EXTENDER_"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


@dataclass(frozen=True, slots=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8888
    kubeconfig: str | None = None          # None: in-cluster config, then ~/.kube/config
    cluster_snapshot: str | None = None    # serve from a Kubernetes List file instead of an API server
    gang_timeout_seconds: float = 20.0     # keep below the scheduler's extender httpTimeout
    gang_backoff_seconds: float = 10.0     # first back-off after a gang timeout (doubles, capped at 300 s)
    cache_size: int = 1_000_000            # node verdicts kept over all signatures (~150 B each); 0 disables
    cache_ttl_seconds: float = 300.0       # backstop: entries are refreshed by generation anyway
    max_body_bytes: int = 4 * 2**20        # filter/prioritize body, NodeNames form (docs/reliability.md)
    threads: int = 4096                    # gunicorn gthread threads: >= bind requests held at once
    bind_parallelism: int = 32             # API binds in flight at once, over every released gang
    log_level: str = "INFO"
    record_file: str | None = None         # append every request and reply as JSONL (off by default)
    record_max_bytes: int = 256 * 2**20    # recording stops when the file reaches this size
    release_journal: str | None = None     # write releases down first; finish interrupted ones on restart
    discovery_interval_seconds: float = 30.0  # how often served group APIs are re-discovered
    group_status: str = "on"               # write PodGroup status (condition / phase): on or off
    explain_publish_seconds: float = 15.0  # GangState Events (kubectl gang explain): a round this often; 0: off
    tls_cert_file: str | None = None       # serve HTTPS with this certificate (PEM, chain after the leaf)
    tls_key_file: str | None = None        # ... and this private key (PEM)
    tls_client_ca_file: str | None = None  # require client certificates signed by this CA (PEM bundle)
    scheduler_http_timeout_seconds: float = 30.0  # kube-scheduler's extenders[].httpTimeout
    bind_answer_margin_seconds: float = 1.0  # a held bind is answered this long before that timeout
    scheduler_names: str = "default-scheduler,gang-scheduler"  # pods bind accepts (spec.schedulerName)
    watch_stale_seconds: float = 10.0      # a core watch unhealthy this long: verbs answer Error
    leader_election: str = "off"           # on: replicas elect a leader on a Lease that holds the release intents
    lease_namespace: str = ""              # "": the pod's service-account namespace (outside a pod: default)
    lease_name: str = "gang-extender"
    lease_duration_seconds: float = 15.0   # a standby takes an unrenewed Lease after this long
    lease_renew_deadline_seconds: float = 10.0  # the leader stops acting this long after its last renewal
    lease_retry_period_seconds: float = 2.0     # renewal period, and a standby's retry period
    release_intents_max_bytes: int = 128 * 1024  # open releases kept on the Lease, at most (an annotation)
    client_timeout_seconds: float = 5.0    # a request must arrive, and its reply be taken, within this
    max_full_nodes_body_bytes: int = 0     # filter/prioritize body in the full Nodes form; 0: that form is refused
    request_buffer_bytes: int = 16 * 2**20  # request bytes held at once over all connections
    topology_levels: str = ""              # node label keys, widest first, for preferred topology fallback
    max_wait_seconds: float = 300.0        # the head gang's wait before capacity drains for it
    max_evictions_per_minute: int = 60     # preemption victims evicted at most this often (a token bucket)
    preemption: str = "on"                 # gang-aware preemption by the head gang: on or off
    bind_mode: str = "barrier"             # barrier: gang-extender binds; filter-gated: another binder does
    quorum_wait_seconds: float = 0.1       # a gang's first filter waits this long for members being created; 0: off
    metrics_address: str = ""              # HOST:PORT of a listener serving /metrics only; "": none

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


_HELP = {
    "host": "address to listen on",
    "port": "port to listen on",
    "metrics_address": "HOST:PORT (an IPv6 host in brackets) of a second listener that serves GET /metrics and "
                       "nothing else (no verbs, no explain), plain HTTP, at most 4 scrapes at once and one "
                       "collection a second, so Prometheus "
                       "can scrape the pod IP while the verbs stay on --host; empty: /metrics only on --host:--port",
    "kubeconfig": "kubeconfig file (default: in-cluster config, then ~/.kube/config)",
    "cluster_snapshot": "serve without an API server from this Kubernetes List (YAML or JSON) of Nodes, "
                        "Pods and group objects; binds change only the in-memory state",
    "gang_timeout_seconds": "a gang's attempt (its admission and reservation) times out this long after its last "
                            "new member reached the barrier (or its admission); it may exceed the scheduler's "
                            "httpTimeout: single held binds are answered with a retry before that and keep their "
                            "place (per-gang override: annotation gang-extender.io/timeout-seconds or PodGroup "
                            "spec.scheduleTimeoutSeconds)",
    "gang_backoff_seconds": "first back-off of a gang after a timeout; doubles per timeout, max 300 s",
    "max_wait_seconds": "how long the first gang in the admission order (highest priority, then longest waiting) "
                        "may wait before capacity that frees up on the nodes of its plan is reserved for it (a "
                        "draining reservation); per gang: the gang-extender.io/max-wait-seconds annotation",
    "max_evictions_per_minute": "most preemption victims evicted (Eviction API) in any minute, a token bucket "
                                "holding this many: a gang's victims are evicted all at once or not at all, so "
                                "a gang needing more victims than this is never preempted for",
    "preemption": "on: the first gang in the admission order, when it does not fit on free capacity, evicts "
                  "lower-priority gangs (whole) and pods through the Eviction API, within PodDisruptionBudgets "
                  "and --max-evictions-per-minute; off: gang-extender never evicts anything",
    "bind_mode": "barrier: gang-extender is kube-scheduler's binder (bindVerb) and holds each member's bind until "
                 "its gang's quorum can be bound together (never a partial gang); filter-gated: another binder "
                 "binds (no bindVerb: kube-scheduler's own, or another extender's), members pass filter only once "
                 "their gang is admitted, each to one reserved place; the one mode where a gang can be left partly "
                 "bound: with no bind-time barrier, a member whose bind fails after others bound cannot be undone "
                 "(told, then the rest planned again; docs/deploy.md)",
    "cache_size": "filter cache capacity in node verdicts summed over all signatures (an entry weighs one per "
                  "node it knows; ~150 bytes each); 0 disables the cache",
    "cache_ttl_seconds": "backstop lifetime of a filter cache entry",
    "max_body_bytes": "largest filter/prioritize body in the NodeNames form (nodeCacheCapable: true; 413 above); "
                      "bind bodies are capped at 16 KiB, bodies of other paths at 16 KiB",
    "threads": "worker threads; each bind held at a gang barrier occupies one",
    "bind_parallelism": "API bind calls in flight at once, shared by every gang being released",
    "log_level": "one of " + ", ".join(LOG_LEVELS),
    "record_file": "append every request and reply (verb, arrival, status, latency, bodies) to this JSONL file, "
                   "for replay load tests; off by default",
    "record_max_bytes": "stop recording when the file reaches this size",
    "release_journal": "file where each gang release (members and nodes) is written before its first Binding; "
                       "on restart the extender binds the rest of a release a crash interrupted before it "
                       "answers requests (keep it on a volume that survives container restarts, e.g. an "
                       "emptyDir); off by default",
    "tls_cert_file": "serve HTTPS with this certificate (PEM; intermediates after the leaf); needs --tls-key-file",
    "tls_key_file": "private key of --tls-cert-file (PEM, unencrypted)",
    "tls_client_ca_file": "accept only clients whose certificate this CA bundle signed (kube-scheduler's client "
                          "certificate: extenders[].tlsConfig.certFile); needs --tls-cert-file",
    "discovery_interval_seconds": "how often to re-discover which group APIs (Workload, PodGroup, the "
                                  "PodGroup CRD) are served, so CRDs installed or removed later are followed",
    "group_status": "on: write the scheduling status of gangs the extender decides (1.36+ PodGroup condition, "
                    "scheduler-plugins PodGroup status.phase); off: never write group status",
    "explain_publish_seconds": "every this many seconds the leader publishes what changed in each gang's "
                               "explanation (state, members, reservation, shortfall, place in the order) as a "
                               "GangState Event on its group object (annotation gangs: on its first member), "
                               "read by kubectl gang explain; an unchanged waiting gang is written again every "
                               "30 minutes; 0: never",
    "scheduler_http_timeout_seconds": "kube-scheduler's extenders[].httpTimeout for this extender: every bind held "
                                      "at a gang barrier is answered before it, counted from the request's arrival",
    "bind_answer_margin_seconds": "how long before --scheduler-http-timeout-seconds a held bind is answered with a "
                                  "retry; a gang is released only while each of its holds has at least this long "
                                  "left, so every Binding is sent while kube-scheduler still waits for it",
    "scheduler_names": "comma-separated spec.schedulerName values whose pods bind accepts (the profiles that call "
                       "this extender); a bind for any other pod is refused",
    "watch_stale_seconds": "when the node or pod watch has been failing this long, the verbs answer Error (held "
                           "binds too) and /readyz is 503 until it has listed again",
    "leader_election": "on: replicas elect a leader on a coordination.k8s.io Lease (only the leader acts) and "
                       "each gang release is written on that Lease before its first Binding; off: one replica",
    "lease_namespace": "namespace of the leader election Lease (default: the pod's service-account namespace)",
    "lease_name": "name of the leader election Lease",
    "lease_duration_seconds": "a standby takes the Lease once its holder has not renewed it for this long "
                              "(whole seconds; greater than the renew deadline)",
    "lease_renew_deadline_seconds": "the leader stops acting when it could not renew the Lease for this long",
    "lease_retry_period_seconds": "how often the leader renews the Lease and a standby tries to take it",
    "release_intents_max_bytes": "largest annotation of open releases on the Lease (the API server allows 256 KiB "
                                 "of annotations per object); a release that would exceed it is not started: "
                                 "its holds are answered with a retry",
    "quorum_wait_seconds": "the first filter of a gang whose group is defined but whose pods are still being created "
                           "waits up to this long for the rest of its quorum instead of turning the member away "
                           "(an unschedulable attempt and a back-off), once per gang per minute; kube-scheduler's "
                           "scheduling cycle waits as long. 0: never wait. At most 1 s and a tenth of "
                           "scheduler-http-timeout-seconds",
    "client_timeout_seconds": "a connection's request (head and body) must arrive within this many seconds of its "
                              "first byte (of its accept for a new connection), and a reply must be taken by the "
                              "client within it; otherwise the connection is closed",
    "max_full_nodes_body_bytes": "largest filter/prioritize body in the full Nodes form (nodeCacheCapable: false); "
                                 "0 refuses that form with a 400",
    "request_buffer_bytes": "request bytes held at once over all connections, from the first byte read to the end "
                            "of the handler, then the reply's bytes the client has not taken (bounds the memory "
                            "bodies can take; up to a quarter is kept for small requests, such as kube-scheduler's); "
                            "at least every body cap",
    "topology_levels": "comma-separated node label keys from the widest topology level to the narrowest (e.g. "
                       "topology.kubernetes.io/zone,example.com/block,example.com/rack): a gang with a preferred "
                       "topology key that no domain of that level can hold is placed in one domain of the next "
                       "wider level, then across domains; kubernetes.io/hostname is always the narrowest level; "
                       "empty: only the constraint's own key",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register one ``--flag`` per setting; defaults stay None so env vars can fill them."""
    for name in Settings.field_names():
        flag = "--" + name.replace("_", "-")
        env = ENV_PREFIX + name.upper()
        default = getattr(Settings(), name)
        parser.add_argument(flag, dest=name, default=None, metavar=name.split("_")[-1].upper(),
                            help=f"{_HELP[name]} [env {env}; default {default}]")


def load(args: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from flags (highest precedence), then environment, then defaults."""
    environ = os.environ if environ is None else environ
    args = args or {}
    defaults = Settings()
    problems: list[str] = []
    values: dict[str, Any] = {}
    for name in Settings.field_names():
        default = getattr(defaults, name)
        env = ENV_PREFIX + name.upper()
        raw = args.get(name)
        source = "--" + name.replace("_", "-")
        if raw is None and environ.get(env) not in (None, ""):
            raw, source = environ[env], env
        if raw is None:
            values[name] = default
            continue
        kind = type(default) if default is not None else str
        try:
            values[name] = kind(raw) if kind is not str else str(raw)
        except (TypeError, ValueError):
            problems.append(f"{source}: expected {'an integer' if kind is int else 'a number'}, got {raw!r}")
            values[name] = default
    settings = Settings(**values)
    problems += validate(settings)
    if problems:
        raise ConfigError(problems)
    return settings


def scheduler_names(settings: Settings) -> frozenset[str]:
    """The scheduler names of ``--scheduler-names`` (empty entries dropped)."""
    return frozenset(name.strip() for name in settings.scheduler_names.split(",") if name.strip())


def metrics_address(settings: Settings) -> tuple[str, int] | None:
    """(host, port) of ``--metrics-address`` (an IPv6 host without its brackets); None when unset.
    Raises ValueError when it is not HOST:PORT."""
    if not settings.metrics_address:
        return None
    host, colon, port = settings.metrics_address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError("an IPv6 host goes in brackets, e.g. [::]:9090")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("expected HOST:PORT with a port of 1..65535")
    return host, int(port)


def topology_levels(settings: Settings) -> tuple[str, ...]:
    """The label keys of ``--topology-levels``, widest first (empty entries dropped)."""
    return tuple(key.strip() for key in settings.topology_levels.split(",") if key.strip())


def _topology_problems(settings: Settings) -> list[str]:
    problems = []
    levels = topology_levels(settings)
    for index, key in enumerate(levels):
        problem = label_key_problem(key)
        if problem is not None:
            problems.append(f"topology-levels: {problem}")
        elif key in levels[:index]:
            problems.append(f"topology-levels: {key!r} is listed twice")
    if HOSTNAME in levels[:-1]:
        problems.append(f"topology-levels: {HOSTNAME} is the narrowest level (one node) and must come last")
    return problems


def validate(settings: Settings) -> list[str]:
    """Every problem with ``settings``; empty when valid."""
    return (_value_problems(settings) + _file_problems(settings) + _lease_problems(settings)
            + _serving_problems(settings) + _topology_problems(settings))


def _value_problems(settings: Settings) -> list[str]:
    """Numbers out of range and unknown choices."""
    problems = []
    if not 0 < settings.port < 65536:
        problems.append(f"port must be 1..65535, got {settings.port}")
    if not settings.gang_timeout_seconds > 0:
        problems.append(f"gang-timeout-seconds must be > 0, got {settings.gang_timeout_seconds}")
    elif not math.isfinite(settings.gang_timeout_seconds):  # an infinite wait overflows Event.wait
        problems.append(f"gang-timeout-seconds must be finite, got {settings.gang_timeout_seconds}")
    if not 0 <= settings.max_wait_seconds < float("inf"):  # also rejects nan
        problems.append(f"max-wait-seconds must be >= 0 and finite, got {settings.max_wait_seconds}")
    if not settings.gang_backoff_seconds >= 0:  # also rejects nan
        problems.append(f"gang-backoff-seconds must be >= 0, got {settings.gang_backoff_seconds}")
    if settings.max_evictions_per_minute <= 0:
        problems.append(f"max-evictions-per-minute must be > 0, got {settings.max_evictions_per_minute}")
    if settings.cache_size < 0:
        problems.append(f"cache-size must be >= 0, got {settings.cache_size}")
    if not settings.cache_ttl_seconds > 0:
        problems.append(f"cache-ttl-seconds must be > 0, got {settings.cache_ttl_seconds}")
    if settings.max_body_bytes < 1024:
        problems.append(f"max-body-bytes must be >= 1024, got {settings.max_body_bytes}")
    if not 1 <= settings.threads <= 10000:
        problems.append(f"threads must be 1..10000, got {settings.threads}")
    if not 1 <= settings.bind_parallelism <= 256:
        problems.append(f"bind-parallelism must be 1..256, got {settings.bind_parallelism}")
    if settings.log_level.upper() not in LOG_LEVELS:
        problems.append(f"log-level must be one of {', '.join(LOG_LEVELS)}, got {settings.log_level!r}")
    if settings.record_max_bytes < 1024:
        problems.append(f"record-max-bytes must be >= 1024, got {settings.record_max_bytes}")
    if not 1 <= settings.discovery_interval_seconds <= 3600:  # also rejects nan
        problems.append(f"discovery-interval-seconds must be 1..3600, got {settings.discovery_interval_seconds}")
    if not 1 <= settings.scheduler_http_timeout_seconds <= 3600:  # also rejects nan
        problems.append("scheduler-http-timeout-seconds must be 1..3600, got "
                        f"{settings.scheduler_http_timeout_seconds}")
    elif not 0 < settings.bind_answer_margin_seconds <= settings.scheduler_http_timeout_seconds / 2:
        problems.append("bind-answer-margin-seconds must be > 0 and at most half of scheduler-http-timeout-seconds, "
                        f"got {settings.bind_answer_margin_seconds}")
    if not 0 <= settings.quorum_wait_seconds <= min(1.0, settings.scheduler_http_timeout_seconds / 10):
        problems.append("quorum-wait-seconds must be 0..1 and at most a tenth of scheduler-http-timeout-seconds, "
                        f"got {settings.quorum_wait_seconds}")
    if not scheduler_names(settings):
        problems.append("scheduler-names must name at least one scheduler")
    if not 1 <= settings.watch_stale_seconds <= 3600:  # also rejects nan
        problems.append(f"watch-stale-seconds must be 1..3600, got {settings.watch_stale_seconds}")
    if settings.bind_mode not in ("barrier", "filter-gated"):
        problems.append(f"bind-mode must be barrier or filter-gated, got {settings.bind_mode!r}")
    if settings.preemption not in ("on", "off"):
        problems.append(f"preemption must be on or off, got {settings.preemption!r}")
    if settings.group_status not in ("on", "off"):
        problems.append(f"group-status must be on or off, got {settings.group_status!r}")
    if not (settings.explain_publish_seconds == 0 or 1 <= settings.explain_publish_seconds <= 3600):
        problems.append(f"explain-publish-seconds must be 0 or 1..3600, got {settings.explain_publish_seconds}")
    return problems


def _file_problems(settings: Settings) -> list[str]:
    """Files to write whose directory is missing or not writable, files to read that do not exist, TLS
    settings given without the ones they need."""
    problems = []
    for name in ("record_file", "release_journal"):
        path = getattr(settings, name)
        if path is None:
            continue
        parent = os.path.dirname(os.path.abspath(path))
        flag = name.replace('_', '-')
        if not os.path.isdir(parent):
            problems.append(f"{flag}: directory {parent!r} does not exist")
        elif os.path.exists(path) and not os.access(path, os.R_OK | os.W_OK):
            problems.append(f"{flag}: {path!r} cannot be read and written")
        elif not os.path.exists(path) and not os.access(parent, os.W_OK):
            problems.append(f"{flag}: directory {parent!r} is not writable")
    if (settings.tls_cert_file is None) != (settings.tls_key_file is None):
        given, missing = ("tls-cert-file", "tls-key-file") if settings.tls_key_file is None else (
            "tls-key-file", "tls-cert-file")
        problems.append(f"{given} needs {missing} too (HTTPS takes a certificate and its key)")
    if settings.tls_client_ca_file is not None and settings.tls_cert_file is None:
        problems.append("tls-client-ca-file needs tls-cert-file and tls-key-file (client certificates are "
                        "checked only over HTTPS)")
    for name in ("kubeconfig", "cluster_snapshot", "tls_cert_file", "tls_key_file", "tls_client_ca_file"):
        path = getattr(settings, name)
        if path is not None and not os.path.isfile(path):
            problems.append(f"{name.replace('_', '-')}: no such file {path!r}")
    return problems


_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def _lease_problems(settings: Settings) -> list[str]:
    """The leader election settings (checked as ``lease.ElectionConfig`` does: the leader must stop
    acting before a standby may take over)."""
    problems = []
    if settings.leader_election not in ("on", "off"):
        problems.append(f"leader-election must be on or off, got {settings.leader_election!r}")
    elif settings.leader_election == "on" and settings.release_journal:
        problems.append("release-journal and leader-election on exclude each other: with leader election the "
                        "releases are written on the leader's Lease")
    if settings.lease_namespace and not (len(settings.lease_namespace) <= 63
                                         and _DNS_LABEL.fullmatch(settings.lease_namespace)):
        problems.append(f"lease-namespace must be a namespace name, got {settings.lease_namespace!r}")
    if not (len(settings.lease_name) <= 253 and _DNS_SUBDOMAIN.fullmatch(settings.lease_name)):
        problems.append(f"lease-name must be a DNS subdomain name, got {settings.lease_name!r}")
    duration, deadline, retry = (settings.lease_duration_seconds, settings.lease_renew_deadline_seconds,
                                 settings.lease_retry_period_seconds)
    if not all(0 < value <= 3600 for value in (duration, deadline, retry)):  # also rejects nan
        problems.append(f"lease-duration-seconds, lease-renew-deadline-seconds and lease-retry-period-seconds "
                        f"must be in (0, 3600], got {duration}, {deadline}, {retry}")
    else:
        if duration != int(duration):
            problems.append(f"lease-duration-seconds must be whole seconds, got {duration}")
        if not duration > deadline:
            problems.append(f"lease-duration-seconds ({duration}) must be greater than lease-renew-deadline-seconds "
                            f"({deadline}): the leader must stop acting before a standby may take over")
        if not deadline > 1.2 * retry:
            problems.append(f"lease-renew-deadline-seconds ({deadline}) must be greater than 1.2 x "
                            f"lease-retry-period-seconds ({retry})")
    if not 1024 <= settings.release_intents_max_bytes <= 240 * 1024:
        problems.append(f"release-intents-max-bytes must be 1024..{240 * 1024}, got "
                        f"{settings.release_intents_max_bytes}")
    return problems


def _serving_problems(settings: Settings) -> list[str]:
    problems = []
    try:
        metrics = metrics_address(settings)
    except ValueError as exc:
        problems.append(f"metrics-address: {exc}, got {settings.metrics_address!r}")
    else:
        if metrics is not None and metrics[1] == settings.port:
            problems.append(f"metrics-address: its port must differ from --port ({settings.port}): the verbs "
                            "must not be served where metrics are")
    if not 0.1 <= settings.client_timeout_seconds <= 300:  # also rejects nan
        problems.append(f"client-timeout-seconds must be 0.1..300, got {settings.client_timeout_seconds}")
    if settings.max_full_nodes_body_bytes != 0 and settings.max_full_nodes_body_bytes < 1024:
        problems.append(f"max-full-nodes-body-bytes must be 0 (refused) or >= 1024, got "
                        f"{settings.max_full_nodes_body_bytes}")
    largest = max(settings.max_body_bytes, settings.max_full_nodes_body_bytes)
    if settings.request_buffer_bytes < largest:
        problems.append(f"request-buffer-bytes must be at least the largest body cap ({largest}), got "
                        f"{settings.request_buffer_bytes}")
    return problems
