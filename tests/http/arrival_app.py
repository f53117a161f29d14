"""A WSGI app for tests/http/test_serving.py: answers what the serving worker stamped on the request.

``/sleep?SECONDS`` sleeps (to keep the only thread busy); every path answers JSON with
``request_arrival()`` and ``time.monotonic()`` when the handler started (one clock for all processes).
``application`` adds the worker's direct routes: ``POST /direct`` answers the same with ``"direct": true``
and the stamp it was handed (a body starting with a number: sleep that long first); ``POST /broken`` raises.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from extender.http.serving import WithDirectRoutes, request_arrival


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    started = time.monotonic()
    arrival = request_arrival()
    if environ["PATH_INFO"] == "/sleep":
        time.sleep(float(environ.get("QUERY_STRING") or 0))
    body = json.dumps({"arrival": arrival, "started": started, "direct": False}).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


def direct(body: bytes, arrival: float | None) -> tuple[int, bytes]:
    started = time.monotonic()
    time.sleep(float(body.split()[0]) if body.strip() else 0)
    return 200, json.dumps({"arrival": arrival, "started": started, "direct": True, "body": body.decode()}).encode()


def broken(body: bytes, arrival: float | None) -> tuple[int, bytes]:
    raise RuntimeError("a bug in a direct route")


application = WithDirectRoutes(app, {"/direct": direct, "/broken": broken})
