"""Prometheus metrics on a per-app registry.

Owns: request counters and latency histograms (observed by the routes), and a collector that reads
the counters the core keeps as plain integers (cache, ledger, mirror, watches, events, evictions) at scrape
time, so the core never imports prometheus_client. Must not: change any state it reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, Info
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from extender import native
from extender.engine.ports import EVICTION_OUTCOMES

if TYPE_CHECKING:
    from extender.wiring.runtime import Runtime

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class Metrics:
    def __init__(self, runtime: Runtime) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("gang_extender_requests", "Extender requests by verb and outcome",
                                ["verb", "outcome"], registry=self.registry)
        self.latency = Histogram("gang_extender_request_seconds", "Extender request latency by verb",
                                 ["verb"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.cpu = Counter("gang_extender_request_cpu_seconds",
                           "CPU time of the request's own thread in gang-extender's handler, by verb (a held "
                           "bind's wait costs none; a released gang's Bindings count in the bind pool, not here)",
                           ["verb"], registry=self.registry)
        hot_path = native.hot_path()
        Info("gang_extender_build", "The running build: package version, and whether the hot-path modules run "
             "compiled, interpreted or partial (some compiled: a broken install), with how many are native",
             registry=self.registry).info({"version": native.package_version(), "hot_path": hot_path.build,
                                           "native_modules": str(len(hot_path.native))})
        self.registry.register(_StateCollector(runtime))


class _StateCollector:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def collect(self) -> Iterator[Metric]:
        rt = self.runtime
        yield from _filter_metrics(rt)
        yield from _gang_metrics(rt)
        yield from _mirror_metrics(rt)
        yield from _writer_metrics(rt)
        yield from _eviction_metrics(rt)


def _filter_metrics(rt: Runtime) -> Iterator[Metric]:
    """The filter cache's counters and the steered filters."""
    stats = rt.cache.stats()
    for name, value, text in (
        ("hits", stats["hits"], "Filter requests answered from a cached signature entry"),
        ("misses", stats["misses"], "Signable filter requests with no cached entry"),
        ("unsignable", stats["unsignable"], "Filter requests whose pod cannot share results"),
        ("refreshed_nodes", stats["refreshed_nodes"], "Node verdicts recomputed in cached entries"),
    ):
        yield CounterMetricFamily(f"gang_extender_filter_cache_{name}", text, value=value)
    yield CounterMetricFamily("gang_extender_filter_steered",
                              "Filter requests of gang members answered with the nodes of their gang's "
                              "reservation, without a cache lookup", value=rt.engine.steered)
    yield CounterMetricFamily("gang_extender_filter_unseen_pods",
                              "Filter requests of gang members the pod watch had not delivered yet (each waited up to "
                              "0.1 s for it; one still not seen was told to come back and woken when it came)",
                              value=rt.engine.unseen)
    waits = CounterMetricFamily("gang_extender_filter_quorum_waits",
                                "First filters of gangs still being created that waited (--quorum-wait-seconds, once "
                                "per gang) for the rest of their quorum, by outcome: met (the members came: the gate "
                                "was asked again), timed_out, or over_budget (not waited: waits took a quarter of "
                                "the time)",
                                labels=["outcome"])
    for outcome, count in rt.engine.quorum_waits.items():
        waits.add_metric([outcome], count)
    yield waits
    flushes = CounterMetricFamily("gang_extender_filter_cache_flushes",
                                  "Cache entries dropped, by reason", labels=["reason"])
    for reason in rt.cache.REASONS:
        flushes.add_metric([reason], stats["flushes"].get(reason, 0))
    yield flushes
    yield GaugeMetricFamily("gang_extender_filter_cache_entries", "Signatures cached",
                            value=stats["entries"])


def _gang_metrics(rt: Runtime) -> Iterator[Metric]:
    """The ledger's counters, held binds and their limit, admitted gangs, leadership."""
    for name, value in rt.ledger.view.counters().items():
        yield CounterMetricFamily(f"gang_extender_gangs_{name}", f"Gangs {name.replace('_', ' ')}",
                                  value=value)
    if rt.leadership is not None:
        yield GaugeMetricFamily("gang_extender_leader", "1 while this replica leads (--leader-election on)",
                                value=1 if rt.leadership.is_leader() else 0)
    yield GaugeMetricFamily("gang_extender_held_bind_demand",
                            "Binds admitted gangs may hold at once (held now + reserved members to come)",
                            value=rt.ledger.view.held_demand())
    if rt.ledger.view.max_held_binds is not None:
        yield GaugeMetricFamily("gang_extender_held_bind_limit",
                                "Most binds gangs may hold at once (--threads less headroom)",
                                value=rt.ledger.view.max_held_binds)
    yield GaugeMetricFamily("gang_extender_held_binds", "Bind requests held at gang barriers",
                            value=rt.ledger.view.held_count())
    yield GaugeMetricFamily("gang_extender_admitted_gangs", "Gangs holding a reservation",
                            value=rt.ledger.view.admitted_count())
    waiting, draining, waits = rt.ledger.view.order_stats()
    yield GaugeMetricFamily("gang_extender_waiting_gangs", "Complete gangs waiting for admission, in order",
                            value=waiting)
    yield GaugeMetricFamily("gang_extender_draining_reservations",
                            "Gangs first in the order past their max wait: capacity drains for them", value=draining)
    histogram = HistogramMetricFamily("gang_extender_gang_wait_seconds",
                                      "Seconds from a gang complete to admitted, by gang priority", labels=["priority"])
    for priority, buckets, total in waits:
        histogram.add_metric([str(priority)], buckets, total)
    yield histogram


