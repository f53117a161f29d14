"""Starting gunicorn: exactly one worker of extender/http/serving.py's gthread class (gang state, the
mirror and held binds must live in one process; see docs/decisions/0001-one-worker.md), with enough
open files for every connection it may hold.

Owns: gunicorn's settings, the open-file limit, and starting the metrics-only listener
(``--metrics-address``, extender/http/metrics_listener.py) in the worker. Must not: parse arguments or
hold state.
"""

from __future__ import annotations

import logging
import ssl
from typing import Any

from extender import config, native

KEEPALIVE_CONNECTIONS = 256  # idle or unfinished client connections on top of one per thread
FDS_BESIDES_CONNECTIONS = 128  # listening socket, watches, API connection pool, log and record files


def worker_connections(threads: int) -> int:
    """The worker's connection cap: it bounds file descriptors, never who gets in. At the cap the worker
    (extender/http/connections.py) closes the oldest unfinished or idle connection to accept the next one, so
    kube-scheduler is not refused however many idle or slow connections others open."""
    return threads + KEEPALIVE_CONNECTIONS


def ensure_open_files(threads: int) -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE so every connection gunicorn accepts has a descriptor (each held bind
    is one socket); returns (needed, soft limit now). A hard limit below the need is left alone and logged."""
    import resource

    needed = worker_connections(threads) + FDS_BESIDES_CONNECTIONS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        soft = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    if soft != resource.RLIM_INFINITY and soft < needed:
        logging.getLogger(__name__).warning(
            "open-file limit %d (hard) is below the %d that --threads %d needs: raise the container's nofile "
            "ulimit or lower --threads, or connections beyond it are refused", soft, needed, threads)
    return needed, soft


def serve(settings: config.Settings) -> None:
    from gunicorn.app.base import BaseApplication

    from extender.http import connections, framing, routes, serving
    from extender.http.app import create_app  # looked up now: bench/filter_latency.py wraps it

    limits = connections.Limits(framing.BodyCaps(settings.max_body_bytes, settings.max_full_nodes_body_bytes),
                            settings.client_timeout_seconds, settings.request_buffer_bytes)

    class _Gunicorn(BaseApplication):  # type: ignore[misc]
        def load_config(self) -> None:
            options: dict[str, Any] = {
                "bind": f"{settings.host}:{settings.port}",
                "workers": 1,                 # never more: see docs/decisions/0001-one-worker.md
                "worker_class": serving.worker_class(limits),  # gthread reading requests in its poller
                "threads": settings.threads,  # each held bind occupies a thread
                "worker_connections": worker_connections(settings.threads),
                "timeout": 120,
                "graceful_timeout": 10,
                "keepalive": 75,              # kube-scheduler reuses its connections
                "preload_app": False,         # create_app (and watch threads) run in the worker
                "accesslog": "-" if settings.log_level.upper() == "DEBUG" else None,
                "loglevel": settings.log_level.lower(),
            }
            if settings.tls_cert_file:  # HTTPS; kube-scheduler: extenders[].enableHTTPS + tlsConfig
                options.update(certfile=settings.tls_cert_file, keyfile=settings.tls_key_file)
                if settings.tls_client_ca_file:  # only clients with a certificate this CA signed
                    options.update(ca_certs=settings.tls_client_ca_file, cert_reqs=ssl.CERT_REQUIRED)
            if "http_protocols" in self.cfg.settings:
                options["http_protocols"] = "h1"  # the worker frames HTTP/1.1 only
            if "control_socket_disable" in self.cfg.settings:  # gunicorn >= 25
                # Its control socket can add workers at run time, which would break the one-worker rule.
                options["control_socket_disable"] = True
            for key, value in options.items():
                self.cfg.set(key, value)

        def load(self) -> Any:
            app = create_app(settings)
            ext = app.extensions["gang_extender"]
            metrics = config.metrics_address(settings)
            if metrics is not None:  # in the worker, beside the app whose registry it serves
                from extender.http import metrics_listener

                metrics_listener.start(*metrics, ext.metrics.registry)
            return serving.WithDirectRoutes(app, routes.direct_routes(ext))  # the verbs without Flask

    ensure_open_files(settings.threads)
    logging.getLogger(__name__).info("gang-extender %s, %s", native.package_version(), native.hot_path().summary())
    _Gunicorn().run()
