"""A tap on the API server's Bindings: a validating admission webhook for ``pods/binding`` (threads in the
test process), used by tests/e2e/churn.py and tests/e2e/test_takeover_release.py.

The API server calls it for every Binding created in the namespaces it watches, before the Binding is
stored: so each record says when a Binding reached the API server (``received``) and the earliest moment
it could have been committed (``answered``, when the tap allowed it), with the pod, its uid and the node.
A pod's ``spec.nodeName`` on a watch says the latest moment; together they bound the commit time far more
tightly than a watch alone.

By default every Binding is allowed at once. ``policy`` (a function of the record) may instead answer
``"hold"``: the Binding waits in the tap until the test calls ``decide(record, allowed)`` (or
``HOLD_LIMIT`` passes: then it is denied), so a test can stop a release between two of its Bindings.
``failurePolicy: Fail``: a Binding the tap does not answer is not made.

Times are ``time.monotonic()`` of the test process (as observe.py's). Must not: decide what is correct.
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from controlplane import ApiError, ControlPlane, wait_for

HOLD_LIMIT = 25.0  # seconds a held Binding waits for ``decide`` (the webhook's timeoutSeconds is 30)
PROBE = "bindtap-probe"
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


@dataclass
class TapRecord:
    """One Binding the API server asked the tap about."""

    namespace: str
    pod: str
    uid: str  # the Binding's metadata.uid ("" if its sender gave none)
    node: str
    user: str
    received: float
    dry_run: bool
    answered: float | None = None
    allowed: bool | None = None
    _decided: threading.Event = field(default_factory=threading.Event, repr=False)
    _verdict: bool = field(default=False, repr=False)


Policy = Callable[[TapRecord], str]  # "allow", "deny" or "hold"


class BindingTap:
    """The webhook server and its ValidatingWebhookConfiguration (see the module docstring)."""

    def __init__(self, cp: ControlPlane, namespaces: list[str], *, name: str = "e2e-binding-tap",
                 policy: Policy | None = None) -> None:
        assert cp.pki is not None
        self.cp, self.namespaces, self.name = cp, list(namespaces), name
        self.policy: Policy = policy or (lambda record: "allow")
        self._lock = threading.Lock()
        self._records: list[TapRecord] = []
        self._changed = threading.Condition(self._lock)
        pair = cp.pki.issue(f"{name}-serving", name, server_ips=["127.0.0.1"])
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(str(pair.cert), str(pair.key))
        self._ca = cp.pki.ca.cert.read_bytes()
        self._server = _TlsServer(("127.0.0.1", 0), self._handler_class(), self._context)
        self._server.daemon_threads = True
        self.url = f"https://127.0.0.1:{self._server.server_address[1]}/validate"
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"bindtap-{name}", daemon=True)

    # ------------------------------------------------------------------------------ lifecycle
    def __enter__(self) -> BindingTap:
        self._thread.start()
        config = {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": self.name},
            "webhooks": [{
                "name": "bindings.e2e.gang-extender.io",
                "clientConfig": {"url": self.url, "caBundle": base64.b64encode(self._ca).decode()},
                "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                           "resources": ["pods/binding"], "scope": "Namespaced"}],
                "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                                            "values": self.namespaces}]},
                "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 30, "matchPolicy": "Equivalent",
            }],
        }
        self.cp.request("POST", WEBHOOKS, config)
        self._wait_active()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(ApiError):
            self.cp.request("DELETE", WEBHOOKS + f"/{self.name}")
        with self._lock:
            held = [r for r in self._records if r.answered is None]
        for record in held:
            self.decide(record, True)
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def _wait_active(self) -> None:
        """Until the API server calls the tap: a dry-run Binding of a gated probe pod in the first namespace
        (the API server picks a new webhook configuration up within a second or so)."""
        ns = self.namespaces[0]
        probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": PROBE, "namespace": ns},
                 "spec": {"schedulingGates": [{"name": "e2e.gang-extender.io/probe"}],
                          "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}
        self.cp.request("POST", f"/api/v1/namespaces/{ns}/pods", probe)
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": PROBE, "namespace": ns},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": "bindtap-nowhere"}}

        def seen() -> bool:
            with contextlib.suppress(ApiError):
                self.cp.request("POST", f"/api/v1/namespaces/{ns}/pods/{PROBE}/binding?dryRun=All", binding)
            return any(r.pod == PROBE for r in self.records(include_dry_run=True))

        try:
            wait_for(seen, timeout=30, interval=0.2, what="the API server calling the binding tap")
        finally:
            self.cp.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{PROBE}?gracePeriodSeconds=0")

    # ------------------------------------------------------------------------------ records
    def records(self, *, include_dry_run: bool = False) -> list[TapRecord]:
        with self._lock:
            return [r for r in self._records if include_dry_run or not r.dry_run]

    def wait(self, condition: Callable[[list[TapRecord]], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not condition([r for r in self._records if not r.dry_run]):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
                self._changed.wait(min(left, 0.5))

    def decide(self, record: TapRecord, allowed: bool) -> None:
        """Answer a held Binding."""
        record._verdict = allowed
        record._decided.set()

    # ------------------------------------------------------------------------------ serving
    def _review(self, body: bytes) -> dict[str, Any]:
        received = time.monotonic()
        review = json.loads(body)
        request = review.get("request") or {}
        obj = request.get("object") or {}
        meta = obj.get("metadata") or {}
        record = TapRecord(namespace=str(request.get("namespace") or meta.get("namespace") or ""),
                           pod=str(request.get("name") or meta.get("name") or ""), uid=str(meta.get("uid") or ""),
                           node=str((obj.get("target") or {}).get("name") or ""),
                           user=str((request.get("userInfo") or {}).get("username") or ""),
                           received=received, dry_run=bool(request.get("dryRun")))
        with self._changed:
            self._records.append(record)
            self._changed.notify_all()
        verdict = "allow" if record.dry_run else self.policy(record)
        held = verdict == "hold"
        allowed = (record._decided.wait(HOLD_LIMIT) and record._verdict) if held else verdict == "allow"
        with self._changed:
            record.answered, record.allowed = time.monotonic(), allowed
            self._changed.notify_all()
        response: dict[str, Any] = {"uid": request.get("uid"), "allowed": allowed}
        if not allowed:
            response["status"] = {"code": 403, "message": "e2e binding tap: denied by the test"}
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        tap = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # the API server keeps its connections to a webhook alive

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    data = json.dumps(tap._review(body)).encode()
                    status = 200
                except (ValueError, AttributeError) as exc:
                    data, status = f"bad review: {exc}".encode(), 400
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


class _TlsServer(ThreadingHTTPServer):
    """HTTPS; the handshake happens in the connection's own thread, not in the accepting one."""

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], context: ssl.SSLContext
                 ) -> None:
        self.context = context
        super().__init__(address, handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = self.socket.accept()
        return self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), address

    def finish_request(self, request: Any, client_address: Any) -> None:
        try:
            request.settimeout(60)
            request.do_handshake()
        except OSError:
            return
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a connection the API server dropped (its call cancelled) is not the test's business
