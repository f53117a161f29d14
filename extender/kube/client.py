"""The Kubernetes API edge: the only module that imports the ``kubernetes`` client.

Owns: loading credentials (in-cluster, then kubeconfig), raw JSON requests through the client's
connection pool (objects are parsed with orjson, never into the generated models: 37.x models drop
``spec.workloadRef`` and cost ~25x more to build), paginated lists, streaming watches, API discovery,
``pods/binding``, evictions, Events, and the status of group objects (server-side apply). Every failure
leaves this module as ``KubeError``, but an eviction's: ``BudgetError`` (429: a PodDisruptionBudget
refused), ``GoneError`` (the pod is gone) or ``EvictionError``. Must not: hold cluster state or make
scheduling decisions.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

import orjson
import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

from extender.errors import BudgetError, EvictionError, GoneError, KubeError

log = logging.getLogger(__name__)


def _failure(exc: BaseException) -> KubeError:
    if isinstance(exc, KubeError):
        return exc
    return KubeError(f"{type(exc).__name__}: {exc}")


class PagedList:
    """A collection listed one page at a time, so a relist of 150,000 pods never holds them all as
    raw JSON at once. ``resource_version`` (to watch from) is known once iteration has finished."""

    def __init__(self, kube: KubeClient, path: str, page_size: int,
                 query: Mapping[str, str] | None = None) -> None:
        self._kube, self._path, self._page_size = kube, path, page_size
        self._query = dict(query or {})
        self.resource_version = ""

    def __iter__(self) -> Iterator[dict[str, Any]]:
        query: dict[str, Any] = {**self._query, "limit": self._page_size}
        while True:
            page = self._kube.request("GET", self._path, query, timeout=120.0)
            yield from page.get("items") or []
            metadata = page.get("metadata") or {}
            token = metadata.get("continue")
            if not token:
                self.resource_version = str(metadata.get("resourceVersion") or "")
                return
            query = {**self._query, "limit": self._page_size, "continue": token}


def kubeconfig_namespace(kubeconfig: str | None = None, context: str | None = None) -> str:
    """The namespace of the kubeconfig's context (``context``, else its current one), as kubectl
    defaults ``-n``; "default" when it names none or there is no kubeconfig."""
    try:
        contexts, current = k8s_config.list_kube_config_contexts(config_file=kubeconfig)
    except (ConfigException, OSError):
        return "default"
    chosen = next((c for c in contexts or [] if c.get("name") == context), None) if context else current
    return str(((chosen or {}).get("context") or {}).get("namespace") or "default")


class KubeClient:
    """Raw JSON access to one API server."""

    def __init__(self, kubeconfig: str | None = None, context: str | None = None, *,
                 connections: int = 32) -> None:
        """Credentials from ``kubeconfig`` (and its ``context``, else its current one); without a file:
        in-cluster, then ``$KUBECONFIG`` / ``~/.kube/config`` as kubectl reads them. ``connections``:
        the most kept open to the API server (watches hold one each for minutes; a request beyond
        them opens a connection and closes it after)."""
        configuration = k8s_client.Configuration()
        try:
            if kubeconfig or context:
                k8s_config.load_kube_config(config_file=kubeconfig, context=context,
                                            client_configuration=configuration)
            else:
                try:
                    k8s_config.load_incluster_config(client_configuration=configuration)
                except ConfigException:
                    k8s_config.load_kube_config(client_configuration=configuration)
        except (ConfigException, OSError) as exc:
            raise KubeError(f"cannot load Kubernetes credentials: {exc}") from None
        configuration.connection_pool_maxsize = connections
        self._configuration = configuration
        self._api = k8s_client.ApiClient(configuration)
        manager = self._api.rest_client.pool_manager
        self._pool: urllib3.PoolManager | urllib3.HTTPConnectionPool
        if type(manager) is urllib3.PoolManager:  # no proxy: the API server's own pool, URLs by path
            prefix = urllib3.util.parse_url(configuration.host).path or ""  # e.g. a Rancher-proxied server
            self._pool, self._host = manager.connection_from_url(configuration.host), prefix.rstrip("/")
        else:  # a proxy manager needs absolute URLs on every request
            self._pool, self._host = manager, configuration.host
        self.server = configuration.host

    def close(self) -> None:
        self._api.close()

    # ------------------------------------------------------------------------------- raw access
    def _call(self, method: str, path: str, query: Mapping[str, Any] | None = None,
              body: Any = None, timeout: float | tuple[float, float] = 30.0,
              content_type: str = "application/json") -> Any:
        """One request; returns the urllib3 response with its body unread.

        Straight to the client's urllib3 pool (its TLS, proxy and credentials): the generated client's
        request pipeline (parameter sanitising, stdlib JSON, response wrapping) cost ~0.17 ms of CPU
        per Binding, a fifth of the call (bench/request_overhead.py), and one Binding is made per
        scheduled pod."""
        url = self._host + path + ("?" + urlencode(query) if query else "")
        headers = {"Accept": "application/json", "Content-Type": content_type}
        # The client's one auth setting: a bearer token (its refresh hook renews an expiring one).
        token = self._configuration.get_api_key_with_prefix("BearerToken", alias="authorization")
        if token:
            headers["Authorization"] = token
        limit = (urllib3.Timeout(connect=timeout[0], read=timeout[1]) if isinstance(timeout, tuple)
                 else urllib3.Timeout(total=timeout))
        try:
            # retries=False: urllib3 would otherwise resend a request (a Binding too) up to three times,
            # each with a fresh timeout, so a call bounded by its caller's deadline could land long after it
            raw = self._pool.urlopen(method, url, body=None if body is None else orjson.dumps(body),
                                     headers=headers, timeout=limit, preload_content=False, retries=False)
        except (urllib3.exceptions.HTTPError, OSError, ValueError, TypeError) as exc:
            raise _failure(exc) from None
        if raw.status >= 300:
            data = raw.read()
            raw.release_conn()
            message = raw.reason
            with contextlib.suppress(orjson.JSONDecodeError, AttributeError):
                message = orjson.loads(data).get("message") or message
            raise KubeError(f"{method} {path}: {raw.status} {message}", raw.status)
        return raw

    def request(self, method: str, path: str, query: Mapping[str, Any] | None = None,
                body: Any = None, timeout: float = 30.0, content_type: str = "application/json") -> Any:
        """A request whose JSON reply is parsed and returned."""
        raw = self._call(method, path, query, body, timeout, content_type)
        try:
            data = raw.read()
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _failure(exc) from None
        finally:
            raw.release_conn()
        try:
            return orjson.loads(data) if data else None
        except orjson.JSONDecodeError as exc:
            raise KubeError(f"{method} {path}: reply is not JSON: {exc}") from None

    # --------------------------------------------------------------------------- list and watch
    def list(self, path: str, page_size: int = 500, query: Mapping[str, str] | None = None) -> PagedList:
        """The items of a collection (``query``: e.g. a ``fieldSelector``), fetched page by page as they
        are consumed."""
        return PagedList(self, path, page_size, query)

    def watch(self, path: str, resource_version: str, timeout_seconds: int = 300
              ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Stream ``(type, object)`` watch events until the server closes the watch."""
        query = {"watch": "true", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
                 "timeoutSeconds": timeout_seconds}
        raw = self._call("GET", path, query, timeout=(10.0, timeout_seconds + 30.0))
        try:
            for line in raw:
                if line.strip():
                    event = orjson.loads(line)
                    yield str(event.get("type")), event.get("object") or {}
        except (urllib3.exceptions.HTTPError, OSError, orjson.JSONDecodeError) as exc:
            raise _failure(exc) from None
        finally:
            raw.release_conn()

    # -------------------------------------------------------------------------------- discovery
    def serves(self, group: str, version: str, resource: str) -> bool:
        """Whether the API server serves ``group/version`` ``resource`` right now."""
        try:
            found = self.request("GET", f"/apis/{group}/{version}", timeout=10.0)
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return any(r.get("name") == resource for r in (found or {}).get("resources") or [])

    # ---------------------------------------------------------------------------------- writes
    def bind(self, namespace: str, name: str, uid: str, node: str, timeout: float = 10.0) -> None:
        body = {"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name, "namespace": namespace, **({"uid": uid} if uid else {})},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}/binding"
        self.request("POST", path, body=body, timeout=timeout)

    def evict(self, namespace: str, name: str, uid: str, timeout: float = 10.0) -> None:
        """Create a policy/v1 Eviction of the pod (of that ``uid`` only, when given): the API server
        checks its PodDisruptionBudgets and deletes it gracefully. Raises ``BudgetError`` when a budget
        refuses (429), ``GoneError`` when the pod (that uid) no longer exists, ``EvictionError`` for any
        other failure (a timeout included: the pod may or may not be evicted)."""
        body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                                "metadata": {"name": name, "namespace": namespace}}
        if uid:
            body["deleteOptions"] = {"preconditions": {"uid": uid}}
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}/eviction"
        try:
            self.request("POST", path, body=body, timeout=timeout)
        except KubeError as exc:
            if exc.status == 429:
                raise BudgetError(str(exc)) from None
            if exc.status == 404 or (exc.status == 409 and "the UID in the precondition" in str(exc)):
                raise GoneError(str(exc)) from None  # 409: the name now belongs to another pod
            raise EvictionError(str(exc)) from None

    def read_pod(self, namespace: str, name: str, timeout: float = 10.0) -> dict[str, Any] | None:
        try:
            pod: dict[str, Any] = self.request(
                "GET", f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}",
                timeout=timeout)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        return pod

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        """Merge ``annotations`` into a pod's metadata (a pod update: kube-scheduler requeues it)."""
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
        self.request("PATCH", path, body={"metadata": {"annotations": dict(annotations)}}, timeout=10.0,
                     content_type="application/merge-patch+json")

    def remove_scheduling_gate(self, namespace: str, name: str, uid: str, gate: str, index: int) -> None:
        """Remove scheduling gate ``gate``, at ``index`` in ``spec.schedulingGates``, from pod ``uid``: a JSON
        patch that tests the uid and the gate's name first, so a pod re-created under the name, or whose gates
        changed since they were read, is left as it is (422, raised)."""
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
        self.request("PATCH", path, body=[
            {"op": "test", "path": "/metadata/uid", "value": uid},
            {"op": "test", "path": f"/spec/schedulingGates/{index}/name", "value": gate},
            {"op": "remove", "path": f"/spec/schedulingGates/{index}"},
        ], timeout=10.0, content_type="application/json-patch+json")

    def apply_status(self, body: Mapping[str, Any], resource: str, field_manager: str = "gang-extender") -> None:
        """Server-side apply of ``body`` (apiVersion, kind, metadata.name/namespace, status) to the
        object's ``/status`` subresource, without ``force``: fields another manager owns (kube-scheduler
        writing the same condition) come back as a 409 conflict instead of being taken over."""
        metadata = body["metadata"]
        path = (f"/apis/{body['apiVersion']}/namespaces/{quote(metadata['namespace'], safe='')}/{resource}/"
                f"{quote(metadata['name'], safe='')}/status")
        self.request("PATCH", path, {"fieldManager": field_manager}, body=dict(body), timeout=10.0,
                     content_type="application/apply-patch+yaml")

    def create_event(self, target: Mapping[str, str], event_type: str, reason: str, message: str,
                     annotations: Mapping[str, str] | None = None) -> None:
        """A core/v1 Event on ``target`` (apiVersion, kind, namespace, name, uid): ``kubectl describe``
        of that object and ``kubectl get events`` show it; ``annotations`` on the Event itself (the
        ``GangState`` Event's published explanation)."""
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        involved = {key: target[key] for key in ("apiVersion", "kind", "namespace", "name")}
        if target.get("uid"):
            involved["uid"] = target["uid"]
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{target['name']}.", "namespace": target["namespace"],
                         **({"annotations": dict(annotations)} if annotations else {})},
            "involvedObject": involved,
            "type": event_type, "reason": reason, "message": message[:1024],
            "source": {"component": "gang-extender"}, "reportingComponent": "gang-extender",
            "reportingInstance": socket.gethostname(), "firstTimestamp": now, "lastTimestamp": now,
            "count": 1,
        }
        self.request("POST", f"/api/v1/namespaces/{quote(target['namespace'], safe='')}/events", body=body)
