"""Thin translation between HTTP and the engine: the extender's verbs, and the Flask handlers.

Owns: each verb from its body's bytes to its status and reply (``answer``: JSON decoding with orjson,
mapping ProtocolError to HTTP 400, a form over its own body cap to 413 and every other failure to the
protocol's own error shape, never a 500 and never a stack trace to the client; metrics and recording
per request), served both as the worker's direct routes (``direct_routes``: no Flask on the path
kube-scheduler calls) and as Flask routes (reading bodies size-capped: other servers, the test client);
and the health/readiness/metrics/explain/fit endpoints. Must not: make decisions.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Callable
from typing import Any

import orjson
from flask import Blueprint, Response, current_app, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from werkzeug.exceptions import RequestEntityTooLarge

from extender.engine.requests import FilterArgs, PreemptResult
from extender.errors import ProtocolError, RefusedError, SubmissionError
from extender.fitting import submission
from extender.http import framing, protocol, serving

log = logging.getLogger(__name__)
bp = Blueprint("extender", __name__)

def json_response(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status=status, mimetype="application/json")


def _ext() -> Any:
    return current_app.extensions["gang_extender"]


def _parse(data: bytes) -> Any:
    if not data:
        raise ProtocolError("request body is empty; expected a JSON object")
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"request body is not valid JSON: {exc}") from None


class BodyTooLarge(RequestEntityTooLarge):
    """413 with the cap that applies (the app's handler shows ``description``)."""


def _caps(ext: Any) -> framing.BodyCaps:
    settings = ext.runtime.settings
    return framing.BodyCaps(settings.max_body_bytes, settings.max_full_nodes_body_bytes)


def _read_body(verb: str) -> bytes:
    """The body, within its path's cap (the serving worker enforces the same caps before this runs)."""
    cap = _caps(_ext()).for_path("/" + verb)
    request.max_content_length = cap
    try:
        return request.get_data(cache=False)
    except RequestEntityTooLarge:
        raise BodyTooLarge(f"request body larger than {cap} bytes") from None


def _filter_args(ext: Any, body: Any, data: bytes, *, names_text: bool) -> FilterArgs:
    """``names_text``: hand the body's bytes to the filter's all-fit shortcut (protocol.node_names_text)."""
    caps = _caps(ext)
    args = protocol.parse_filter_args(body, full_nodes=caps.full_nodes > 0, data=data if names_text else None)
    if args.nodes is None and len(data) > caps.names:  # the NodeNames form's own cap
        raise RefusedError(413, f"request body larger than {caps.names} bytes (the NodeNames form)")
    return args


# Each verb: (ext, parsed body, its bytes, arrival) -> the reply; and the reply to an error that message names.
def _filter(ext: Any, body: Any, data: bytes, _arrival: float) -> Any:
    args = _filter_args(ext, body, data, names_text=True)
    return protocol.render_filter(args, ext.runtime.engine.filter(args))


def _prioritize(ext: Any, body: Any, data: bytes, _arrival: float) -> Any:
    args = _filter_args(ext, body, data, names_text=False)  # prioritize has no use for the NodeNames text
    return protocol.render_priorities(ext.runtime.engine.prioritize(args))


def _bind(ext: Any, body: Any, _data: bytes, arrival: float) -> Any:
    return protocol.render_bind(ext.runtime.engine.bind(protocol.parse_bind_args(body), arrival))


def _preempt(ext: Any, body: Any, data: bytes, _arrival: float) -> Any:
    caps = _caps(ext)
    args = protocol.parse_preempt_args(body, full_pods=caps.full_nodes > 0)
    if "NodeNameToMetaVictims" in body and body["NodeNameToMetaVictims"] is not None and len(data) > caps.names:
        raise RefusedError(413, f"request body larger than {caps.names} bytes (the NodeNameToMetaVictims form)")
    result = ext.runtime.engine.preempt(args)
    if result.dropped:
        log.info("preempt %s/%s: kept %d candidate node(s), dropped %d (e.g. %s)",
                 args.pod["metadata"]["namespace"], args.pod["metadata"]["name"], len(result.kept),
                 len(result.dropped), next(iter(result.dropped.values()))[:300])
    return protocol.render_preempt(result)


VERBS: dict[str, tuple[Callable[[Any, Any, bytes, float], Any], Callable[[str], Any]]] = {
    "filter": (_filter, lambda message: protocol.render_filter_error(None, message)),
    "prioritize": (_prioritize, lambda message: []),
    # The engine answers (and binds) within the caller's timeout counted from when the request's first
    # bytes reached the process, before any wait for a thread (the worker stamps it).
    "bind": (_bind, protocol.render_bind),
    # not ready or an internal error: no candidates (a veto), never kube-scheduler's unchecked victims
    "preempt": (_preempt, lambda message: protocol.render_preempt(PreemptResult({}, {}))),
}


def answer(ext: Any, verb: str, data: bytes, stamped: float | None) -> tuple[int, bytes]:
    """One extender verb's request body to its status and reply (no Flask: the worker's direct routes and
    the Flask routes both call this). ``stamped``: ``time.monotonic()`` when its first bytes arrived."""
    handle, on_error = VERBS[verb]
    arrival = time.time()
    started, cpu = time.perf_counter(), time.thread_time()
    outcome = "ok"
    try:
        problem = ext.runtime.serving_problem()
        if problem:
            outcome, status = "not_ready", 200
            payload = on_error(problem)
        else:
            payload = handle(ext, _parse(data), data, time.monotonic() if stamped is None else stamped)
            status = 200
    except ProtocolError as exc:
        outcome, status = "bad_request", 400
        payload = {"error": str(exc), "verb": verb}
    except RefusedError as exc:  # a form's own body cap
        outcome, status = "too_large", exc.status
        payload = {"error": exc.message, "status": exc.status}
    except RecursionError:  # a value nested ~1,000 deep (orjson accepts 1,024) reached str() or repr()
        outcome, status = "bad_request", 400
        payload = {"error": "request body nests too deeply to be a Kubernetes object", "verb": verb}
    except Exception as exc:  # a bug must not take scheduling down: log it, answer the protocol's error
        outcome, status = "error", 200
        log.exception("%s failed", verb)
        payload = on_error(f"gang-extender internal error in {verb}: {type(exc).__name__}: {exc}")
    reply = orjson.dumps(payload)
    latency = time.perf_counter() - started
    ext.metrics.requests.labels(verb, outcome).inc()
    ext.metrics.latency.labels(verb).observe(latency)
    ext.metrics.cpu.labels(verb).inc(time.thread_time() - cpu)
    if ext.recorder is not None:
        ext.recorder.record(verb, arrival, status, latency, data, reply)
    return status, reply


def direct_routes(ext: Any) -> dict[str, serving.DirectRoute]:
    """The verbs as the serving worker's direct routes (``serving.WithDirectRoutes``)."""
    return {"/" + verb: functools.partial(answer, ext, verb) for verb in VERBS}


def _flask_verb(verb: str) -> Response:
    status, reply = answer(_ext(), verb, _read_body(verb), serving.request_arrival())
    return Response(reply, status=status, mimetype="application/json")


@bp.post("/filter")
def filter_() -> Response:
    return _flask_verb("filter")


@bp.post("/prioritize")
def prioritize() -> Response:
    return _flask_verb("prioritize")


@bp.post("/bind")
def bind() -> Response:
    return _flask_verb("bind")


@bp.post("/preempt")
def preempt() -> Response:
    return _flask_verb("preempt")


@bp.get("/healthz")
def healthz() -> Response:
    return json_response({"status": "ok"})


@bp.get("/readyz")
def readyz() -> Response:
    ready, detail = _ext().runtime.readiness()
    return json_response({"ready": ready, **detail}, 200 if ready else 503)


@bp.get("/metrics")
def metrics() -> Response:
    # content_type, not mimetype: Werkzeug would append a second charset, which Prometheus 3 cannot parse
    return Response(generate_latest(_ext().metrics.registry), content_type=CONTENT_TYPE_LATEST)


@bp.get("/explain/<namespace>/<name>")
def explain(namespace: str, name: str) -> Response:
    """Read-only: what the extender knows about the gangs of group ``namespace/name`` (any kind);
    ``?podGroup=`` and ``?replica=`` narrow a 1.35 Workload down to one pod group / replica."""
    runtime = _ext().runtime
    gangs = runtime.engine.explain(namespace, name, request.args.get("podGroup"), request.args.get("replica"))
    payload = {"namespace": namespace, "name": name, "synced": runtime.synced(), "gangs": gangs}
    return json_response(payload, 200 if gangs else 404)


@bp.post("/fit")
def fit() -> Response:
    """Read-only: what the extender would do with the gang the body's objects would make, as ``kubectl gang
    fit -o json`` answers (the body: one object, a ``List`` or a JSON array of them; ``?namespace=`` for
    objects without one, ``?count=`` copies of a lone Pod or PodTemplate). 400: the objects are not one
    gang; 429: another fit is being answered; 503: the cluster not listed yet, or not answered in time."""
    data = _read_body("fit")
    namespace, raw_count = request.args.get("namespace") or "default", request.args.get("count")

    def read_question() -> submission.Submission:
        objects = _parse(data)
        if isinstance(objects, dict):
            objects = [objects]
        if not isinstance(objects, list):
            raise ProtocolError("the body must be a Kubernetes object, a List, or a JSON array of objects")
        if raw_count is not None and not (re.fullmatch(r"[0-9]{1,6}", raw_count)
                                          and 0 < int(raw_count) <= submission.MAX_PODS):
            raise ProtocolError(f"count must be a whole number from 1 to {submission.MAX_PODS}")
        question = submission.read(objects, namespace, int(raw_count) if raw_count is not None else None)
        submission.require_priorities(question)
        return question

    runtime = _ext().runtime
    if runtime.asking is None:
        return json_response({"error": "this extender answers no fit questions", "status": 404}, 404)
    if not runtime.synced():
        return json_response({"error": "the extender has not finished its first list of the cluster; ask again "
                                       "when /readyz says ready", "status": 503}, 503)
    try:
        answer = runtime.asking.ask(read_question)
    except (ProtocolError, SubmissionError) as exc:
        return json_response({"error": str(exc), "status": 400}, 400)
    except RecursionError:
        return json_response({"error": "request body nests too deeply to be a Kubernetes object", "status": 400}, 400)
    except RefusedError as exc:
        return json_response({"error": exc.message, "status": exc.status}, exc.status)
    return json_response(answer)