def _mirror_metrics(rt: Runtime) -> Iterator[Metric]:
    """The mirror's size and rejected objects, and the health of each watch feeding it."""
    yield GaugeMetricFamily("gang_extender_mirror_nodes", "Nodes in the mirror", value=len(rt.mirror.nodes))
    yield GaugeMetricFamily("gang_extender_mirror_pods", "Pods in the mirror", value=rt.mirror.pod_count)
    yield CounterMetricFamily("gang_extender_mirror_rejected_objects", "Objects too malformed to mirror",
                              value=rt.mirror.rejected_objects)
    synced = GaugeMetricFamily("gang_extender_watch_synced", "Watch listed and healthy",
                               labels=["resource"])
    relists = CounterMetricFamily("gang_extender_watch_relists", "Full relists", labels=["resource"])
    errors = CounterMetricFamily("gang_extender_watch_errors", "List/watch failures", labels=["resource"])
    events = CounterMetricFamily("gang_extender_watch_events", "Watch events received (added, modified, deleted)",
                                 labels=["resource"])
    initial = GaugeMetricFamily("gang_extender_watch_initial_sync_seconds",
                                "Seconds from a watch's first list request to its objects in the mirror "
                                "(failed attempts included); absent until it has listed", labels=["resource"])
    for r in rt.reflectors:
        synced.add_metric([r.name], 1 if r.synced.is_set() and r.healthy else 0)
        relists.add_metric([r.name], r.relists)
        errors.add_metric([r.name], r.errors)
        events.add_metric([r.name], r.events)
        if r.initial_sync_seconds is not None:
            initial.add_metric([r.name], r.initial_sync_seconds)
    yield synced
    yield initial
    yield relists
    yield errors
    yield events


def _writer_metrics(rt: Runtime) -> Iterator[Metric]:
    """What the Event, wake-up, quorum-gate and group status writers sent, dropped or failed."""
    events = CounterMetricFamily("gang_extender_events", "Kubernetes Events", labels=["outcome"])
    events.add_metric(["sent"], rt.events.sent)
    events.add_metric(["dropped"], rt.events.dropped)
    events.add_metric(["failed"], rt.events.failed)
    yield events
    wakes = CounterMetricFamily("gang_extender_pod_wakes", "Pending pods nudged to be retried",
                                labels=["outcome"])
    wakes.add_metric(["sent"], rt.waker.sent)
    wakes.add_metric(["dropped"], rt.waker.dropped)
    wakes.add_metric(["failed"], rt.waker.failed)
    yield wakes
    if rt.ungater is not None:
        ungates = CounterMetricFamily("gang_extender_quorum_gates_removed",
                                      "Quorum gates removed from pods whose gang has its quorum", labels=["outcome"])
        ungates.add_metric(["sent"], rt.ungater.sent)
        ungates.add_metric(["dropped"], rt.ungater.dropped)
        ungates.add_metric(["failed"], rt.ungater.failed)
        ungates.add_metric(["skipped"], rt.ungater.skipped)  # not leading: nothing written
        yield ungates
    if rt.status is not None:
        writes = CounterMetricFamily("gang_extender_group_status_writes",
                                     "Group object status writes (PodGroup condition / phase)", labels=["outcome"])
        for outcome, value in sorted(rt.status.counts.items()):
            writes.add_metric([outcome], value)
        yield writes


def _eviction_metrics(rt: Runtime) -> Iterator[Metric]:
    """Preemption victims by eviction outcome, and the PodDisruptionBudgets known."""
    evictions = CounterMetricFamily("gang_extender_evictions", "Preemption victims by eviction outcome",
                                    labels=["outcome"])
    counts = rt.evictor.counts if rt.evictor is not None else {}
    for outcome in EVICTION_OUTCOMES:
        evictions.add_metric([outcome], counts.get(outcome, 0))
    yield evictions
    yield GaugeMetricFamily("gang_extender_disruption_budgets", "PodDisruptionBudgets watched",
                            value=len(rt.budgets))
