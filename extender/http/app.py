"""The Flask application factory.

Owns: ``create_app()``: building (or accepting) the Runtime, its metrics, the routes, JSON error
handlers for every HTTP error (404, 405, 413, ...), and starting the watch threads. gunicorn calls it
inside its single worker (no preload), so the threads live in the process that serves requests.
Must not: hold state of its own beyond ``app.extensions["gang_extender"]``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from flask import Flask, Response
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from extender.config import Settings
from extender.files.recording import RequestRecorder
from extender.http import routes
from extender.http.metrics import Metrics
from extender.wiring.composition import build
from extender.wiring.runtime import Runtime

log = logging.getLogger(__name__)


@dataclass
class Extension:
    runtime: Runtime
    metrics: Metrics
    recorder: RequestRecorder | None = None


def create_app(settings: Settings | None = None, runtime: Runtime | None = None) -> Flask:
    settings = settings or (runtime.settings if runtime else Settings())
    runtime = runtime or build(settings)
    app = Flask("gang_extender")
    app.url_map.merge_slashes = False  # "/explain/a//b" (a name with an encoded "/") is a 404, not a redirect
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    recorder = RequestRecorder(settings.record_file, settings.record_max_bytes) if settings.record_file else None
    app.extensions["gang_extender"] = Extension(runtime, Metrics(runtime), recorder)
    app.register_blueprint(routes.bp)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        message = exc.description or exc.name
        if status == 413 and not isinstance(exc, routes.BodyTooLarge):
            message = f"request body larger than {settings.max_body_bytes} bytes"
        response = routes.json_response({"error": message, "status": status}, status)
        if isinstance(exc, MethodNotAllowed) and exc.valid_methods:  # RFC 9110: a 405 names what is allowed
            response.headers["Allow"] = ", ".join(exc.valid_methods)
        return response

    runtime.start()
    return app
