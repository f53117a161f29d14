"""extender.kube.client's request path against a local HTTP server: URL (with a server path prefix), bearer
token, JSON body, and how failures come back."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from extender.errors import KubeError
from extender.kube.client import KubeClient


class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[dict[str, Any]] = []
    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.seen.append({"method": self.command, "path": self.path, "auth": self.headers.get("Authorization"),
                          "type": self.headers.get("Content-Type"), "body": body})
        if "missing" in self.path:
            status, reply = 404, {"kind": "Status", "message": 'pods "missing" not found'}
        else:
            status, reply = 201, {"kind": "Status", "status": "Success"}
        data = orjson.dumps(reply)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = _answer  # noqa: N815 (http.server's handler names)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Recorder.seen = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _client(tmp_path: Path, server_url: str) -> KubeClient:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{server_url}"}}}}]
users: [{{name: u, user: {{token: secret-token}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    return KubeClient(str(kubeconfig))


def test_binding_goes_to_the_server_path_with_the_token(tmp_path: Path, server: str) -> None:
    kube = _client(tmp_path, server + "/k8s/clusters/c-1")  # a server URL with a path, as behind Rancher
    kube.bind("team a", "pod-1", "uid-1", "node-7")
    kube.bind("ns", "pod-2", "", "node-8")
    first, second = _Recorder.seen
    assert first["method"] == "POST"
    assert first["path"] == "/k8s/clusters/c-1/api/v1/namespaces/team%20a/pods/pod-1/binding"
    assert first["auth"] == "Bearer secret-token"
    assert first["type"] == "application/json"
    assert orjson.loads(first["body"]) == {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "pod-1", "namespace": "team a", "uid": "uid-1"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-7"}}
    assert "uid" not in orjson.loads(second["body"])["metadata"]


def test_query_and_patch_content_type(tmp_path: Path, server: str) -> None:
    kube = _client(tmp_path, server)
    kube.annotate_pod("ns", "p", {"a": "b"})
    assert kube.request("GET", "/api/v1/pods", {"limit": 5, "continue": "x y"}) == {"kind": "Status",
                                                                                  "status": "Success"}
    patch, listing = _Recorder.seen
    assert (patch["method"], patch["type"]) == ("PATCH", "application/merge-patch+json")
    assert orjson.loads(patch["body"]) == {"metadata": {"annotations": {"a": "b"}}}
    assert listing["path"] == "/api/v1/pods?limit=5&continue=x+y"


def test_failures_are_kube_errors_with_the_servers_message(tmp_path: Path, server: str) -> None:
    kube = _client(tmp_path, server)
    with pytest.raises(KubeError) as refused:
        kube.bind("ns", "missing", "", "node-1")
    assert refused.value.status == 404
    assert 'pods "missing" not found' in str(refused.value)
    assert kube.read_pod("ns", "missing") is None
    unreachable = _client(tmp_path, "http://127.0.0.1:9")  # discard port: connection refused
    with pytest.raises(KubeError) as down:
        unreachable.request("GET", "/api", timeout=2.0)
    assert down.value.status == 0


def test_the_server_keeps_a_connection_per_bind_in_flight_beside_its_watches(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Found in review: with 32 Bindings in flight in one urllib3 pool of 32 that the watches also hold
    connections of, Bindings overflowed it ("Connection pool is full, discarding connection") and each
    paid for a new connection. The server sizes the pool by --bind-parallelism plus the watches and
    writers."""
    from extender.config import Settings
    from extender.wiring import composition

    seen: dict[str, Any] = {}

    class StopError(Exception):
        pass

    def client(*args: Any, **kwargs: Any) -> KubeClient:
        seen.update(kwargs)
        raise StopError

    monkeypatch.setattr(composition, "KubeClient", client)
    with pytest.raises(StopError):
        composition.from_api(Settings(bind_parallelism=40))
    assert seen["connections"] >= 40 + 12  # nodes, pods, 6 group APIs and versions, PDBs, Topologies, writers
    kube = _client(tmp_path, "http://127.0.0.1:9")
    assert kube._pool.pool.maxsize == 32  # type: ignore[union-attr]  # kubectl gang: the default
    kubeconfig = tmp_path / "kubeconfig"
    assert KubeClient(str(kubeconfig), connections=56)._pool.pool.maxsize == 56  # type: ignore[union-attr]
